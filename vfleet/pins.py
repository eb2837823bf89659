"""The pinned inputs of vfleet, read from versions.json: the one place each pin is written.

Code reads a pin through here (or through `vfleet.paths.versions()`, which finds the file of the vfleet
home); a copy that has to stay literal (a Dockerfile ARG default, requirements/cpu.txt, the README) is
compared with this file by tests/unit/core/test_pins_single_source.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfleet.errors import VfleetError


def read(path: Path) -> dict[str, Any]:
    """versions.json as data; a missing or broken file is a VfleetError that names it."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise VfleetError(f"{path}: cannot read the pin file ({exc}); restore it from git") from exc
    return data


@dataclass(frozen=True)
class Wheel:
    filename: str
    sha256: str


@dataclass(frozen=True)
class BaseImage:
    repository: str
    tag: str
    digest: str
    built_locally: bool

    @property
    def ref(self) -> str:
        """repository:tag, without the digest."""
        return f"{self.repository}:{self.tag}"


@dataclass(frozen=True)
class Base:
    """One vLLM base vfleet builds on (versions.json `bases`): its wheels, the torch and Python its vllm
    wheel requires, the upstream images and the series file (relative to the vfleet home) it takes."""

    version: str
    default: bool
    wheels: dict[str, Wheel]
    absent: dict[str, str]  # dist -> why PyPI has no such wheel for this base
    torch: str
    python: str
    base_images: dict[str, BaseImage]
    series: str
    #: What has been proven about this base, and where (booted and verified, or built and tested only):
    #: the docs and the fleet page say it from here.
    proven: str = ""


@dataclass(frozen=True)
class Pins:
    vllm_version: str  # the default base
    wheels: dict[str, Wheel]
    torch_cpu: str
    base_images: dict[str, BaseImage]
    images: dict[str, str]
    bases: dict[str, Base]

    def base(self, version: str | None = None, *, source: str = "versions.json") -> Base:
        """The base VERSION (default: the default base); an unknown one is a VfleetError naming the file."""
        version = version or self.vllm_version
        if version not in self.bases:
            raise VfleetError(
                f"vLLM base {version} is not in {source} (bases: {', '.join(self.bases)}); add it under "
                "`bases` there (docs/howto-base-bump.md) or choose one of those"
            )
        return self.bases[version]


def _wheels(data: dict[str, Any]) -> tuple[dict[str, Wheel], dict[str, str]]:
    wheels: dict[str, Wheel] = {}
    absent: dict[str, str] = {}
    for dist, w in data.items():
        if "absent" in w:
            absent[dist] = str(w["absent"])
        else:
            wheels[dist] = Wheel(str(w["filename"]), str(w["sha256"]))
    return wheels, absent


def _images(data: dict[str, Any]) -> dict[str, BaseImage]:
    return {
        family: BaseImage(str(b["repository"]), str(b["tag"]), str(b.get("digest") or ""), bool(b.get("built_locally")))
        for family, b in data.items()
    }


#: The series file of a pin file without `bases`.
SERIES = "patches/series"
#: What a base entry carries itself; the default base's wheels and images are the top-level pins.
_OWN_PINS = ("wheels", "base_images")


def _bases(data: dict[str, Any], default: Base, source: str) -> dict[str, Base]:
    if "bases" not in data:  # a pin file from before bases (an older release snapshot): one base
        return {default.version: Base(default.version, True, default.wheels, {}, "", "", default.base_images, SERIES)}
    entries = {k: v for k, v in data["bases"].items() if not k.startswith("_")}
    if default.version not in entries:
        raise VfleetError(
            f"{source}: the default base {default.version} (vllm.version) has no entry under `bases`; "
            "give it its torch, python and series there"
        )
    out: dict[str, Base] = {}
    for version, e in entries.items():
        where = f"{source}: bases.{version}"
        missing = [k for k in ("torch", "python", "series") if not isinstance(e, dict) or not e.get(k)]
        if missing:
            raise VfleetError(f"{where}: missing {', '.join(missing)}")
        if version == default.version:
            repeated = [k for k in _OWN_PINS if k in e]
            if repeated:
                raise VfleetError(
                    f"{where}: the default base's {' and '.join(repeated)} are the top-level pins "
                    "(vllm.wheels, base_images); write them once, there"
                )
            out[version] = Base(
                version,
                True,
                default.wheels,
                {},
                str(e["torch"]),
                str(e["python"]),
                default.base_images,
                str(e["series"]),
                str(e.get("proven") or ""),
            )
            continue
        lacking = [k for k in _OWN_PINS if not e.get(k)]
        if lacking:
            raise VfleetError(f"{where}: a base other than the default carries its own {', '.join(lacking)}")
        wheels, absent = _wheels(e["wheels"])
        for dist, w in wheels.items():
            if version not in w.filename.replace("_", "-") or len(w.sha256) != 64:
                raise VfleetError(
                    f"{where}.wheels.{dist}: {w.filename} with sha256 {w.sha256!r} is not a {version} pin"
                )
        out[version] = Base(
            version,
            False,
            wheels,
            absent,
            str(e["torch"]),
            str(e["python"]),
            _images(e["base_images"]),
            str(e["series"]),
            str(e.get("proven") or ""),
        )
    return out


def parse(data: dict[str, Any], *, source: str = "versions.json") -> Pins:
    v = data["vllm"]
    wheels, _ = _wheels(v["wheels"])
    images = _images(data["base_images"])
    default = Base(str(v["version"]), True, wheels, {}, "", "", images, "")
    return Pins(
        vllm_version=str(v["version"]),
        wheels=wheels,
        torch_cpu=str(data["torch"]["cpu"]),
        base_images=images,
        images={family: str(name) for family, name in data["images"].items()},
        bases=_bases(data, default, source),
    )


def load(path: Path) -> Pins:
    return parse(read(path), source=str(path))
