"""The pinned inputs of vfleet, read from versions.json: the one place each pin is written.

Code reads a pin through here (or through `vfleet.paths.versions()`, which finds the file of the vfleet
home); a copy that has to stay literal (a Dockerfile ARG default, requirements/cpu.txt, the README) is
compared with this file by tests/unit/test_pins_single_source.py.
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
class Pins:
    vllm_version: str
    wheels: dict[str, Wheel]
    torch_cpu: str
    base_images: dict[str, BaseImage]
    images: dict[str, str]


def parse(data: dict[str, Any]) -> Pins:
    v = data["vllm"]
    return Pins(
        vllm_version=str(v["version"]),
        wheels={dist: Wheel(str(w["filename"]), str(w["sha256"])) for dist, w in v["wheels"].items()},
        torch_cpu=str(data["torch"]["cpu"]),
        base_images={
            family: BaseImage(
                str(b["repository"]), str(b["tag"]), str(b.get("digest") or ""), bool(b.get("built_locally"))
            )
            for family, b in data["base_images"].items()
        },
        images={family: str(name) for family, name in data["images"].items()},
    )


def load(path: Path) -> Pins:
    return parse(read(path))
