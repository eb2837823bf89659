"""The steps run inside an image build (images/steps.sh): apply the patch set, verify it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from vfleet.images.refs import ImageError


def vllm_site() -> Path:
    """The site-packages that holds vLLM, as this image's Python reports it (the package is not imported)."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise ImageError(f"vllm is not installed for {sys.executable}: this base image has no vLLM")
    return Path(next(iter(spec.submodule_search_locations))).parent


def notice(msg: str) -> None:
    print(f"vfleet-build: NOTICE: {msg}", flush=True)


def _patched_files(manifest: dict[str, Any], patches_dir: Path) -> list[str]:
    """Paths (relative to site-packages) the applied patches touch, read from the patch files."""
    files: set[str] = set()
    entries = manifest.get("patches", [])
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict):
            for key in ("files", "paths"):
                for f in entry.get(key) or []:
                    files.add(str(f))
            name = entry.get("name") or entry.get("file") or entry.get("patch")
        else:
            name = entry
        if not name:
            continue
        for cand in (patches_dir / str(name), patches_dir / f"{name}.patch"):
            if cand.is_file():
                for line in cand.read_text(errors="replace").splitlines():
                    if line.startswith("+++ ") and not line.startswith("+++ /dev/null"):
                        rel = line[4:].split("\t")[0].strip()
                        files.add(rel[2:] if rel.startswith(("a/", "b/")) else rel)
                break
    return sorted(files)


def step_patch(family: str) -> None:
    root = vllm_site()
    print(f"vfleet-build: Python reports vLLM in {root}; applying the patch set for {family}", flush=True)
    # vfleet finds its data dir by serve_configs/, which a later, thinner layer fills: make the directory
    # now so that a profile change does not rebuild this layer.
    (Path(os.environ.get("VFLEET_HOME", "/opt/vfleet")) / "serve_configs").mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet", "patches", "apply", "--root", str(root), "--platform", family],
        check=False,
    )
    if proc.returncode != 0:
        raise ImageError(
            f"the patch set did not apply onto {root}/vllm (exit {proc.returncode}); the message "
            "above names the patch, file and hunk. The image is not built."
        )
    if not (root / "vllm" / "vfleet_patch_manifest.json").is_file():
        raise ImageError(f"`vfleet patches apply` wrote no manifest at {root}/vllm/vfleet_patch_manifest.json")


def step_verify(family: str) -> None:
    import importlib.util

    root = vllm_site()
    proc = subprocess.run([sys.executable, "-m", "vfleet", "patches", "verify", "--root", str(root)], check=False)
    if proc.returncode != 0:
        raise ImageError(f"`vfleet patches verify --root {root}` failed (exit {proc.returncode})")
    manifest = json.loads((root / "vllm" / "vfleet_patch_manifest.json").read_text())
    patches_dir = Path(os.environ.get("VFLEET_HOME", "/opt/vfleet")) / "patches"
    files = [f for f in _patched_files(manifest, patches_dir) if f.endswith(".py")]
    for rel in files:
        src = (root / rel).read_text()
        compile(src, str(root / rel), "exec")  # a SyntaxError fails the build, naming the file
    print(
        f"vfleet-build: manifest verified; {len(files)} patched module(s) compile: {', '.join(files)}",
        flush=True,
    )
    if importlib.util.find_spec("torch") is None:
        notice("no torch in this base (a stand-in?): skipped the import check of the patched modules")
    else:
        for rel in files:
            mod = rel[:-3].replace("/", ".").removesuffix(".__init__")
            chk = subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True, text=True, check=False)
            if chk.returncode == 0:
                print(f"vfleet-build: patched module {mod} imports", flush=True)
            elif family == "cpu" and "No module named 'torchvision'" in chk.stderr:
                # The CPU image removes torchvision on purpose (its CUDA build breaks transformers beside
                # torch+cpu); the GLM-5.3 package pulls in a vision model that needs it.
                notice(f"skipped the import of {mod}: it needs torchvision, which the CPU image leaves out")
            else:
                raise ImageError(f"patched module {mod} does not import: {chk.stderr.strip()[-800:]}")
    if family != "cpu":
        notice("no GPU at build time: GPU kernel checks of the patched code run at boot-verify on the node")
