"""`vfleet log-check`: the first fault of a kept server log, with or without docker's timestamps."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO

from vfleet.cli import main

LOGS = REPO / "tests" / "fixtures" / "logs"
DIED = "line 114 [error-level, traceback, engine-died]"


def _stamped(text: str) -> str:
    """As `docker logs --timestamps` writes it: each line after its time, nanoseconds at a fixed width."""
    return "".join(f"2026-12-06T15:00:00.{n:09d}Z {ln}\n" for n, ln in enumerate(text.splitlines()))


@pytest.mark.parametrize("stamped", [False, True], ids=["plain", "docker-timestamps"])
def test_the_first_fault_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str], stamped: bool) -> None:
    text = (LOGS / "engine_died_under_load.log").read_text()
    log = tmp_path / "container.log"
    log.write_text(_stamped(text) if stamped else text)
    assert main(["log-check", str(log), "--profile", "tiny/cpu", "--first"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith(DIED) and "IndexError" in out[0], out


def test_a_healthy_log_has_no_fault(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["log-check", str(LOGS / "v0.32" / "cpu_healthy.log"), "--profile", "tiny/cpu"]) == 0
    assert capsys.readouterr().out.strip() == "no fault found"


def test_an_unreadable_log_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "gone.log"
    assert main(["log-check", str(missing), "--profile", "tiny/cpu"]) == 2
    assert f"{missing}: cannot read the log" in capsys.readouterr().err
