"""The recorded H200 corruption sweep under client traffic (tests/fixtures/h200-kvcorrupt, made with
benchmarks/h200_kvcorrupt.sh: vLLM 0.26.0 in graph mode, the 1B random Llama, the test-only plugin
corrupting cached KV blocks inside the server) holds together, and docs/boot-verify.md states what it
shows: no clean probe failed under 4 or 16 client streams (30 each), the plugin really changed KV values
in every corrupted trial (its own log lines say how many), strong corruption was caught in every trial,
and mild corruption was missed under traffic, which is why gating verification runs out of the pool; and the
server's log, read by boot-verify's log check, shows none of it."""

from __future__ import annotations

import json
import lzma
import re
from pathlib import Path
from typing import Any

import pytest

from vfleet.verify.log.check import describe_event, scan_faults
from vfleet.verify.log.graphs import graph_mode_per_model
from vfleet.verify.log.parse import parse

ROOT = Path(__file__).resolve().parents[3]
SWEEP = ROOT / "tests" / "fixtures" / "h200-kvcorrupt"
STREAMS = [4, 16]
CHANGED = re.compile(
    r"vfleet-kvcorrupt: request \S+: corrupted (\d+) cached block\(s\) \((\w+), strength ([\d.e-]+)\) "
    r"of \d+; changed (\d+) of (\d+) values"
)


def _sweep(streams: int) -> dict[str, Any]:
    (data,) = json.loads((SWEEP / f"random-c{streams}.json").read_text())
    assert data["variant"] == f"random-c{streams}" and data["streams"] == streams
    return dict(data)


def _rows(streams: int) -> dict[str, dict[str, Any]]:
    return {r["setting"]: r for r in _sweep(streams)["rows"]}


@pytest.mark.parametrize("streams", STREAMS)
def test_no_clean_probe_failed_under_traffic(streams: int) -> None:
    data = _sweep(streams)
    clean = _rows(streams)["clean (mode=off)"]
    assert clean["trials"] >= 30 and clean["corrupted"] == clean["changed"] == 0, clean
    assert clean["probe"] == 0 and clean["text_only"] == 0 and clean["hit_problems"] == 0, clean
    # The traffic was real: every stream request answered, at least 10 a second through the window.
    assert data["stream_errors"] == 0 and data["stream_requests"] >= 10 * data["window_s"], data
    # ... and it made the server noisy: the clean gaps were not 0, and the noise rule absorbed them.
    assert clean["median_gap"] > 0.0, clean


@pytest.mark.parametrize("streams", STREAMS)
def test_every_corrupted_trial_changed_kv_and_strong_corruption_is_caught(streams: int) -> None:
    rows = _rows(streams)
    corrupted = [r for s, r in rows.items() if s != "clean (mode=off)"]
    assert len(corrupted) == 10
    for r in corrupted:
        assert r["trials"] >= 3 and r["corrupted"] == r["changed"] == r["trials"], r
        assert r["missed_changed"] == r["trials"] - r["probe"], r
    for s in ("mode=noise,strength=1", "mode=noise,strength=0.1", "mode=zeros", "mode=zeros,blocks=one"):
        assert rows[s]["probe"] == rows[s]["trials"], rows[s]
    # Under traffic the allowance (2 x the noise floor) hides a mild corruption: 0.01 and below went
    # unseen here, although the plugin changed KV values in every one of those trials.
    for s in ("mode=noise,strength=0.01", "mode=noise,strength=1e-05", "mode=noise,strength=0.01,blocks=one"):
        assert rows[s]["probe"] == 0, rows[s]


def test_the_plugin_log_shows_the_changes() -> None:
    """The server's log (both sweeps) has one plugin line per corrupted request, each naming a real change;
    every corrupted setting of the sweep appears in it."""
    log = lzma.decompress((SWEEP / "boot-random.log.xz").read_bytes()).decode()
    lines = CHANGED.findall(log)
    trials = sum(r["trials"] for n in STREAMS for s, r in _rows(n).items() if s != "clean (mode=off)")
    assert len(lines) >= trials == 60
    assert all(0 < int(changed) <= int(total) for *_, changed, total in lines)
    assert {(mode, float(strength)) for _, mode, strength, _, _ in lines} >= {
        ("noise", x) for x in (1, 0.1, 0.01, 1e-3, 1e-4, 1e-5, 1e-6)
    } | {("zeros", 1.0)}
    assert "Graph capturing finished" in log and "Using FLASH_ATTN" in log and "v0.26.0" in log


def test_the_log_check_sees_nothing_of_the_corruption() -> None:
    """What the sweep shows about the log check: the same server log, read by boot-verify's own log reader, is a
    graph-mode boot of the target with no fault in it, although 60 requests read KV blocks the plugin changed.
    Silent corruption prints nothing; only the integrity probe sees it. The same scan finds a fault added to this
    log, so it did read the log."""
    text = lzma.decompress((SWEEP / "boot-random.log.xz").read_bytes()).decode()
    log = parse(text)  # once: the scan reads 23,500 lines
    (graphs,) = graph_mode_per_model(log)
    assert graphs.role == "target" and graphs.ok and "Graph capturing finished" in graphs.seen, graphs
    assert [describe_event(e) for e in scan_faults(log, graphs_expected=True).denied] == []
    tail = "\n".join(text.splitlines()[-500:])  # the serving part, where the corrupted requests ran
    fault = "ERROR 12-01 10:00:00 [core.py:1] CUDA error: an illegal memory access was encountered"
    assert scan_faults(f"{tail}\n{fault}\n", graphs_expected=False).denied


def test_the_docs_table_states_the_recorded_sweep() -> None:
    """docs/boot-verify.md's detection table gives, for each setting, 'caught/trials' at 4 and 16 streams
    exactly as recorded (idle column: an earlier run, see the results page)."""
    doc = (ROOT / "docs" / "boot-verify.md").read_text()
    for setting in _rows(4):
        if setting == "clean (mode=off)":
            continue
        cells = [f"{_rows(n)[setting]['probe']}/{_rows(n)[setting]['trials']}" for n in STREAMS]
        pattern = rf"^\| `{re.escape(setting)}` \| [^|]+ \| {re.escape(cells[0])} \| {re.escape(cells[1])} \|"
        assert re.search(pattern, doc, re.MULTILINE), f"no row for {setting} with {cells} in docs/boot-verify.md"
    clean = [f"{_rows(n)['clean (mode=off)']['probe']}/{_rows(n)['clean (mode=off)']['trials']}" for n in STREAMS]
    assert re.search(rf"^\| clean \| [^|]+ \| {clean[0]} \| {clean[1]} \|", doc, re.MULTILINE), clean
