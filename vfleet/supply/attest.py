"""What `vfleet image build` runs after a build (SBOM, vulnerability report, the unsigned Statement,
and the signature when a key is given), and `vfleet image sign REF --key PRIV`.

A fresh build is a local image: its Statement names it by its image ID. Pushing it to a registry gives
it a manifest digest, which is what a node pulls and what the rollout checks, so the pushed reference is
signed again (`vfleet image sign HOST/REPO@sha256:D`, or `python -m lab fleet push/stage --sign-key`): the same
Statement, SBOM and materials, with the manifest digest as subject. The record is found by the image ID,
which the registry manifest carries as its config digest.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from vfleet.digests import sha256_file as file_sha256
from vfleet.images.build import BuildResult
from vfleet.supply import provenance as prov
from vfleet.supply.audit import audit_packages
from vfleet.supply.identity import Identity, resolve
from vfleet.supply.sbom import make_sbom, python_packages
from vfleet.supply.statements import load_private_key, sign
from vfleet.supply.store import SBOM, STATEMENT, VULNS, SupplyError, envelope_path, record_dir


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def byproduct(name: str, path: Path, media_type: str) -> dict[str, Any]:
    return {"name": name, "uri": path.name, "digest": {"sha256": file_sha256(path)}, "mediaType": media_type}


def attest_build(
    ref: str,
    family: str,
    context: Path,
    base: str,
    wheels: Path | None,
    store: Path,
    labels: dict[str, str],
    *,
    sign_key: Path | None = None,
    audit: bool = True,
) -> Path:
    """Write REF's record (SBOM, vulns, Statement; the signed Statement with SIGN_KEY) and return its directory.

    The record is made in a scratch directory beside the store and moved into place whole: a failed step
    leaves the previous record (or none), never a half-written one."""
    signer = load_private_key(sign_key) if sign_key else None  # a bad key fails before the slow steps
    ident = resolve(ref)
    final = record_dir(store, ident.image_id)
    store.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=store))
    try:
        mats = prov.materials(context, family, base, wheels, labels.get("VLLM_VERSION"))
        t0 = time.monotonic()
        bom = make_sbom(ref)
        (work / SBOM).write_text(json.dumps(bom, indent=1) + "\n")
        t1 = time.monotonic()
        if audit:
            vulns = audit_packages(python_packages(bom))
        else:
            vulns = {"tool": "pip-audit", "status": "unknown: not run (the build was asked not to audit)"}
        (work / VULNS).write_text(json.dumps(vulns, indent=1) + "\n")
        print(
            f"vfleet image: SBOM of {ref} in {t1 - t0:.0f} s ({len(bom['components'])} components); "
            f"vulnerabilities ({time.monotonic() - t1:.0f} s): {vulns['status']}",
            file=sys.stderr,
        )
        products = [
            byproduct("sbom", work / SBOM, "application/vnd.cyclonedx+json"),
            byproduct("vulnerabilities", work / VULNS, "application/json"),
        ]
        subject = prov.subject_of(ident.name, ident.digest, ident.image_id, ident.kind)
        _write_json(work / STATEMENT, prov.statement(subject, family, mats, products, labels))
        if final.exists():
            shutil.rmtree(final)
        os.replace(work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if signer is not None:
        sign_identity(ident, signer, store)
    return final


def attest_result(res: BuildResult, store: Path, *, sign_key: Path | None = None, audit: bool = True) -> Path:
    """The record of a build that just ran (`vfleet image build` calls it after the build): attest_build of
    what the build says went into it."""
    return attest_build(
        res.ref, res.family, res.context, res.base, res.wheels, store, res.labels, sign_key=sign_key, audit=audit
    )


def sign_image(ref: str, key: Path, store: Path) -> Path:
    """Sign the build record of REF with KEY, the subject being REF's digest; return the envelope's path."""
    signer = load_private_key(key)
    return sign_identity(resolve(ref), signer, store)


def sign_identity(ident: Identity, signer: Any, store: Path) -> Path:
    rec = record_dir(store, ident.image_id)
    path = rec / STATEMENT
    if not path.is_file():
        raise SupplyError(
            f"no build record for {ident.ref} (image {ident.image_id}) in {store}: only an image that "
            "`vfleet image build` recorded can be signed; build it, or pass the store it was built with (--store). "
            "An image built another way (a `docker build` layer on a built one) has no provenance to sign: "
            "VFLEET_SIGN_KEY (without --sign-key / SIGN_KEY=) signs its boot-verify summary only, which promotion "
            "needs, and only a test fleet rolls it out unsigned: --allow-unsigned (ALLOW_UNSIGNED=1) with the "
            "summary's key trusted, --trusted-key verify=PUB.pem (TRUSTED_KEY=verify=PUB.pem) (docs/supply-chain.md)"
        )
    stmt = json.loads(path.read_text())
    for item in stmt["predicate"]["runDetails"]["byproducts"]:
        f = rec / item["uri"]
        if not f.is_file() or file_sha256(f) != item["digest"]["sha256"]:
            raise SupplyError(f"{f} is missing or changed since the build recorded it; not signing (rebuild)")
    stmt["subject"] = [prov.subject_of(ident.name, ident.digest, ident.image_id, ident.kind)]
    out = envelope_path(store, ident.image_id, ident.digest)
    _write_json(out, sign(stmt, signer))
    return out
