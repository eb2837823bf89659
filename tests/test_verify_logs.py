"""Boot-verify log checks against recorded vLLM logs (tests/fixtures/logs/, derived from real H200
logs by derive.py), each with one fault: every check passes on the healthy log and exactly the
check for the fault fails on each faulty one, with a message that says expected and seen."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vfleet.profiles import Verify
from vfleet.verify import logcheck
from vfleet.verify.logrules import FAMILY_IDS

LOGS = Path(__file__).parent / "fixtures" / "logs"
ROOT = Path(__file__).resolve().parents[1]

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
    "engine_dead_midrun.log": ("faults", ["engine-died", "EngineDeadError"]),
}


def _results(name: str, verify: Verify = H200) -> dict[str, logcheck.Finding]:
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
    """A check in the registry (vfleet.verify.logcheck.REGISTRY) comes with a recorded log in FAULTS that
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


def test_suite_log_checks_fail_on_a_recorded_fault(tmp_path: Path) -> None:
    """The real smoke_tests/test_6_log.py, run by pytest on a recorded log: the auto-fit check fails.
    (--vf-url points nowhere; only the log tests are selected, which do not touch the server.)"""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(ROOT / "smoke_tests" / "test_6_log.py"),
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            str(ROOT / "smoke_tests" / "pytest.ini"),
            "--rootdir",
            str(ROOT / "smoke_tests"),
            "--vf-url",
            "http://127.0.0.1:9",
            "--vf-profile",
            "tiny/cpu",
            "--vf-log",
            str(LOGS / "autofit.log"),
            "--vf-out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "test_log[autofit] FAILED" in proc.stdout or "FAILED" in proc.stdout, proc.stdout[-2000:]
    assert "expected no auto-fit reduction; saw max_model_len reduced from 1,048,576 to 45,968" in proc.stdout
    # tiny/cpu expects >= 8,192 KV tokens: the recorded 45,968 passes; eager is waived for it (skipped).
    assert "1 failed" in proc.stdout and "2 passed" in proc.stdout and "2 skipped" in proc.stdout, proc.stdout[-800:]


def _suite_log_checks(profile: str, log: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(ROOT / "smoke_tests" / "test_6_log.py"), "-v", "-p", "no:cacheprovider",
         "-c", str(ROOT / "smoke_tests" / "pytest.ini"), "--rootdir", str(ROOT / "smoke_tests"),
         "--vf-url", "http://127.0.0.1:9", "--vf-profile", profile, "--vf-log", str(log), "--vf-out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_suite_records_the_backend_of_a_production_profile_that_names_none(tmp_path: Path) -> None:
    """glm-5.3-flash/h200 names no attention backend: on the recorded H200 log every log check runs
    (none skips) and the backend the log names lands in the figures."""
    proc = _suite_log_checks("glm-5.3-flash/h200", LOGS / "healthy.log", tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "5 passed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1], proc.stdout[-800:]
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["attention_backends"] == ["FLASH_ATTN"]
    # the report lists the fault families the deny-by-default check looked for (one table, logrules.py)
    assert figures["log_families"] == list(FAMILY_IDS) and figures["log_allowed"] == []


def test_suite_passes_the_real_cpu_container_log(tmp_path: Path) -> None:
    """smoke_tests/test_6_log.py on the real vllm-cpu container log (4xx answers, docker stop): every log
    check of tiny/cpu passes or is not applicable, and the allow-list entries used are recorded."""
    proc = _suite_log_checks("tiny/cpu", LOGS / "cpu_healthy_with_sigterm.stdout_then_stderr.log", tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "3 passed" in proc.stdout and "2 skipped" in proc.stdout, proc.stdout[-800:]
    allowed = json.loads((tmp_path / "figures.json").read_text())["log_allowed"]
    assert sorted(a["entry"] for a in allowed) == ["client-error-errorinfo"] * 2 + ["orderly-shutdown-traceback"]
