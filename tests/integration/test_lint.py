"""ruff and mypy are clean (configuration in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

LINTED = [p for p in ("vfleet", "tests", "smoke_tests", "benchmarks") if (REPO / p).is_dir()]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, check=False)


def test_ruff_is_clean() -> None:
    proc = _run("ruff", "check", *LINTED)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_is_clean() -> None:
    proc = _run("ruff", "format", "--check", "--diff", "vfleet")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr


def test_mypy_is_clean() -> None:
    proc = _run("mypy")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr
