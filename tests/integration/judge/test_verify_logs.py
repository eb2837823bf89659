"""Boot-verify log checks against recorded vLLM logs (tests/fixtures/logs/, derived from real H200
logs by derive.py), each with one fault: every check passes on the healthy log and exactly the
check for the fault fails on each faulty one, with a message that says expected and seen."""

from __future__ import annotations

from pathlib import Path

import pytest

from vfleet.profiles import Verify
from vfleet.verify import runner
from vfleet.verify.log import check as logcheck
from vfleet.verify.log.rules import FAMILY_IDS

LOGS = Path(__file__).parents[2] / "fixtures" / "logs"
ROOT = Path(__file__).resolve().parents[3]

# What the recorded H200 server (1B Llama, max_model_len 4096) should look like.
H200 = Verify(max_model_len=4096, min_kv_tokens=40_000, graph_mode=True, attention_backend="FLASH_ATTN")

# log file -> (the one failing check, words its message must contain)
FAULTS = {
    "eager.log": ("graph_mode", ["expected graph mode", "Enforce eager set"]),
    "capture_aborted.log": ("graph_mode", ["Graph capturing finished", "capture started but never finished"]),
    "autofit.log": ("autofit", ["expected no auto-fit", "from 1,048,576 to 45,968"]),
    "backend.log": ("attention_backend", ["expected attention backend FLASH_ATTN", "TRITON_ATTN"]),
    "kv_small.log": ("kv_tokens", ["expected KV cache >= 40,000 tokens", "saw 30,112"]),
    "illegal_memory.log": ("faults", ["expected no fault", "illegal memory access"]),
    "rocm_memory_fault.log": ("faults", ["Memory access fault by GPU node-2"]),
    "kernel_assert.log": ("faults", ["kernel-assert", "Assertion `prefix_lse_idx < num_tokens` failed"]),
    # issue 31: glibc's heap-corruption abort and ROCr's GPU core dump, each the only sign in the log
    "heap_corruption.log": ("faults", ["line 114 [heap-corruption]: double free or corruption (!prev)"]),
    "gpu_core_dump.log": ("faults", ["line 114 [gpu-core-dump]: GPU core dump created: gpucore.1051"]),
    "engine_dead_midrun.log": ("faults", ["engine-died", "EngineDeadError"]),
    # a traceback is named by its first line and the exception that ended it (issue 22 item 4)
    "engine_died_under_load.log": (
        "faults",
        [
            "EngineCore encountered a fatal error. -- ended by IndexError: index 4096 is out of bounds for "
            "dimension 0 with size 4096",
        ],
    ),
}


def _results(name: str, verify: Verify = H200) -> dict[str, logcheck.LogFinding]:
    return {f.check: f for f in logcheck.all_checks((LOGS / name).read_text(), verify)}


def test_healthy_log_passes_every_check() -> None:
    res = _results("healthy.log")
    bad = {k: f.message for k, f in res.items() if f.ok is not True}
    assert not bad, f"healthy recorded log should pass all checks: {bad}"
    assert logcheck.kv_tokens((LOGS / "healthy.log").read_text()) == 3_806_688


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_each_fault_fails_exactly_its_check(name: str) -> None:
    check, words = FAULTS[name]
    res = _results(name)
    failed = sorted(k for k, f in res.items() if f.ok is False)
    assert failed == [check], f"{name}: expected only {check} to fail; failed: {failed}"
    for w in words:
        assert w in res[check].message, f"{name}: {w!r} not in message {res[check].message!r}"


def test_every_registered_log_check_has_a_fault_log_that_fails_it() -> None:
    """A check in the registry (vfleet.verify.log.check.REGISTRY) comes with a recorded log in FAULTS that
    fails it, and its findings carry its registry name (the test id and the report key)."""
    names = [c.name for c in logcheck.REGISTRY]
    assert len(set(names)) == len(names), names
    assert sorted(names) == sorted({check for check, _ in FAULTS.values()})
    assert [f.check for f in logcheck.all_checks((LOGS / "healthy.log").read_text(), H200)] == names


def test_shutdown_traceback_is_not_a_fault() -> None:
    # autofit.log ends with the EngineDeadError traceback vLLM prints after SIGTERM.
    text = (LOGS / "autofit.log").read_text()
    assert "EngineDeadError" in text
    assert logcheck.check_faults(text).ok is True


def test_checks_that_do_not_apply_are_skipped_with_reason() -> None:
    v = Verify(max_model_len=4096, min_kv_tokens=1, graph_mode=False)
    res = {f.check: f for f in logcheck.all_checks((LOGS / "eager.log").read_text(), v, production=False)}
    assert res["graph_mode"].ok is None and "does not expect graph mode" in res["graph_mode"].message
    assert res["attention_backend"].ok is None and "names no attention backend" in res["attention_backend"].message


def test_production_profile_without_a_named_backend_needs_one_in_the_log() -> None:
    """A production profile that names no verify.attention_backend: the check does not skip; any
    backend the log names passes (and is recorded), a log that names none fails."""
    v = Verify(max_model_len=4096, min_kv_tokens=1, graph_mode=True)
    healthy = (LOGS / "healthy.log").read_text()
    found = logcheck.check_attention_backend(healthy, v, production=True)
    assert found.ok is True and "FLASH_ATTN" in found.message, found
    assert logcheck.attention_backends(healthy) == ["FLASH_ATTN"]
    silent = "".join(line for line in healthy.splitlines(keepends=True) if not logcheck.BACKEND_RE.search(line))
    assert silent.count("\n") > 10
    missing = logcheck.check_attention_backend(silent, v, production=True)
    assert missing.ok is False
    assert "expected a 'Using X backend' line naming the attention backend" in missing.message
    assert missing.message.endswith("saw none")


def test_wording_families() -> None:
    # 0.30 has no (Proc pid=N) prefix, the CPU says "CPU KV cache size", 0.33 words auto-fit differently.
    text = (
        "INFO 11-29 10:00:00 [kv_cache_utils.py:1] CPU KV cache size: 8,192 tokens\n"
        "INFO 11-29 10:00:00 [kv_cache_utils.py:1] Auto-fit max_model_len: reduced from 1048576 to 516096 "
        "to fit in available KV cache memory\n"
    )
    assert logcheck.kv_tokens(text) == 8192
    assert "from 1,048,576 to 516,096" in logcheck.check_autofit(text).message


def _suite_log_checks(profile: str, log: Path, out: Path) -> tuple[runner.VerifyResult, list[str]]:
    """The real smoke_tests/test_6_log.py (`-k test_log`) as `vfleet verify` runs it, on a recorded log: the
    URL points nowhere, and the log checks do not touch the server. Returns the result and pytest's lines."""
    lines: list[str] = []
    res = runner.run(
        runner.VerifyRequest("http://127.0.0.1:9", profile, out, log=log, select="test_log"), on_line=lines.append
    )
    return res, lines


def _outcomes(res: runner.VerifyResult) -> dict[str, str]:
    return {c.name: c.outcome for c in res.report.checks}


def test_suite_log_checks_fail_on_a_recorded_fault(tmp_path: Path) -> None:
    """The auto-fit check fails on a log whose max_model_len was reduced."""
    res, lines = _suite_log_checks("tiny/cpu", LOGS / "autofit.log", tmp_path / "r")
    assert res.rc == 1, lines[-30:]
    assert any("test_log[autofit] FAILED" in line for line in lines), lines[-30:]
    msg = next(c.message for c in res.report.checks if c.name == "test_log[autofit]")
    assert "expected no auto-fit reduction; saw max_model_len reduced from 1,048,576 to 45,968" in msg
    # tiny/cpu expects >= 8,192 KV tokens: the recorded 45,968 passes; eager is waived for it (skipped).
    c = res.report.counts
    assert (c.failed, c.passed, c.skipped) == (1, 2, 2), _outcomes(res)


def test_suite_records_the_backend_of_a_production_profile_that_names_none(tmp_path: Path) -> None:
    """glm-5.3-flash/h200 names no attention backend: on the recorded H200 log every log check runs
    (none skips) and the backend the log names lands in the figures."""
    res, lines = _suite_log_checks("glm-5.3-flash/h200", LOGS / "healthy.log", tmp_path / "r")
    assert set(_outcomes(res).values()) == {"passed"} and res.report.counts.passed == 5, lines[-30:]
    figures = res.report.figures
    assert figures.attention_backends == ["FLASH_ATTN"]
    # the report lists the fault families the deny-by-default check looked for (one table, logrules.py)
    assert figures.log_families == list(FAMILY_IDS) and figures.log_allowed == []


def test_suite_passes_the_real_cpu_container_log(tmp_path: Path) -> None:
    """smoke_tests/test_6_log.py on the real vllm-cpu container log (4xx answers, docker stop): every log
    check of tiny/cpu passes or is not applicable, and the allow-list entries used are recorded."""
    res, lines = _suite_log_checks("tiny/cpu", LOGS / "cpu_healthy_with_sigterm.stdout_then_stderr.log", tmp_path)
    assert res.rc == 0, lines[-30:]
    assert (res.report.counts.passed, res.report.counts.skipped) == (3, 2), _outcomes(res)
    allowed = res.report.figures.log_allowed or []
    assert sorted(a.entry for a in allowed) == ["client-error-errorinfo"] * 2 + ["orderly-shutdown-traceback"]
