"""Helpers of the supply-chain tests: ed25519 keys made in a tmp directory, and a small stand-in image
(FROM scratch: a vLLM dist-info and the real patch manifest) that verification can run on in seconds
where what is checked does not depend on the CPU image's contents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from support.images import dk
from vfleet.images import ROOT, pinned
from vfleet.patchset.apply import manifest_data
from vfleet.patchset.series import load_series, select

SITE = "usr/lib/python3/dist-packages"


def make_key(where: Path, name: str) -> tuple[Path, Path]:
    """(private PEM, public PEM) of a new ed25519 key; the private file is mode 0600."""
    key = Ed25519PrivateKey.generate()
    priv, pub = where / f"{name}.pem", where / f"{name}.pub"
    priv.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    priv.chmod(0o600)
    pub.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return priv, pub


def build_small_image(ctx: Path, ref: str, variant: str) -> str:
    """A FROM-scratch image holding what vfleet's SBOM step reads: vLLM's dist-info and the patch manifest
    of the checkout's cpu series. VARIANT changes a label, so two variants have different image IDs."""
    version = pinned().vllm_version
    site = ctx / SITE
    (site / f"vllm-{version}.dist-info").mkdir(parents=True)
    (site / f"vllm-{version}.dist-info" / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
    )
    (site / f"vllm-{version}.dist-info" / "RECORD").write_text("")
    (site / "vllm").mkdir()
    manifest = manifest_data(select(load_series(ROOT / "patches"), "cpu"), "cpu", version)
    (site / "vllm" / "vfleet_patch_manifest.json").write_text(json.dumps(manifest))
    (ctx / "Dockerfile").write_text(
        'FROM scratch\nCOPY usr /usr\nCMD ["/none"]\n'
        f"LABEL org.vfleet.managed=true org.vfleet.role=supply-test org.vfleet.test.variant={variant}\n"
    )
    dk("build", "--quiet", "--tag", ref, str(ctx))
    return ref


def write_deploy_record(state: Path, node: str, record: dict[str, Any]) -> Path:
    """NODE's deployed.json in STATE as the controller writes it at deploy time: the record, signed with this
    controller's deploy-record key (vfleet.supply.deployrecord; VFLEET_DEPLOY_KEY, else REPORTS/keys)."""
    from vfleet.supply.deployrecord import RECORD_FILE, sign

    state.mkdir(parents=True, exist_ok=True)
    path = state / RECORD_FILE
    path.write_text(json.dumps(sign(node, record), indent=2))
    return path
