"""The vLLM trees the patch regression tests run against, and the probes that run on them.

Normally every fix test runs on two trees and asserts the outcome for each, so it can fail either way:
  base     the unpatched tree of the default base (`vfleet patches fetch-base`): the bug must show;
  patched  a copy with the series applied for cuda (all of a-d): the bug must be gone.
A test that names its fix (`kinds("0004")`) also runs on the other bases of versions.json: the unpatched
tree and the patched copy where that base's series carries the fix, the unpatched tree alone (the fix
must be there) where the series leaves it out as upstream.
With VFLEET_VERIFY_TREE=DIR (set by `vfleet patches status`) they run only on DIR, an unpatched
release, and pass iff the release already has the fix: that is the "already upstream" signal.
Each tree is probed in its own process (trees of different releases cannot share one interpreter).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
VERIFY_ENV = "VFLEET_VERIFY_TREE"


def kinds(fix: str | None = None) -> list[tuple[str, bool]]:
    """(tree kind, whether the fix must be present in it). With FIX (a patch number, e.g. "0004") the
    other bases of versions.json are added: a base whose series carries a patch of that fix runs on its
    unpatched tree (the bug must show: "base-<version>") and its patched copy ("patched-<version>"); a
    base whose series leaves the fix out claims it upstream, so its unpatched tree must have it."""
    if os.environ.get(VERIFY_ENV):
        return [("release", True)]
    out = [("base", False), ("patched", True)]
    for version, needed in other_bases(fix).items():
        out += [(f"base-{version}", False), (f"patched-{version}", True)] if needed else [(f"base-{version}", True)]
    return out


def other_bases(fix: str | None) -> dict[str, bool]:
    """Each base but the default -> whether its series carries a patch of FIX (none without FIX)."""
    if fix is None:
        return {}
    from vfleet import paths, pins
    from vfleet.patchset.series import load_series

    return {
        version: any(p.fix == fix for p in load_series(base=version))
        for version, b in pins.parse(paths.versions()).bases.items()
        if not b.default
    }


def ids(cases: list[tuple[str, bool]]) -> list[str]:
    return [k for k, _ in cases]


@cache
def base_tree(version: str | None = None) -> Path:
    from vfleet.patchset.fetch import fetch_base

    return fetch_base(version, say=lambda m: None)


@cache
def patched_tree(version: str | None = None) -> Path:
    """A copy of the base tree with its base's series applied for cuda."""
    from vfleet.patchset.apply import apply

    base = base_tree(version)
    dest = REPO / ".cache" / "test-trees" / f"{base.name}-patched-cuda"
    if dest.exists():
        shutil.rmtree(dest)  # always rebuilt from the current series
    shutil.copytree(base, dest)
    apply(dest, "cuda", base=version)
    return dest


def tree(kind: str) -> Path:
    if kind == "release":
        return Path(os.environ[VERIFY_ENV]).resolve()
    name, _, version = kind.partition("-")
    return base_tree(version or None) if name == "base" else patched_tree(version or None)


@cache
def kernel_probe(path: Path) -> dict[str, Any]:
    """The seed kernel run under TRITON_INTERPRET=1 on the CPU (see kpool_seed_probe.py)."""
    proc = subprocess.run(
        [sys.executable, str(HERE / "kpool_seed_probe.py"), "--tree", str(path), "--device", "cpu"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return data


@cache
def python_probe(path: Path) -> dict[str, Any]:
    """GLM-5.3 Python facts of the tree (see vllm_tree_probe.py)."""
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", VLLM_LOGGING_LEVEL="ERROR")
    proc = subprocess.run(
        [sys.executable, str(HERE / "vllm_tree_probe.py"), "--tree", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd=HERE,
        env=env,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("VFLEET_PROBE ")]
    assert proc.returncode == 0 and lines, (proc.stdout[-2000:], proc.stderr[-3000:])
    data: dict[str, Any] = json.loads(lines[-1].removeprefix("VFLEET_PROBE "))
    return data
