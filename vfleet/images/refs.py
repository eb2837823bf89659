"""The image references vfleet builds from and to, read from versions.json (vfleet.pins)."""

from __future__ import annotations

import sys
from typing import Any

from vfleet import PACKAGE_DIR, __version__
from vfleet import pins as _pins
from vfleet.errors import VfleetError
from vfleet.profile_schema import FAMILIES as FAMILIES  # re-exported: the one list of families

ROOT = PACKAGE_DIR.parent
CACHE = ROOT / ".cache"
WHEELS = CACHE / "image-wheels"
STANDIN_DIR = CACHE / "standin"
LABEL = "org.vfleet"


class ImageError(VfleetError):
    """An image input is missing or a build step failed."""


def pins() -> dict[str, Any]:
    """The checkout's versions.json as data."""
    return _pins.read(ROOT / "versions.json")


def pinned() -> _pins.Pins:
    """The checkout's pins, typed."""
    return _pins.parse(pins())


def base_ref() -> str:
    return pinned().base_images["cpu"].ref


def gpu_base_ref(family: str) -> str:
    b = pinned().base_images[family]
    return f"{b.ref}@{b.digest}" if b.digest else b.ref


def release_base_check(family: str, *, allow_empty_digest: bool) -> str:
    """A release build must name its GPU base by digest, so that the same tag cannot drift under it.

    Returns the pinned reference; raises when the pin has no digest, unless that is explicitly allowed.
    """
    if family == "cpu":
        return base_ref()  # made locally by `vfleet image base`; it has no registry digest
    b = pinned().base_images[family]
    if not b.digest:
        if allow_empty_digest:
            print(
                f"vfleet image: WARNING: release build on {b.ref} without a digest (--allow-empty-digest)",
                file=sys.stderr,
            )
        else:
            raise ImageError(
                f"versions.json: base_images.{family}.digest is empty, so a release build of {family} would "
                f"use whatever {b.ref} points at today. Pull the image, put its "
                "sha256 digest (docker image inspect --format '{{index .RepoDigests 0}}') in versions.json, "
                "or pass --allow-empty-digest to build anyway"
            )
    return gpu_base_ref(family)


def standin_ref() -> str:
    return f"vfleet-standin-gpu:v{pinned().vllm_version}"


def image_ref(family: str) -> str:
    p = pinned()
    return f"{p.images[family]}:{p.vllm_version}-vfleet{__version__}"
