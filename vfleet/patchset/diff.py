"""Unified diffs, parsed and applied by us: exact context, no fuzz, byte for byte.

A hunk matches only where every context and removed line equals the file's bytes. When it is not at
the line its header names (other hunks or patches moved the text), the nearest exact match after the
previous hunk is used, like `patch --fuzz=0`; a hunk whose text appears nowhere fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vfleet.errors import VfleetError

_HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
DEV_NULL = "/dev/null"


class DiffError(VfleetError):
    """A patch file is not a well-formed unified diff."""


@dataclass(frozen=True)
class Hunk:
    index: int  # 1-based within its file
    old_start: int
    new_start: int
    old: tuple[bytes, ...]  # context + removed lines, with their line endings
    new: tuple[bytes, ...]  # context + added lines
    header: str

    def reversed(self) -> Hunk:
        return Hunk(self.index, self.new_start, self.old_start, self.new, self.old, self.header)


@dataclass(frozen=True)
class FileDiff:
    path: str  # relative to the tree root, e.g. vllm/v1/kv_cache_interface.py
    hunks: tuple[Hunk, ...]
    creates: bool = False
    deletes: bool = False


@dataclass(frozen=True)
class HunkFailure:
    path: str
    hunk: int
    header: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path} hunk #{self.hunk} ({self.header}): {self.reason}"


@dataclass
class FileResult:
    content: bytes | None  # None: the file is deleted
    failures: list[HunkFailure] = field(default_factory=list)


def _strip_prefix(raw: bytes, what: str, lineno: int) -> str:
    name = raw.split(b"\t", 1)[0].rstrip(b"\r\n").decode("utf-8", "strict")
    if name == DEV_NULL:
        return name
    if not (name.startswith("a/") or name.startswith("b/")):
        raise DiffError(f"line {lineno}: the {what} path {name!r} must start with a/ or b/ (git-style -p1)")
    rel = name[2:]
    if rel.startswith("/") or ".." in rel.split("/") or not rel:
        raise DiffError(f"line {lineno}: the {what} path {name!r} leaves the tree")
    return rel


def parse(diff: bytes, *, source: str = "patch") -> list[FileDiff]:
    """Parse a unified diff (what follows the headers of a patch file). Raises DiffError, naming the line."""
    lines = diff.splitlines(keepends=True)
    files: list[FileDiff] = []
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        if not line.startswith(b"--- "):
            if line.startswith(b"@@") or line.startswith(b"+++ "):
                raise DiffError(f"{source}: line {i + 1}: hunk or +++ line without a preceding --- line")
            i += 1
            continue
        if i + 1 >= n or not lines[i + 1].startswith(b"+++ "):
            raise DiffError(f"{source}: line {i + 1}: '---' line not followed by a '+++' line")
        old_path = _strip_prefix(line[4:], "old", i + 1)
        new_path = _strip_prefix(lines[i + 1][4:], "new", i + 2)
        if old_path == DEV_NULL and new_path == DEV_NULL:
            raise DiffError(f"{source}: line {i + 1}: both sides are /dev/null")
        path = new_path if new_path != DEV_NULL else old_path
        if DEV_NULL not in (old_path, new_path) and old_path != new_path:
            raise DiffError(f"{source}: line {i + 1}: renames are not supported ({old_path} -> {new_path})")
        i += 2
        hunks: list[Hunk] = []
        while i < n and lines[i].startswith(b"@@"):
            m = _HUNK_RE.match(lines[i])
            if not m:
                raise DiffError(f"{source}: line {i + 1}: malformed hunk header {lines[i].rstrip()!r}")
            header = lines[i].rstrip(b"\r\n").decode("utf-8", "replace")
            old_start, new_start = int(m.group(1)), int(m.group(3))
            old_count = int(m.group(2)) if m.group(2) is not None else 1
            new_count = int(m.group(4)) if m.group(4) is not None else 1
            hunk_line = i + 1
            i += 1
            old: list[bytes] = []
            new: list[bytes] = []
            last: list[list[bytes]] = []
            while i < n and (len(old) < old_count or len(new) < new_count):
                body = lines[i]
                tag, text = body[:1], body[1:]
                if body in (b"\n", b"\r\n"):  # an empty context line whose leading space was lost
                    tag, text = b" ", body
                if tag == b" ":
                    old.append(text)
                    new.append(text)
                    last = [old, new]
                elif tag == b"-":
                    old.append(text)
                    last = [old]
                elif tag == b"+":
                    new.append(text)
                    last = [new]
                elif tag == b"\\":
                    for side in last:
                        side[-1] = side[-1].rstrip(b"\r\n")
                else:
                    raise DiffError(
                        f"{source}: line {i + 1}: unexpected line inside hunk #{len(hunks) + 1} of {path} "
                        f"(starts with {tag!r}); the hunk is truncated or corrupted"
                    )
                i += 1
            if i < n and lines[i].startswith(b"\\"):
                for side in last:
                    side[-1] = side[-1].rstrip(b"\r\n")
                i += 1
            if len(old) != old_count or len(new) != new_count:
                raise DiffError(
                    f"{source}: hunk #{len(hunks) + 1} of {path} (line {hunk_line}): header says "
                    f"-{old_count} +{new_count} lines, body has -{len(old)} +{len(new)}; the patch is corrupted"
                )
            hunks.append(Hunk(len(hunks) + 1, old_start, new_start, tuple(old), tuple(new), header))
        if not hunks:
            raise DiffError(f"{source}: {path}: file section without hunks")
        files.append(FileDiff(path, tuple(hunks), creates=old_path == DEV_NULL, deletes=new_path == DEV_NULL))
    if not files:
        raise DiffError(f"{source}: no '--- a/...' / '+++ b/...' file sections found")
    return files


def _matches(lines: list[bytes], at: int, want: tuple[bytes, ...]) -> bool:
    return at >= 0 and at + len(want) <= len(lines) and all(lines[at + k] == w for k, w in enumerate(want))


def apply_file(fd: FileDiff, content: bytes | None, *, reverse: bool = False) -> FileResult:
    """Apply (or reverse-apply) every hunk of one file to its content; never touches the disk.

    Returns the new content and, if any hunk fails, the failures (then content is the input unchanged).
    """
    creates, deletes = (fd.deletes, fd.creates) if reverse else (fd.creates, fd.deletes)
    hunks = [h.reversed() if reverse else h for h in fd.hunks]
    if content is None:
        if not creates:
            return FileResult(None, [HunkFailure(fd.path, 1, hunks[0].header, "file does not exist")])
        content = b""
    elif creates:
        return FileResult(content, [HunkFailure(fd.path, 1, hunks[0].header, "file to create already exists")])
    lines = content.splitlines(keepends=True)
    out: list[bytes] = []
    pos = 0  # first line of `lines` not yet copied
    offset = 0
    failures: list[HunkFailure] = []
    for h in hunks:
        want = h.old
        expected = max(h.old_start - 1 + offset, 0) if want else max(h.old_start + offset, 0)
        found = -1
        if _matches(lines, expected, want) and expected >= pos:
            found = expected
        else:
            candidates = [at for at in range(pos, len(lines) - len(want) + 1) if _matches(lines, at, want)]
            if candidates:
                found = min(candidates, key=lambda at: abs(at - expected))
        if found < 0:
            failures.append(HunkFailure(fd.path, h.index, h.header, _why(lines, pos, expected, want)))
            continue
        out.extend(lines[pos:found])
        out.extend(h.new)
        pos = found + len(want)
        offset = found - (h.old_start - 1 if want else h.old_start)
    if failures:
        return FileResult(content, failures)
    out.extend(lines[pos:])
    result = b"".join(out)
    if deletes:
        if result:
            return FileResult(content, [HunkFailure(fd.path, len(hunks), hunks[-1].header, "file not empty")])
        return FileResult(None)
    return FileResult(result)


def _why(lines: list[bytes], pos: int, expected: int, want: tuple[bytes, ...]) -> str:
    """Name the first line of the hunk that does not match at its expected place."""
    at = max(expected, pos)
    for k, w in enumerate(want):
        have = lines[at + k] if at + k < len(lines) else None
        if have != w:
            got = "end of file" if have is None else repr(_text(have))
            return (
                f"context does not match (no fuzz): line {at + k + 1} is {got}, the patch expects "
                f"{_text(w)!r}; the text appears nowhere else either"
            )
    return "hunk overlaps the previous hunk"


def _text(line: bytes) -> str:
    return line.rstrip(b"\r\n").decode("utf-8", "replace")
