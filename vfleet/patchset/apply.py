"""Apply the series to an installed vLLM tree: every hunk of every patch is checked first, in memory;
nothing is written unless all of them apply; then a manifest records what was applied."""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfleet import paths
from vfleet.errors import VfleetError
from vfleet.patchset.diff import HunkFailure, apply_file
from vfleet.patchset.series import Patch, load_series, select, series_sha256

MANIFEST = "vllm/vfleet_patch_manifest.json"
_VERSION_RE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M)


class ApplyError(VfleetError):
    """The series cannot be applied; the tree is unchanged."""


def pinned_version() -> str:
    v: str = paths.versions()["vllm"]["version"]
    return v


def tree_version(root: Path) -> str:
    """The vLLM version of the tree at root (site-packages dir holding vllm/)."""
    vfile = root / "vllm" / "_version.py"
    if not (root / "vllm").is_dir():
        raise ApplyError(f"{root}: no vllm/ directory here; --root must be the site-/dist-packages dir holding vllm/")
    try:
        m = _VERSION_RE.search(vfile.read_text())
    except OSError as exc:
        raise ApplyError(f"{vfile}: cannot read the vLLM version ({exc})") from exc
    if not m:
        raise ApplyError(f"{vfile}: no __version__ found")
    return m.group(1)


@dataclass
class Plan:
    """Result of checking a series against a tree, in memory."""

    originals: dict[str, bytes | None]
    results: dict[str, bytes | None]
    failures: list[tuple[Patch, HunkFailure]]
    already: list[tuple[Patch, HunkFailure]]  # hunks that fail forward but reverse-apply
    total_hunks: int


def plan(root: Path, patches: list[Patch]) -> Plan:
    """Check every hunk of every patch, in order, on an in-memory copy of the files."""
    state: dict[str, bytes | None] = {}
    originals: dict[str, bytes | None] = {}
    failures: list[tuple[Patch, HunkFailure]] = []
    already: list[tuple[Patch, HunkFailure]] = []
    for patch in patches:
        for fd in patch.files:
            if fd.path not in state:
                f = root / fd.path
                state[fd.path] = f.read_bytes() if f.is_file() else None
                originals[fd.path] = state[fd.path]
            res = apply_file(fd, state[fd.path])
            if res.failures:
                for fail in res.failures:
                    one = type(fd)(fd.path, tuple(h for h in fd.hunks if h.index == fail.hunk))
                    if one.hunks and not apply_file(one, state[fd.path], reverse=True).failures:
                        already.append((patch, fail))
                    else:
                        failures.append((patch, fail))
                continue
            state[fd.path] = res.content
    return Plan(originals, state, failures, already, sum(len(fd.hunks) for p in patches for fd in p.files))


def _write_atomic(path: Path, data: bytes | None) -> None:
    if data is None:
        path.unlink(missing_ok=True)
        return
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".vfleet-tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def manifest_data(patches: list[Patch], platform: str, base_version: str) -> dict[str, Any]:
    return {
        "base_version": base_version,
        "platform": platform,
        "series_sha256": series_sha256(patches),
        "patches": [p.manifest_entry() for p in patches],
    }


def apply(root: Path, platform: str, *, expect_version: str | None = None) -> dict[str, Any]:
    """All-or-nothing apply. Returns the manifest written. Raises ApplyError with the tree unchanged."""
    root = root.resolve()
    want = expect_version or pinned_version()
    have = tree_version(root)
    manifest = root / MANIFEST
    if manifest.exists():
        raise ApplyError(
            f"{root}: already patched ({MANIFEST} exists); applying twice is refused. "
            "Start again from an unpatched vLLM tree."
        )
    if have.split("+", 1)[0] != want:  # a local build suffix (X.Y.Z+rocm...) is the same release
        raise ApplyError(
            f"{root}: vLLM {have} is not the pinned base {want}; the patches are written for {want}. "
            f"Install vLLM {want} there (or run `vfleet patches status --base {have}` for a rebase report)."
        )
    patches = select(load_series(), platform)
    p = plan(root, patches)
    if p.failures or p.already:
        lines = [f"  {patch.name}: {fail}" for patch, fail in p.failures]
        lines += [f"  {patch.name}: {fail.path} hunk #{fail.hunk}: already applied" for patch, fail in p.already]
        if len(p.already) == p.total_hunks:
            what = "the tree is already patched (every failing hunk is already applied)"
        elif p.already:
            what = "the tree is partially patched"
        else:
            what = "patches do not apply"
        raise ApplyError(
            f"{root}: {what}; nothing was written:\n" + "\n".join(lines) + "\n  fix: start from an unpatched vLLM "
            f"{want} tree, or rebase the failing patch (docs/patches.md)"
        )
    data = manifest_data(patches, platform, want)
    written: list[str] = []
    try:
        for rel, content in p.results.items():
            if content != p.originals[rel]:
                _write_atomic(root / rel, content)
                written.append(rel)
        _write_atomic(manifest, (json.dumps(data, indent=2) + "\n").encode())
    except BaseException as exc:
        for rel in written:  # put back what was written before the failure
            _write_atomic(root / rel, p.originals[rel])
        manifest.unlink(missing_ok=True)
        raise ApplyError(f"{root}: writing the patched files failed ({exc}); the originals were restored") from exc
    return data


def verify(root: Path) -> list[str]:
    """Problems with a patched tree (empty: good): manifest matches the series, every patch's change is
    present, every patched file byte-compiles."""
    root = root.resolve()
    manifest = root / MANIFEST
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError) as exc:
        return [f"{manifest}: missing or unreadable ({exc}); run `vfleet patches apply` on this tree"]
    problems: list[str] = []
    platform = data.get("platform")
    try:
        patches = select(load_series(), str(platform))
    except VfleetError as exc:
        return [str(exc)]
    want = manifest_data(patches, str(platform), pinned_version())
    for key in ("base_version", "series_sha256"):
        if data.get(key) != want[key]:
            problems.append(f"manifest {key} is {data.get(key)!r}, the series gives {want[key]!r}")
    if data.get("patches") != want["patches"]:
        problems.append("manifest patch list differs from the series (names, sha256, platforms or status)")
    try:
        version = tree_version(root)
    except ApplyError as exc:
        problems.append(str(exc))
    else:
        if version.split("+", 1)[0] != want["base_version"]:
            problems.append(f"tree is vLLM {version}, the pinned base is {want['base_version']}")
    # Every patch must be present: reverse-apply the whole series, last patch first, in memory.
    state: dict[str, bytes | None] = {}
    for patch in reversed(patches):
        for fd in patch.files:
            if fd.path not in state:
                f = root / fd.path
                state[fd.path] = f.read_bytes() if f.is_file() else None
            res = apply_file(fd, state[fd.path], reverse=True)
            if res.failures:
                problems += [f"{patch.name}: not present in the tree: {fail}" for fail in res.failures]
            else:
                state[fd.path] = res.content
    for rel in sorted({fd.path for p in patches for fd in p.files}):
        f = root / rel
        if f.suffix == ".py" and f.is_file():
            try:
                compile(f.read_bytes(), str(f), "exec", dont_inherit=True)
            except (SyntaxError, ValueError) as exc:
                problems.append(f"{rel}: does not byte-compile: {exc}")
    return problems
