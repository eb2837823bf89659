"""Provenance of an image build: its materials and the in-toto Statement (SLSA provenance v1 predicate).
It is signed and opened as every statement is, by role (vfleet.supply.statements, role provenance).

Materials (SLSA v1 calls them resolvedDependencies), each a name, a URI and a sha256:
  base-image       the FROM image: its pinned registry digest, or the local image ID when built here
  wheel:FILE       every wheel in the wheel cache the CPU image installs from (.cache/image-wheels)
  requirements     requirements/cpu.txt, the pins the CPU image installs
  versions.json    the pin file baked into the image
  patch-series     the series digest of the patches applied for the family (= the image manifest's)
  patches          the tree digest of patches/ (= the label org.vfleet.patches.digest)
  profiles         the tree digest of serve_configs/ (= the label org.vfleet.profiles.digest)
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from vfleet.digests import sha256_file as file_sha256
from vfleet.digests import tree_digest
from vfleet.dockerd import DockerError, docker
from vfleet.patchset.series import load_series, select, series_sha256
from vfleet.supply.statements import PROVENANCE, STATEMENT_TYPE
from vfleet.supply.store import SupplyError, hex_of

PREDICATE_TYPE = PROVENANCE.predicate_type
BUILD_TYPE = "https://github.com/vfleet/vfleet/image-build/v1"


# -- materials ------------------------------------------------------------------------------------


def _sha(d: str) -> dict[str, str]:
    return {"sha256": hex_of(d) if d.startswith("sha256:") else d}


def base_material(base: str) -> dict[str, Any]:
    """The FROM image: REPO@sha256:D names its manifest digest; otherwise this daemon's image ID."""
    if "@sha256:" in base:
        return {
            "name": "base-image",
            "uri": f"docker-image://{base.split('@', 1)[0]}",
            "digest": _sha(base.split("@", 1)[1]),
        }
    try:
        image_id = str(json.loads(docker("image", "inspect", "--format", "{{json .Id}}", base).stdout))
    except DockerError as exc:
        raise SupplyError(f"base image {base} is not on this daemon, so its digest cannot be recorded") from exc
    return {
        "name": "base-image",
        "uri": f"docker-image://{base}",
        "digest": _sha(image_id),
        "annotations": {"digestKind": "docker-image-id"},
    }


def materials(
    context: Path, family: str, base: str, wheels: Path | None, vllm_base: str | None = None
) -> list[dict[str, Any]]:
    """The materials of a build of FAMILY from CONTEXT on BASE (wheels: the directory the CPU image installs
    from; None for the GPU families, whose vLLM comes in the base)."""
    out = [base_material(base)]
    if wheels is not None:
        files = sorted(wheels.glob("*.whl"))
        if not files:
            raise SupplyError(f"{wheels} holds no wheels: `vfleet image wheels` first")
        out += [{"name": f"wheel:{w.name}", "uri": f"wheel:{w.name}", "digest": _sha(file_sha256(w))} for w in files]
        req = context / "requirements" / "cpu.txt"
        out.append({"name": "requirements", "uri": "requirements/cpu.txt", "digest": _sha(file_sha256(req))})
    out.append(
        {"name": "versions.json", "uri": "versions.json", "digest": _sha(file_sha256(context / "versions.json"))}
    )
    out.append(
        {
            "name": "patch-series",
            "uri": f"patches/series#{family}",
            "digest": _sha(patch_series_digest(context, family, vllm_base)),
        }
    )
    out.append({"name": "patches", "uri": "patches/", "digest": _sha(tree_digest([context / "patches"], context))})
    out.append(
        {"name": "profiles", "uri": "serve_configs/", "digest": _sha(tree_digest([context / "serve_configs"], context))}
    )
    return out


def patch_series_digest(context: Path, family: str, base: str | None = None) -> str:
    """series_sha256 of the patches BASE's series (default: the default base's, patches/series) applies
    for FAMILY: what the image's manifest records."""
    return series_sha256(select(load_series(context / "patches", base), family))


# -- the statement --------------------------------------------------------------------------------


def statement(
    subject: dict[str, Any],
    family: str,
    mats: list[dict[str, Any]],
    byproducts: list[dict[str, Any]],
    labels: dict[str, str],
) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": [subject],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"family": family, "dockerfile": f"images/Dockerfile.{family}"},
                "internalParameters": {"labels": labels},
                "resolvedDependencies": mats,
            },
            "runDetails": {
                "builder": {"id": "vfleet image build"},
                "metadata": {"startedOn": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")},
                "byproducts": byproducts,
            },
        },
    }


def subject_of(name: str, digest: str, image_id: str, kind: str) -> dict[str, Any]:
    return {"name": name, "digest": _sha(digest), "annotations": {"imageId": image_id, "digestKind": kind}}
