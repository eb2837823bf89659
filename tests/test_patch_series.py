"""The series checker (`vfleet patches check`) and the unified-diff engine underneath apply/status."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from vfleet.patchset.diff import DiffError, apply_file, parse
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
    assert any(f.name in p and "hunk #1" in p and "corrupted" in p for p in problems), problems


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


# The diff engine, byte for byte.

DIFF = b"""--- a/pkg/m.py
+++ b/pkg/m.py
@@ -1,3 +1,4 @@
 a
+inserted
 b
 c
@@ -5,2 +6,2 @@
 e
-f
\\ No newline at end of file
+F
\\ No newline at end of file
"""


def test_apply_and_reverse_are_byte_exact() -> None:
    (fd,) = parse(DIFF)
    old = b"a\nb\nc\nd\ne\nf"
    res = apply_file(fd, old)
    assert res.failures == [] and res.content == b"a\ninserted\nb\nc\nd\ne\nF"
    back = apply_file(fd, res.content, reverse=True)
    assert back.failures == [] and back.content == old
    assert apply_file(fd, res.content).failures  # applying twice fails (the context moved on)


def test_offset_is_allowed_but_not_fuzz() -> None:
    (fd,) = parse(DIFF)
    shifted = b"x\ny\na\nb\nc\nd\ne\nf"
    assert apply_file(fd, shifted).content == b"x\ny\na\ninserted\nb\nc\nd\ne\nF"
    fuzzy = b"a\nB\nc\nd\ne\nf"  # one context line differs: no fuzz, so hunk 1 fails
    (fail,) = apply_file(fd, fuzzy).failures
    assert fail.path == "pkg/m.py" and fail.hunk == 1 and "no fuzz" in fail.reason
    crlf = b"a\r\nb\r\nc\r\nd\r\ne\r\nf"  # line endings are part of the bytes
    assert len(apply_file(fd, crlf).failures) == 2


@pytest.mark.parametrize(
    ("diff", "what"),
    [
        (b"--- a/x\n@@ -1 +1 @@\n-a\n+b\n", "not followed by a '+++'"),
        (b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+b\n", "corrupted"),
        (b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n?a\n+b\n", "unexpected line"),
        (b"--- a/x\n+++ b/x\n@@ one @@\n", "malformed hunk header"),
        (b"--- x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", "must start with a/"),
        (b"--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n", "leaves the tree"),
        (b"just text\n", "no '--- a/...'"),
    ],
)
def test_malformed_diffs_are_rejected(diff: bytes, what: str) -> None:
    with pytest.raises(DiffError, match=what.replace("(", r"\(").replace("+", r"\+")):
        parse(diff)
