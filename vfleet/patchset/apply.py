"""Apply the series to an installed vLLM tree with one `git apply` over every patch: git checks every
hunk of every patch first and writes nothing unless all of them apply; then a manifest records what was
applied. When git refuses, each patch is tried on a scratch copy to name the patch, file and hunk, and to
tell a tree that is already (or partly) patched from one the patches do not fit."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vfleet import paths, pins
from vfleet.errors import VfleetError
from vfleet.patchset import gitapply
from vfleet.patchset.series import Patch, base_version, load_series, select, series_sha256

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


def vllm_site() -> Path:
    """The site-packages that holds vLLM, as this Python reports it (the package is not imported)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise ApplyError(
            f"vllm is not installed for {sys.executable}: pass --root DIR, the site-packages dir holding vllm/"
        )
    return Path(next(iter(spec.submodule_search_locations))).parent


def touched(patches: list[Patch]) -> list[str]:
    """Every path the patches change, in first-seen order."""
    return list(dict.fromkeys(rel for p in patches for rel in p.files))


@dataclass(frozen=True)
class PatchFinding:
    """One hunk (or a whole file: hunk 0) of one patch that git does not apply."""

    patch: Patch
    path: str
    hunk: int
    header: str
    reason: str

    def where(self) -> str:
        if not self.hunk:
            return f"{self.path}: {self.reason}"
        return f"{self.path} hunk #{self.hunk}" + (f" ({self.header})" if self.header else "") + f": {self.reason}"

    def __str__(self) -> str:
        return f"{self.patch.name}: {self.where()}"


NO_MATCH = "does not match the tree exactly (git apply: no fuzz)"
NOT_PRESENT = "its patched text is not in the tree (git apply -R does not undo it)"


def findings(tree: Path, patch: Patch, *, reverse: bool = False) -> tuple[list[PatchFinding], list[PatchFinding]]:
    """For a patch that git refuses on tree as a whole: (hunks that fail, hunks that are already applied).

    reverse=True checks that the patch is present: a hunk that git cannot undo fails; none is 'already'."""
    fwd = gitapply.hunks(tree, patch.path, patch.files, reverse=reverse)
    back = {} if reverse else gitapply.hunks(tree, patch.path, patch.files, reverse=True)
    fail: list[PatchFinding] = []
    done: list[PatchFinding] = []
    for rel, res in fwd.items():
        undo = back.get(rel)
        if res.error:
            (done if undo is not None and undo.clean else fail).append(PatchFinding(patch, rel, 0, "", res.error))
        for num, header in sorted(res.rejected.items()):
            if undo is not None and (undo.clean or num in undo.applied):
                done.append(PatchFinding(patch, rel, num, header, "already applied"))
            else:
                fail.append(PatchFinding(patch, rel, num, header, NOT_PRESENT if reverse else NO_MATCH))
    return fail, done


@dataclass
class Plan:
    """What git says about a series on a tree; an empty git_message means it applies."""

    git_message: str = ""
    failures: list[PatchFinding] = field(default_factory=list)
    already: list[PatchFinding] = field(default_factory=list)
    fully_applied: bool = False  # the whole series reverse-applies: the tree is already patched


def plan(root: Path, patches: list[Patch]) -> Plan:
    """Check the series in one `git apply --check`; if git refuses it, find out per patch and hunk why,
    applying the patches that do apply to a scratch copy so that later patches see them."""
    message = gitapply.check(root, [p.path for p in patches])
    if message is None:
        return Plan()
    result = Plan(git_message=message)
    result.fully_applied = gitapply.check(root, [p.path for p in reversed(patches)], reverse=True) is None
    with gitapply.scratch(root, touched(patches)) as copy:
        for patch in patches:
            if gitapply.check(copy, [patch.path]) is None:
                gitapply.apply(copy, [patch.path])
                continue
            fail, done = findings(copy, patch)
            result.failures += fail
            result.already += done
    return result


def _write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
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


def _snapshot(root: Path, rels: list[str]) -> dict[str, tuple[bytes, int] | None]:
    out: dict[str, tuple[bytes, int] | None] = {}
    for rel in rels:
        f = root / rel
        out[rel] = (f.read_bytes(), f.stat().st_mode & 0o7777) if f.is_file() else None
    return out


def _restore(root: Path, originals: dict[str, tuple[bytes, int] | None]) -> None:
    for rel, saved in originals.items():
        if saved is None:
            (root / rel).unlink(missing_ok=True)
        else:
            _write_atomic(root / rel, *saved)


def manifest_data(patches: list[Patch], platform: str, base_version: str) -> dict[str, Any]:
    return {
        "base_version": base_version,
        "platform": platform,
        "series_sha256": series_sha256(patches),
        "patches": [p.manifest_entry() for p in patches],
    }


def refusal(root: Path, p: Plan, want: str) -> ApplyError:
    lines = [f"  {fail}" for fail in p.failures] + [f"  {done}" for done in p.already]
    if p.fully_applied:  # one line per patch is enough
        lines = [f"  {name}: already applied" for name in dict.fromkeys(d.patch.name for d in p.already)]
    if not lines:  # git refused the series, but no single patch on its own: say what git said
        lines = [f"  git apply --check: {p.git_message}"]
    if p.fully_applied:
        what = "the tree is already patched (the whole series reverse-applies)"
    elif p.already:
        what = "the tree is partially patched"
    else:
        what = "a hunk does not match the tree"
    return ApplyError(
        f"{root}: the patch set did not apply: {what}; nothing was written:\n" + "\n".join(lines) + "\n  fix: start "
        f"from an unpatched vLLM {want} tree, or rebase the failing patch (docs/patches.md)"
    )


def apply(root: Path, platform: str, *, expect_version: str | None = None, base: str | None = None) -> dict[str, Any]:
    """All-or-nothing apply of BASE's series (default: the default base). Returns the manifest written.
    Raises ApplyError with the tree unchanged."""
    root = root.resolve()
    base = base_version(base)
    want = expect_version or base
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
            f"Install vLLM {want} there, pass --base {have} if versions.json has that base, "
            f"or run `vfleet patches status --base {have}` for a rebase report."
        )
    patches = select(load_series(base=base), platform)
    gitapply.ensure_outside_repository(root)
    p = plan(root, patches)
    if p.git_message:
        raise refusal(root, p, want)
    data = manifest_data(patches, platform, want)
    originals = _snapshot(root, touched(patches))
    try:
        gitapply.apply(root, [patch.path for patch in patches])
        _write_atomic(manifest, (json.dumps(data, indent=2) + "\n").encode())
    except BaseException as exc:
        _restore(root, originals)  # put back what git wrote before the failure
        manifest.unlink(missing_ok=True)
        raise ApplyError(f"{root}: writing the patched files failed ({exc}); the originals were restored") from exc
    return data


def verify(root: Path, base: str | None = None) -> list[str]:
    """Problems with a patched tree (empty: good): manifest matches BASE's series (default: the default
    base), every patch's change is present (the series reverse-applies, last patch first), every patched
    file byte-compiles."""
    root = root.resolve()
    try:
        base = base_version(base)
    except VfleetError as exc:
        return [str(exc)]
    manifest = root / MANIFEST
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError) as exc:
        return [f"{manifest}: missing or unreadable ({exc}); run `vfleet patches apply` on this tree"]
    problems: list[str] = []
    platform = data.get("platform")
    if data.get("base_version") != base and data.get("base_version") in pins.parse(paths.versions()).bases:
        return [
            f"{manifest}: the tree is patched for vLLM {data.get('base_version')}, not for base {base}; "
            f"verify it with --base {data.get('base_version')}"
        ]
    try:
        patches = select(load_series(base=base), str(platform))
    except VfleetError as exc:
        return [str(exc)]
    want = manifest_data(patches, str(platform), base)
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
    gitapply.ensure_outside_repository(root)
    backwards = list(reversed(patches))
    if gitapply.check(root, [p.path for p in backwards], reverse=True) is not None:
        missing: list[PatchFinding] = []
        with gitapply.scratch(root, touched(patches)) as copy:
            for patch in backwards:
                if gitapply.check(copy, [patch.path], reverse=True) is None:
                    gitapply.apply(copy, [patch.path], reverse=True)
                else:
                    missing += findings(copy, patch, reverse=True)[0]
        problems += [f"{m.patch.name}: not present in the tree: {m.where()}" for m in missing]
        if not missing:
            problems.append("the series does not reverse-apply as a whole (git apply -R --check)")
    for rel in touched(patches):
        f = root / rel
        if f.suffix == ".py" and f.is_file():
            try:
                compile(f.read_bytes(), str(f), "exec", dont_inherit=True)
            except (SyntaxError, ValueError) as exc:
                problems.append(f"{rel}: does not byte-compile: {exc}")
    return problems
