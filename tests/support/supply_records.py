"""A supply store holding one image's build record (SBOM, vulnerability report, provenance) signed with a
release key made here: what the supply-chain gate tests and the rollback and fleet tests check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.supply import make_key
from vfleet.images import ROOT
from vfleet.pins import load as load_pins
from vfleet.supply import provenance as prov
from vfleet.supply import statements
from vfleet.supply.attest import byproduct
from vfleet.supply.identity import KIND_MANIFEST, Identity
from vfleet.supply.store import SBOM, STATEMENT, VULNS, envelope_path, record_dir

IMAGE_ID = "sha256:" + "1" * 64
IDENT = Identity(
    "registry.test:5000/vfleet-cuda@sha256:" + "2" * 64,
    IMAGE_ID,
    "registry.test:5000/vfleet-cuda",
    "sha256:" + "2" * 64,
    KIND_MANIFEST,
)


CLEAN = {"dependencies": [{"name": "httpx", "version": "0.28.1", "vulns": []}]}


def signed_record(
    tmp: Path, report: dict[str, Any], vllm_base: str | None = None, ident: Identity = IDENT
) -> tuple[Path, list[Any]]:
    """A store holding IDENT's record with REPORT as its vulnerability report, signed for IDENT's digest
    with the key tmp/release.pem (public: tmp/release.pub); and the trusted keys. VLLM_BASE: the base the
    build labels name (default: the default base), with its base image and series."""
    tmp.mkdir(parents=True, exist_ok=True)
    # One release key per TMP: records signed into one store by several calls are all trusted by its pub.
    priv, pub = tmp / "release.pem", tmp / "release.pub"
    if not priv.is_file():
        priv, pub = make_key(tmp, "release")
    store = tmp / "store"
    rec = record_dir(store, ident.image_id)
    rec.mkdir(parents=True)
    (rec / SBOM).write_text(json.dumps({"bomFormat": "CycloneDX", "components": []}))
    (rec / VULNS).write_text(json.dumps(report, indent=1))
    pinned = load_pins(ROOT / "versions.json")
    vllm_base = vllm_base or pinned.vllm_version
    known = pinned.bases.get(vllm_base)
    image = (known.base_images if known else pinned.base_images)["cuda"].ref
    base = f"{image}@sha256:{'3' * 64}"
    mats = prov.materials(ROOT, "cuda", base, None, vllm_base if known else None)
    products = [byproduct("sbom", rec / SBOM, "application/json"), byproduct("vulnerabilities", rec / VULNS, "x")]
    subject = prov.subject_of(ident.name, ident.digest, ident.image_id, ident.kind)
    stmt = prov.statement(subject, "cuda", mats, products, {"VLLM_VERSION": vllm_base})
    (rec / STATEMENT).write_text(json.dumps(stmt))
    env = envelope_path(store, ident.image_id, ident.digest)
    env.parent.mkdir()
    env.write_text(json.dumps(statements.sign(stmt, statements.load_private_key(priv))))
    return store, statements.trusting(statements.PROVENANCE, [statements.load_public_key(pub)])
