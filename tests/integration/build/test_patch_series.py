"""The series checker (`vfleet patches check`); the diff engine (git apply) has
tests/integration/build/test_patch_git_engine.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from vfleet.patchset.series import REQUIRED_HEADERS, check_series, load_series, load_upstream


@pytest.fixture
def pdir(tmp_path: Path) -> Path:
    d = tmp_path / "patches"
    shutil.copytree(REPO / "patches", d)
    return d


def test_real_series_is_clean() -> None:
    assert check_series(REPO / "patches") == []
    patches = load_series(REPO / "patches")
    assert [p.name[:4] for p in patches][:4] == ["0001", "0002", "0003", "0004"]
    for p in patches:
        assert all(p.headers.get(h) for h in REQUIRED_HEADERS), p.name
        assert (REPO / p.verified_by.split("::")[0]).is_file(), f"{p.name}: Verified-By file missing"
    seed000 = next(e for e in load_upstream(REPO / "patches") if e["name"].startswith("seed-000"))
    assert seed000["applied_upstream"] == "0.30.0"
    assert (REPO / seed000["verified_by"].split("::")[0]).is_file()


def test_cli_check_passes_on_the_real_series() -> None:
    proc = subprocess.run([sys.executable, "-m", "vfleet", "patches", "check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok")


def _first(pdir: Path) -> Path:
    return pdir / "0001-glm5next-nvidia-seed-kernel-tail-strides.patch"


@pytest.mark.parametrize("header", REQUIRED_HEADERS)
def test_missing_header_is_reported(pdir: Path, header: str) -> None:
    f = _first(pdir)
    lines = f.read_text().splitlines(keepends=True)
    i = next(i for i, ln in enumerate(lines) if ln.startswith(f"{header}:"))
    j = i + 1
    while lines[j].startswith(" "):
        j += 1
    f.write_text("".join(lines[:i] + lines[j:]))
    problems = check_series(pdir)
    assert any(f.name in p and header in p for p in problems), problems


def test_unlisted_file_is_reported(pdir: Path) -> None:
    (pdir / "0099-stray.patch").write_text("Subject: x\n\n")
    assert any("0099-stray.patch is in" in p and "not listed" in p for p in check_series(pdir))


def test_listed_twice_and_missing_file_are_reported(pdir: Path) -> None:
    series = pdir / "series"
    series.write_text(series.read_text() + _first(pdir).name + "\n0042-gone.patch\n")
    problems = check_series(pdir)
    assert any("more than once" in p and _first(pdir).name in p for p in problems), problems
    assert any("0042-gone.patch" in p and "not a file" in p for p in problems), problems


def test_unparsable_patch_is_reported(pdir: Path) -> None:
    f = _first(pdir)
    f.write_text(f.read_text().replace("@@ -374,6 +374,8 @@", "@@ -374,6 +374,9 @@"))
    problems = check_series(pdir)
    # git reads the hunk header's counts; the body ends a line early, so git names the line after it.
    want = "vllm/models/glm5next/nvidia/ops/kpool_compress.py hunk #1 (@@ -374,6 +374,9 @@) is corrupted"
    assert any(f.name in p and "corrupt patch at line" in p and want in p for p in problems), problems


def test_bad_platform_is_reported(pdir: Path) -> None:
    f = _first(pdir)
    f.write_text(f.read_text().replace("Platforms: cuda\n", "Platforms: cuda, tpu\n"))
    assert any("Platforms" in p for p in check_series(pdir))


def test_cli_check_fails_on_a_broken_series(pdir: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "serve_configs").symlink_to(REPO / "serve_configs")
    shutil.copy2(REPO / "versions.json", home)
    shutil.move(str(pdir), home / "patches")
    (home / "patches" / "notes.txt").write_text("stray\n")
    env = dict(os.environ, VFLEET_HOME=str(home))
    proc = subprocess.run([sys.executable, "-m", "vfleet", "patches", "check"], capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    assert "notes.txt is in" in proc.stderr
