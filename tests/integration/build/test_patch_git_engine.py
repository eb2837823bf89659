"""The patch engine is `git apply` (vfleet.patchset.gitapply): real git on real files, one synthetic patch per
case, applied through `vfleet patches apply` / `apply_mod.apply` exactly as the image build does.

Each refusal must name the patch, the file and the hunk (or the section git or vfleet refuses), and leave
the tree byte for byte as it was, without a manifest. The cases are those where the hand-written engine
this replaced differed from `git apply` / `patch -F0`: hunks at the start or end of a file, "\\ No newline at
end of file", file-mode, binary, rename and copy sections, and CR or CRLF lines against LF context. Each
refusal has a control that applies, so a test fails if the engine refuses everything.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from vfleet.patchset import apply as apply_mod
from vfleet.patchset import gitapply
from vfleet.patchset.series import PatchError, check_series, load_patch, series_files
from vfleet.paths import versions

PINNED = versions()["vllm"]["version"]
NAME = "0001-edge.patch"
HEADERS = f"""Subject: an edge case of the patch engine
Origin: tests/integration/build/test_patch_git_engine.py
Upstream-Status: Inappropriate (a test fixture)
Applied-Upstream: none
Platforms: cpu
Models: none
Why: the engine must refuse or apply this exactly as git does
Verified-By: tests/integration/build/test_patch_git_engine.py::test_fixture
Bases: {PINNED}
Remove-When: never

""".encode()

LINES = b"a\nb\nc\nd\ne\nf\ng\nh\n"


def one_hunk(header: bytes, *body: bytes) -> bytes:
    """A git-style diff of vllm/m.py with one hunk: its @@ header and its body lines."""
    return b"--- a/vllm/m.py\n+++ b/vllm/m.py\n" + header + b"\n" + b"".join(line + b"\n" for line in body)


START = one_hunk(b"@@ -1,3 +1,4 @@", b" a", b"+inserted", b" b", b" c")
END = one_hunk(b"@@ -6,3 +6,4 @@", b" f", b" g", b" h", b"+appended")
MIDDLE = one_hunk(b"@@ -3,3 +3,4 @@", b" c", b"+inserted", b" d", b" e")
NO_NEWLINE = one_hunk(
    b"@@ -7,2 +7,2 @@", b" g", b"-h", b"\\ No newline at end of file", b"+H", b"\\ No newline at end of file"
)


def home_with(tmp_path: Path, diff: bytes) -> Path:
    """A vfleet home whose series is one patch with the given diff (serve_configs/ and pins are the real ones)."""
    home = tmp_path / "home"
    (home / "patches").mkdir(parents=True)
    (home / "serve_configs").symlink_to(REPO / "serve_configs")
    shutil.copy2(REPO / "versions.json", home / "versions.json")
    shutil.copy2(REPO / "patches" / "upstream.yaml", home / "patches" / "upstream.yaml")
    for other in series_files(REPO / "patches").values():  # the other bases take no patch here
        (home / "patches" / other).write_text("")
    (home / "patches" / "series").write_text(NAME + "\n")
    (home / "patches" / NAME).write_bytes(HEADERS + diff)
    return home


def site_with(tmp_path: Path, content: bytes) -> Path:
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "_version.py").write_text(f"__version__ = version = '{PINNED}'\n")
    (site / "vllm" / "m.py").write_bytes(content)
    return site


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, diff: bytes, content: bytes) -> str:
    """Apply the one-patch series; it must be refused with the tree unchanged. Returns the message."""
    monkeypatch.setenv("VFLEET_HOME", str(home_with(tmp_path, diff)))
    site = site_with(tmp_path, content)
    before = snapshot(site)
    with pytest.raises((apply_mod.ApplyError, PatchError)) as exc:
        apply_mod.apply(site, "cpu")
    assert snapshot(site) == before, "a refused series must leave the tree byte for byte unchanged"
    assert not (site / apply_mod.MANIFEST).exists()
    assert NAME in str(exc.value)
    return str(exc.value)


def applied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, diff: bytes, content: bytes) -> bytes:
    monkeypatch.setenv("VFLEET_HOME", str(home_with(tmp_path, diff)))
    site = site_with(tmp_path, content)
    apply_mod.apply(site, "cpu")
    assert apply_mod.verify(site) == []
    return (site / "vllm" / "m.py").read_bytes()


def test_a_hunk_in_the_middle_may_move(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: an offset is not fuzz. git finds the exact text two lines further down and applies there."""
    got = applied(tmp_path, monkeypatch, MIDDLE, b"x\ny\n" + LINES)
    assert got == b"x\ny\na\nb\nc\ninserted\nd\ne\nf\ng\nh\n"


def test_start_of_file_hunk_must_match_at_the_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert applied(tmp_path, monkeypatch, START, LINES).startswith(b"a\ninserted\nb\n")
    shutil.rmtree(tmp_path / "home")
    shutil.rmtree(tmp_path / "site")
    # The file has a line before the hunk, which says (old start 1) that nothing is there.
    msg = refused(tmp_path, monkeypatch, START, b"#!/usr/bin/env python\n" + LINES)
    assert f"{NAME}: vllm/m.py hunk #1 (@@ -1,3 +1,4 @@): does not match the tree exactly" in msg
    assert "the patch set did not apply" in msg and "nothing was written" in msg


def test_end_of_file_hunk_must_match_at_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert applied(tmp_path, monkeypatch, END, LINES).endswith(b"h\nappended\n")
    shutil.rmtree(tmp_path / "home")
    shutil.rmtree(tmp_path / "site")
    # The hunk has no trailing context, so it says the file ends after h; this file goes on.
    msg = refused(tmp_path, monkeypatch, END, LINES + b"# trailer\n")
    assert f"{NAME}: vllm/m.py hunk #1 (@@ -6,3 +6,4 @@): does not match the tree exactly" in msg


def test_no_newline_at_end_of_file_is_part_of_the_match(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert applied(tmp_path, monkeypatch, NO_NEWLINE, LINES.rstrip(b"\n")).endswith(b"g\nH")
    shutil.rmtree(tmp_path / "home")
    shutil.rmtree(tmp_path / "site")
    msg = refused(tmp_path, monkeypatch, NO_NEWLINE, LINES)  # the file's last line does end in a newline
    assert f"{NAME}: vllm/m.py hunk #1 (@@ -7,2 +7,2 @@): does not match the tree exactly" in msg


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (LINES.replace(b"\n", b"\r\n"), "CRLF lines"),
        (LINES.replace(b"\n", b"\r"), "CR-only lines"),
        (LINES.replace(b"d\n", b"d\r\n"), "one CRLF context line among LF lines"),
        (LINES.replace(b"c\n", b"c\r"), "a line ended by a lone CR"),
    ],
    ids=["crlf", "cr-only", "one-crlf", "lone-cr"],
)
def test_cr_bytes_do_not_match_lf_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes, what: str
) -> None:
    msg = refused(tmp_path, monkeypatch, MIDDLE, content)
    assert f"{NAME}: vllm/m.py hunk #1" in msg and "does not match the tree exactly" in msg, what


def test_crlf_context_applies_to_a_crlf_file_byte_for_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Control for the CR cases: the CR is an ordinary byte of the line on both sides."""
    head, body = MIDDLE.split(b"@@ -3,3 +3,4 @@\n")
    diff = head + b"@@ -3,3 +3,4 @@\n" + body.replace(b"\n", b"\r\n")
    got = applied(tmp_path, monkeypatch, diff, LINES.replace(b"\n", b"\r\n"))
    assert got == b"a\r\nb\r\nc\r\ninserted\r\nd\r\ne\r\nf\r\ng\r\nh\r\n"


@pytest.mark.parametrize(
    ("section", "words"),
    [
        (
            b"diff --git a/vllm/m.py b/vllm/m.py\nold mode 100644\nnew mode 100755\n",
            "a file-mode section (mode change 100644 => 100755 vllm/m.py)",
        ),
        (
            b"diff --git a/vllm/m.py b/vllm/m.py\nold mode 100644\nnew mode 100755\n" + MIDDLE,
            "a file-mode section",
        ),
        (
            b"diff --git a/vllm/tool.py b/vllm/tool.py\nnew file mode 100755\n--- /dev/null\n+++ b/vllm/tool.py\n"
            b"@@ -0,0 +1 @@\n+print('hi')\n",
            "a file-mode section (create mode 100755 vllm/tool.py)",
        ),
        (
            b"diff --git a/vllm/x.so b/vllm/x.so\nindex 1234567..89abcde 100644\n"
            b"Binary files a/vllm/x.so and b/vllm/x.so differ\n",
            "vllm/x.so: a binary section",
        ),
        (
            b"diff --git a/vllm/m.py b/vllm/n.py\nsimilarity index 100%\nrename from vllm/m.py\nrename to vllm/n.py\n",
            "a rename section (vllm/{m.py => n.py} (100%)); vfleet refuses renames and copies",
        ),
        (
            b"diff --git a/vllm/m.py b/vllm/n.py\nsimilarity index 90%\nrename from vllm/m.py\nrename to vllm/n.py\n"
            + MIDDLE.replace(b"--- a/vllm/m.py\n+++ b/vllm/m.py\n", b"--- a/vllm/m.py\n+++ b/vllm/n.py\n"),
            "a rename section",
        ),
        (
            b"diff --git a/vllm/m.py b/vllm/n.py\nsimilarity index 100%\ncopy from vllm/m.py\ncopy to vllm/n.py\n",
            "a copy section",
        ),
    ],
    ids=["mode-only", "mode-and-hunk", "create-executable", "binary", "rename", "rename-and-hunk", "copy"],
)
def test_sections_vfleet_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, section: bytes, words: str) -> None:
    """File modes, binaries, renames and copies are refused by the checker, so by apply before git runs."""
    msg = refused(tmp_path, monkeypatch, section, LINES)
    assert words in msg, msg
    problems = check_series(tmp_path / "home" / "patches")
    assert any(NAME in p and words in p for p in problems), problems


def test_the_checker_cli_names_a_refused_section(tmp_path: Path) -> None:
    home = home_with(tmp_path, b"diff --git a/vllm/m.py b/vllm/m.py\nold mode 100644\nnew mode 100755\n")
    env = dict(os.environ, VFLEET_HOME=str(home))
    proc = subprocess.run([sys.executable, "-m", "vfleet", "patches", "check"], capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    assert f"FAIL {NAME}: a file-mode section" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("diff", "words"),
    [
        (b"--- a/vllm/m.py\n@@ -1 +1 @@\n-a\n+b\n", "patch fragment without header at line"),
        (b"--- a/vllm/m.py\n+++ b/vllm/m.py\n@@ -1,2 +1,2 @@\n-a\n+b\n", "m.py hunk #1 (@@ -1,2 +1,2 @@) is corrupted"),
        (
            b"--- a/vllm/m.py\n+++ b/vllm/m.py\n@@ -1 +1 @@\n?a\n+b\n",
            f"corrupt patch at line {len(HEADERS.splitlines()) + 4}",
        ),  # the ? line, after the headers
        (b"--- a/vllm/m.py\n+++ b/vllm/m.py\n@@ one @@\n", "No valid patches in input"),
        (b"--- vllm/m.py\n+++ vllm/m.py\n@@ -1 +1 @@\n-a\n+b\n", "m.py: a patch changes files under vllm/ only"),
        (b"--- a/../m.py\n+++ b/../m.py\n@@ -1 +1 @@\n-a\n+b\n", "../m.py: a patch changes files under vllm/ only"),
        (MIDDLE + END, "vllm/m.py has two sections"),
    ],
    ids=["no-plus-line", "counts", "bad-line", "bad-header", "no-prefix", "dotdot", "twice"],
)
def test_malformed_diffs_are_rejected_naming_the_place(tmp_path: Path, diff: bytes, words: str) -> None:
    home = home_with(tmp_path, diff)
    with pytest.raises(PatchError) as exc:
        load_patch(home / "patches" / NAME)
    assert str(exc.value).startswith(NAME) and words in str(exc.value), str(exc.value)


def test_git_ignores_an_enclosing_repository_and_every_git_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tree lies inside a repository whose config and attributes would rewrite bytes (whitespace fix,
    autocrlf, eol=crlf), a user config says the same, and GIT_* variables point elsewhere: the patch must
    still apply byte for byte, and a CRLF file must still not match LF context."""
    repo = tmp_path / "checkout"
    fake_home = tmp_path / "user"
    fake_home.mkdir()
    (fake_home / ".gitconfig").write_text("[apply]\n\twhitespace = fix\n[core]\n\tautocrlf = true\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=dict(os.environ, HOME=str(fake_home)))
    for key, value in (("core.autocrlf", "true"), ("apply.whitespace", "fix"), ("apply.ignoreWhitespace", "change")):
        subprocess.run(["git", "-C", str(repo), "config", key, value], check=True)
    (repo / ".gitattributes").write_text("* text eol=crlf\n")
    monkeypatch.setenv("HOME", str(fake_home))
    monkeypatch.setenv("GIT_DIR", str(repo / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(repo))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'apply.whitespace'='fix'")
    trailing = MIDDLE.replace(b"+inserted\n", b"+inserted  \n")  # trailing spaces that whitespace=fix strips
    inside = repo / "deep"
    inside.mkdir()
    got = applied(inside, monkeypatch, trailing, LINES)
    assert got == b"a\nb\nc\ninserted  \nd\ne\nf\ng\nh\n", got
    # Without the clean environment git sees all of it: the same apply, run plainly, rewrites the line.
    plain = inside / "plain"
    shutil.copytree(inside / "site", plain)
    (plain / "vllm" / "m.py").write_bytes(LINES)
    subprocess.run(["git", "apply", str(inside / "home" / "patches" / NAME)], cwd=plain, check=True)
    assert (plain / "vllm" / "m.py").read_bytes() != got, "the hostile config had no effect: the test shows nothing"
    crlf = tmp_path / "checkout" / "crlf"
    crlf.mkdir()
    msg = refused(crlf, monkeypatch, MIDDLE, LINES.replace(b"\n", b"\r\n"))
    assert "does not match the tree exactly" in msg


def test_a_tree_that_is_itself_a_repository_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VFLEET_HOME", str(home_with(tmp_path, MIDDLE)))
    site = site_with(tmp_path, LINES)
    subprocess.run(["git", "init", "-q", str(site)], check=True)
    with pytest.raises(gitapply.GitApplyError, match="is itself a git repository"):
        apply_mod.apply(site, "cpu")
    assert (site / "vllm" / "m.py").read_bytes() == LINES


def test_a_missing_git_is_a_clear_error(tmp_path: Path) -> None:
    """A real PATH without git (no fake): the CLI says what is missing and how to install it."""
    home = home_with(tmp_path, MIDDLE)
    site = site_with(tmp_path, LINES)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = dict(os.environ, VFLEET_HOME=str(home), PATH=str(bin_dir))
    assert shutil.which("git", path=str(bin_dir)) is None
    for args in (["apply", "--root", str(site), "--platform", "cpu"], ["check"]):
        argv = [sys.executable, "-m", "vfleet", "patches", *args]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env)
        assert proc.returncode == 2, proc.stderr
        assert "git is not installed" in proc.stderr and "apt-get install -y git" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    assert (site / "vllm" / "m.py").read_bytes() == LINES
