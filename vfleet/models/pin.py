"""The pin of a real model: versions.json `models.<name>` (the one place it is written; docs/models.md).

Each entry: package (the distribution on the package registry), version, filename (the wheel's), sha256 (of
the wheel), gguf (the .gguf file inside it) and license.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from vfleet import paths
from vfleet.errors import VfleetError

FIELDS = ("package", "version", "filename", "sha256", "gguf", "license")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ModelPinError(VfleetError):
    """A model's pin is missing or malformed."""


@dataclass(frozen=True)
class ModelPin:
    name: str
    package: str  # the distribution on the package registry
    version: str
    filename: str  # the wheel's file name
    sha256: str  # of the wheel
    gguf: str  # the GGUF file inside the wheel (its base name)
    license: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


def parse(data: dict[str, Any], name: str, *, source: str = "versions.json") -> ModelPin:
    """The pin of model NAME in a parsed versions.json; what is missing or malformed is a ModelPinError
    naming `source: models.NAME` and the field."""
    models = data.get("models")
    if not isinstance(models, dict):
        raise ModelPinError(
            f"{source} has no `models` section, so model {name!r} has no pin; add one with "
            f'"{name}": {{{", ".join(FIELDS)}}} there (docs/models.md)'
        )
    known = sorted(k for k in models if not k.startswith("_"))
    entry = models.get(name)
    if not isinstance(entry, dict):
        raise ModelPinError(f"model {name!r} is not pinned in {source} (models: {', '.join(known) or 'none'})")
    where = f"{source}: models.{name}"
    missing = [f for f in FIELDS if not isinstance(entry.get(f), str) or not entry[f]]
    if missing:
        raise ModelPinError(f"{where}: missing {', '.join(missing)} (each a non-empty string; docs/models.md)")
    pin = ModelPin(name, *(str(entry[f]) for f in FIELDS))
    if not _SHA256.fullmatch(pin.sha256):
        raise ModelPinError(f"{where}.sha256: {pin.sha256!r} is not 64 lower-case hex digits")
    dist = pin.package.replace("-", "_").lower()
    if not pin.filename.endswith(".whl") or not pin.filename.lower().startswith(f"{dist}-{pin.version}-"):
        raise ModelPinError(
            f"{where}.filename: {pin.filename!r} is not a wheel of {pin.requirement} "
            f"(expected {dist}-{pin.version}-*.whl)"
        )
    if "/" in pin.gguf or not pin.gguf.endswith(".gguf"):
        raise ModelPinError(f"{where}.gguf: {pin.gguf!r} is not the base name of a .gguf file")
    return pin


def names(data: dict[str, Any]) -> list[str]:
    """The pinned model names (empty when versions.json has no `models`)."""
    models = data.get("models")
    return sorted(k for k in models if not k.startswith("_")) if isinstance(models, dict) else []


def load(name: str) -> ModelPin:
    """The pin of NAME from the vfleet home's versions.json."""
    return parse(paths.versions(), name, source=str(paths.release_dir() / "versions.json"))
