"""The log checks know vLLM 0.34.0's wording (issue 24, item 4).

vfleet.verify.log.wording.WORDING says, per base, where vLLM prints each line the checks read; its
literals are held to the real source trees by tests/integration/judge/test_log_wording_sources.py. Here: the
table's own consistency, and the checks on logs in 0.34's wording (tests/fixtures/logs/v0.34, made
from the recorded H200 logs by derive_0_34.py with 0.34's format strings)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vfleet import pins
from vfleet.profiles import Verify
from vfleet.verify.log import allow as logallow
from vfleet.verify.log import check as logcheck
from vfleet.verify.log import graphs as loggraphs
from vfleet.verify.log import parse as logparse
from vfleet.verify.log import requests as logrequests
from vfleet.verify.log import shapes
from vfleet.verify.log import wording as logwording
from vfleet.verify.log.parse import parse
from vfleet.verify.log.rules import KNOWN_VERSIONS
from vfleet.verify.log.wording import WORDING, Source, Wording

REPO = Path(__file__).parents[3]
V034 = REPO / "tests" / "fixtures" / "logs" / "v0.34"
H200 = Verify(max_model_len=4096, min_kv_tokens=40_000, graph_mode=True, attention_backend="FLASH_ATTN")
BASES = list(pins.load(REPO / "versions.json").bases)


@pytest.mark.parametrize("w", WORDING, ids=lambda w: w.id)
def test_each_example_is_read_by_the_pattern_its_check_uses(w: Wording) -> None:
    assert w.examples
    for example in w.examples:
        assert w.pattern.search(example), (w.id, example)


#: Patterns of the log modules that read no message vLLM words itself, and why (everything else must be
#: in WORDING, so that each base's source is searched for it).
NOT_WORDING = {
    "SPEC_ARGS_RE": "reads the non-default args dict, whose keys are argparse's, not a worded message",
    "DRAFT_CONFIG_EAGER_RE": "reads a config field's value (enforce_eager=True) inside the speculative config",
    "V1_RUNNER_SRC_RE": "reads the record's file name, not its message",
}


def _uncovered_patterns(table: tuple[Wording, ...]) -> list[str]:
    covered = {id(w.pattern) for w in table}
    others = (loggraphs, logparse, logallow, logrequests)
    found = {k: v for k, v in vars(loggraphs).items() if isinstance(v, re.Pattern)}
    found |= {  # logcheck's own patterns (it re-exports the other modules' names too)
        k: v for k, v in vars(logcheck).items() if isinstance(v, re.Pattern) and not any(k in vars(m) for m in others)
    }
    found |= {f"VERSION_RES[{i}]": v for i, v in enumerate(shapes.VERSION_RES)} | {"READY_RE": shapes.READY_RE}
    return sorted(k for k, v in found.items() if id(v) not in covered and k not in NOT_WORDING)


def test_every_pattern_that_reads_vllm_wording_has_an_entry() -> None:
    """A check that starts reading a new line must say where each base prints it: a pattern of the log
    modules with no entry (and no reason in NOT_WORDING) fails here, by name."""
    assert _uncovered_patterns(WORDING) == []
    without = tuple(w for w in WORDING if w.id not in {"kv-cache-size", "graph-capture-finished"})
    assert _uncovered_patterns(without) == ["GRAPH_DONE_RE", "KV_RE"]


def test_every_base_of_versions_json_is_covered_for_every_line() -> None:
    assert len(BASES) >= 2
    assert logwording.uncovered(BASES) == []
    assert logwording.bases_known() == BASES
    # what logwording.json says a base no longer prints comes with why
    for base, block in logwording.sources().items():
        for wid, src in block.items():
            assert isinstance(src, Source) or len(src) > 20, (base, wid, src)


def test_a_base_without_wording_is_named() -> None:
    """A base added to versions.json but not to logwording.json: every line it would read is named; so is
    a line the base's block leaves out, and an entry that names no wording."""
    found = logwording.uncovered([*BASES, "9.9.9"])
    assert found == [f"{w.id} on 9.9.9" for w in WORDING]
    data = logwording.sources()
    newest = BASES[-1]
    del data[newest]["kv-cache-size"]
    data[newest]["kv-cache-sizes"] = Source("x.py", "x")
    assert logwording.uncovered(BASES, data) == [
        f"kv-cache-size on {newest}",
        f"kv-cache-sizes on {newest}: no such wording",
    ]


def test_known_versions_reach_the_newest_base() -> None:
    newest = max(tuple(int(x) for x in b.split(".")[:2]) for b in BASES)
    assert KNOWN_VERSIONS[1] >= newest, (KNOWN_VERSIONS, newest)


@pytest.mark.parametrize("name", ["healthy.log", "healthy.json.log", "autofit_full.log"])
def test_healthy_034_logs_pass_every_check(name: str) -> None:
    text = (V034 / name).read_text()
    parsed = parse(text)
    assert parsed.version == "0.34" and parsed.problems == []
    found = {f.check: f for f in logcheck.all_checks(text, H200)}
    assert all(f.ok for f in found.values()), {k: f.message for k, f in found.items() if not f.ok}


def test_the_kv_cache_line_of_034_is_read() -> None:
    assert logcheck.kv_tokens((V034 / "healthy.log").read_text()) == 3_806_688


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "autofit_after_warmup.log",
            "saw max_model_len reduced from 1,048,576 to 524,288 after CUDA graph capture and warm-up",
        ),
        ("autofit_tentative.log", "saw max_model_len reduced from 1,048,576 to 45,968"),
        ("autofit_unsettled.log", "saw no final length line, so a reduction cannot be ruled out"),
    ],
)
def test_autofit_in_034_wording_fails(name: str, message: str) -> None:
    found = logcheck.check_autofit((V034 / name).read_text())
    assert found.ok is False and message in found.message, found


def test_the_cut_after_warmup_is_what_030s_pattern_alone_would_miss() -> None:
    """The 1M context cut to half after warm-up: 0.30's wording is not in the log, so a check that
    knew only it would pass this log (the fault this issue's item 4 closes)."""
    text = (V034 / "autofit_after_warmup.log").read_text()
    assert not logcheck.AUTOFIT_RE.search(text)
    assert logcheck.autofit_reductions(text) == [(1_048_576, 524_288, True)]


def test_a_tentative_cut_then_a_final_cut_reports_the_whole_reduction() -> None:
    head = "(EngineCore pid=1) INFO 12-04 10:00:00 [kv_cache_planning.py:1479] "
    text = (V034 / "healthy.log").read_text() + (
        f"{head}Auto-fit max_model_len: reduced from 1048576 to 800000 to fit in available KV cache memory "
        "(20.00 GiB GPU); the final length is set after CUDA graph capture and warmup\n"
        f"{head}--max-model-len auto reduced max_model_len from 800000 to 520000 (13.00 GiB GPU left for the KV "
        "cache after CUDA graph capture and warmup).\n"
    )
    found = logcheck.check_autofit(text)
    assert found.ok is False and "from 1,048,576 to 520,000 after CUDA graph capture" in found.message


def test_a_035_log_is_still_refused() -> None:
    text = (V034 / "healthy.log").read_text().replace("0.34.0", "0.35.0")
    assert "these checks know the wording of vLLM 0.26-0.34" in " ".join(parse(text).problems)
    assert all(f.ok is False for f in logcheck.all_checks(text, H200))
