"""Helpers shared by the image tests: build contexts, the docker client, what the patch series lists."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

from vfleet.dockerd import docker_bin
from vfleet.images import ROOT

CONTEXTS = ROOT / ".cache" / "test-contexts"
#: Secrets the CPU image build finds in its context and environment (tests/e2e/conftest.py plants them);
#: test_image_cpu looks for them in every layer, label and history line.
TOKEN = "hf_vfleetTESTtoken" + "7f3a9c1e5b"
KEY = "sk-vfleet-TEST-api-key-" + "c0ffee42d00d"
CONTEXT_PARTS = [
    "images",
    "vfleet",
    "patches",
    "serve_configs",
    "versions.json",
    "pyproject.toml",
    "requirements",
    ".dockerignore",
]


def make_context(with_wheels: bool) -> Path:
    """A copy of the build context under .cache (same filesystem, so the wheels are hard links, not copies)."""
    ctx = CONTEXTS / uuid.uuid4().hex[:10]
    ctx.mkdir(parents=True)
    for part in CONTEXT_PARTS:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, ctx / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, ctx / part)
    if with_wheels:
        (ctx / ".cache").mkdir()
        subprocess.run(
            ["cp", "-al", str(ROOT / ".cache" / "image-wheels"), str(ctx / ".cache" / "image-wheels")], check=True
        )
    return ctx


def drop_context(ctx: Path) -> None:
    if ctx.is_relative_to(CONTEXTS):
        shutil.rmtree(ctx, ignore_errors=True)


def dk(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([docker_bin(), *args], capture_output=True, text=True, check=False, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return proc


def inspect(ref: str) -> dict[str, Any]:
    data: list[dict[str, Any]] = json.loads(dk("image", "inspect", ref).stdout)
    return data[0]


def series_patches(family: str | None = None, base: str | None = None) -> list[str]:
    """The patch names the series of the vLLM base BASE lists (versions.json; default: the default
    base's patches/series), in order; with ``family``, those whose Platforms name it."""
    from vfleet.pins import load

    series = load(ROOT / "versions.json").base(base).series
    names = []
    for line in (ROOT / series).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line.split()[0])
    if family is None:
        return names
    keep = []
    for name in names:
        head = (ROOT / "patches" / name).read_text().split("\n\n", 1)[0]
        plats = [ln.split(":", 1)[1] for ln in head.splitlines() if ln.startswith("Platforms:")]
        if plats and family in [p.strip() for p in plats[0].split(",")]:
            keep.append(name)
    return keep


def stem(name: str) -> str:
    return Path(name).name.removesuffix(".patch")


def remove_images(*refs: str) -> None:
    for ref in refs:
        res = dk("image", "inspect", "--format", '{{index .Config.Labels "org.vfleet.managed"}}', ref, check=False)
        if res.returncode == 0 and res.stdout.strip() == "true":
            dk("image", "rm", ref, check=False)
