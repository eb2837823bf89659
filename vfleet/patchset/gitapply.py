"""`git apply` is the patch engine: it reads, checks, applies and reverse-checks every diff; we only run it.

git applies with exact context and no fuzz (no `-C`): a hunk may move (an offset), but a hunk whose old
start is line 1 must match at the start of the file and one without trailing context at its end; a
"\\ No newline at end of file" marker and CR bytes are compared like any other byte. One invocation takes
every patch of the series, in order, and writes nothing unless all of them apply.

git must not be steered by anything around the tree, so every run is outside any repository and reads
no configuration: a user's `apply.whitespace=fix`, a repository's `core.autocrlf` or `.gitattributes`
would otherwise change bytes or let a CRLF file match LF context. The environment is built from
scratch (no inherited GIT_* variable), GIT_CEILING_DIRECTORIES stops the search for a repository at the
tree, system and global config and attributes are off, and messages are in the C locale.

The real vLLM images carry git: vLLM's docker/Dockerfile installs it in its `vllm-base` stage (the
vllm/vllm-openai image) and docker/Dockerfile.rocm_base in its `base` stage (vllm/vllm-openai-rocm).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from vfleet.errors import VfleetError

GIT_FIX = "install git (Debian/Ubuntu: apt-get install -y git) or put it on PATH"
_REJECTED = re.compile(r"^Rejected hunk #(\d+)\.$")
_APPLIED = re.compile(r"^Hunk #(\d+) applied cleanly\.$")
_FILE = re.compile(r"^(?:Applying patch (.+) with \d+ rejects?\.\.\.|Applied patch (.+) cleanly\.)$")


class GitApplyError(VfleetError):
    """git is missing, or it cannot read a patch."""


def git() -> str:
    exe = shutil.which("git")
    if exe is None:
        raise GitApplyError(f"git is not installed: vfleet applies and checks patches with `git apply`; {GIT_FIX}")
    return exe


def env(tree: Path) -> dict[str, str]:
    """A clean environment for git in tree: no repository, no config, no attributes, C messages."""
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "LC_ALL": "C",
        "GIT_CEILING_DIRECTORIES": str(tree.resolve().parent),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "XDG_CONFIG_HOME": os.devnull,
        "HOME": os.devnull,
    }


def run(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [git(), *args], cwd=tree, env=env(tree), capture_output=True, text=True, errors="replace", check=False
    )


def ensure_outside_repository(tree: Path) -> None:
    """git must find no repository at tree (the ceiling keeps it from looking above; tree itself may be one)."""
    proc = run(tree, "rev-parse", "--absolute-git-dir")
    if proc.returncode == 0:
        raise GitApplyError(
            f"{tree} is itself a git repository ({proc.stdout.strip()}): its config and attributes could change "
            "how patches apply. Apply to a copy of the tree that is not a repository."
        )


def _apply_args(patches: Sequence[Path], *, reverse: bool, check: bool) -> list[str]:
    args = ["apply", "--whitespace=nowarn"]
    if reverse:
        args.append("--reverse")
    if check:
        args.append("--check")
    return [*args, *(str(p.resolve()) for p in patches)]


def check(tree: Path, patches: Sequence[Path], *, reverse: bool = False) -> str | None:
    """None if the patches apply to tree in order, all of them (reverse: undo them), else git's message."""
    proc = run(tree, *_apply_args(patches, reverse=reverse, check=True))
    return None if proc.returncode == 0 else proc.stderr.strip() or f"git apply exited {proc.returncode}"


def apply(tree: Path, patches: Sequence[Path], *, reverse: bool = False) -> None:
    proc = run(tree, *_apply_args(patches, reverse=reverse, check=False))
    if proc.returncode != 0:
        raise GitApplyError(f"git apply failed in {tree}: {proc.stderr.strip()}")


def files(patch: Path) -> tuple[str, ...]:
    """The paths a patch changes, as git reads it (git's numstat), in order. Raises GitApplyError for what
    git cannot parse and for what vfleet does not apply: binary, file-mode, rename and copy sections."""
    where = patch.parent
    stat = run(where, "apply", "--numstat", "-z", str(patch.resolve()))
    if stat.returncode != 0:
        raise GitApplyError(f"{patch.name}: git cannot read the diff: {_explain(patch, stat.stderr)}")
    fields = stat.stdout.split("\0")
    paths: list[str] = []
    for rec in fields[:-1]:
        added, _, path = rec.split("\t", 2)
        if added == "-":
            raise GitApplyError(f"{patch.name}: {path}: a binary section; vfleet patches change text files only")
        if path in paths:
            raise GitApplyError(f"{patch.name}: {path} has two sections; give each file one section per patch")
        paths.append(path)
    summary = run(where, "apply", "--summary", str(patch.resolve()))
    for line in summary.stdout.splitlines():
        words = line.split()
        kind = words[0] if words else ""
        if kind in ("rename", "copy"):
            raise GitApplyError(
                f"{patch.name}: a {kind} section ({' '.join(words[1:])}); vfleet refuses renames and copies: "
                "write the change as a deletion and a creation"
            )
        if kind == "mode" or (kind == "create" and len(words) > 2 and words[2] != "100644"):
            raise GitApplyError(
                f"{patch.name}: a file-mode section ({line.strip()}); vfleet patches change file contents only "
                "(new files are created 100644)"
            )
    return tuple(paths)


def _explain(patch: Path, stderr: str) -> str:
    """git's message, and for 'corrupt patch at line N' the file and hunk that line is in."""
    msg = stderr.strip().removeprefix("error: ")
    m = re.search(r"corrupt patch at line (\d+)", msg)
    if not m:
        return msg
    # The last hunk header before that line: a short hunk swallows what follows it, up to the next @@.
    path, hunk, found = "", 0, ("", 0, "")
    for line in patch.read_text(errors="replace").splitlines()[: int(m.group(1)) - 1]:
        if line.startswith("+++ "):
            path, hunk = line[4:].split("\t", 1)[0].removeprefix("b/"), 0
        elif line.startswith("@@"):
            hunk += 1
            found = (path, hunk, line)
    path, hunk, header = found
    if not hunk:
        return msg
    return (
        f"{msg}: {path} hunk #{hunk} ({header}) is corrupted: its body does not have the lines its header "
        "counts (a truncated or hand-edited hunk)"
    )


@dataclass
class FileOutcome:
    """What git reported for one file of one patch when applied with --reject."""

    rejected: dict[int, str] = field(default_factory=dict)  # hunk number -> its @@ header
    applied: set[int] = field(default_factory=set)
    clean: bool = False
    error: str = ""


@contextmanager
def scratch(tree: Path, paths: Sequence[str]) -> Iterator[Path]:
    """A temporary copy of the given files of tree (those that exist); removed on exit."""
    with tempfile.TemporaryDirectory(prefix="vfleet-patch-") as tmp:
        root = Path(tmp) / "tree"
        root.mkdir()
        for rel in paths:
            src = tree / rel
            if src.is_file():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, root / rel)
        yield root


def hunks(tree: Path, patch: Path, paths: Sequence[str], *, reverse: bool = False) -> dict[str, FileOutcome]:
    """Per file, which hunks of one patch git applies and which it rejects (`--reject`), on a copy of tree."""
    out = {p: FileOutcome() for p in paths}
    with scratch(tree, paths) as copy:
        proc = run(copy, "apply", "--reject", "--verbose", *_apply_args([patch], reverse=reverse, check=False)[1:])
        name = ""
        for line in proc.stderr.splitlines():
            if m := _FILE.match(line):
                name = m.group(1) or m.group(2)
                if name in out:
                    out[name].clean = m.group(2) is not None
            elif (m := _REJECTED.match(line)) and name in out:
                out[name].rejected[int(m.group(1))] = ""
            elif (m := _APPLIED.match(line)) and name in out:
                out[name].applied.add(int(m.group(1)))
            else:
                for path, res in out.items():
                    if line.startswith(f"error: {path}: "):
                        res.error = line.removeprefix(f"error: {path}: ")
        for path, res in out.items():
            rej = copy / f"{path}.rej"
            if res.rejected and rej.is_file():
                # git writes the rejected hunks to FILE.rej in order, each under its own @@ header.
                headers = [ln for ln in rej.read_text(errors="replace").splitlines() if ln.startswith("@@")]
                nums = sorted(res.rejected)
                res.rejected = {n: headers[i] if i < len(headers) else "" for i, n in enumerate(nums)}
    return out
