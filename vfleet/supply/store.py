"""The supply-chain store: one directory per image, named by its image ID (the sha256 of the image
config), which is the same on every Docker daemon and is the `config.digest` of every registry manifest
the image is pushed as. A local image and its pushed copies therefore share one record:

    STORE/<image-id hex>/
        sbom.cdx.json                  syft's CycloneDX JSON + the vfleet patch set
        vulns.json                     pip-audit of the image's Python packages (or "unknown" and why)
        statement.json                 the unsigned in-toto Statement the build wrote
        provenance/<subject hex>.dsse.json   the signed Statement, one per subject digest
"""

from __future__ import annotations

from pathlib import Path

from vfleet import settings
from vfleet.errors import VfleetError
from vfleet.paths import reports_dir

SBOM = "sbom.cdx.json"
VULNS = "vulns.json"
STATEMENT = "statement.json"
PROVENANCE = "provenance"


class SupplyError(VfleetError):
    """A supply-chain input is missing or unusable (a key file, the store, a registry answer)."""


def default_store() -> Path:
    """VFLEET_SUPPLY_STORE, else supply/ under the reports root (VFLEET_REPORTS or the home's reports/)."""
    env = settings.load().supply_store
    if env:
        return env.expanduser().resolve()
    return reports_dir() / "supply"


def hex_of(digest: str) -> str:
    """The hex part of sha256:HEX; anything else is an error naming the value."""
    algo, _, value = digest.partition(":")
    if algo != "sha256" or len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise SupplyError(f"{digest!r} is not a sha256:<64 hex> digest")
    return value


def record_dir(store: Path, image_id: str) -> Path:
    return store / hex_of(image_id)


def envelope_path(store: Path, image_id: str, subject_digest: str) -> Path:
    return record_dir(store, image_id) / PROVENANCE / f"{hex_of(subject_digest)}.dsse.json"
