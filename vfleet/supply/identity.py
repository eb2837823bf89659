"""Which digest names an image reference, asked of whoever holds it.

* ``HOST/REPO:TAG`` or ``HOST/REPO@sha256:D`` (the first part has a dot, a colon or is localhost): the
  registry's manifest digest (Docker-Content-Digest), and the image ID is the manifest's config digest.
  Nothing is guessed: when the registry does not answer, the reference cannot be tied to a digest.
* ``REPO:TAG`` with no registry part: an image that lives on this daemon only. It has no manifest digest;
  it is named by its image ID (``docker image inspect .Id``, the sha256 of its config), which is also the
  config digest of any manifest it is later pushed as.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import httpx

from vfleet.dockerd import DockerError, docker
from vfleet.imageref import parse as parse_ref
from vfleet.supply.registry import HUB_NAMES, INSECURE_HOW, Session, insecure, is_tls_error, tls_failure
from vfleet.supply.store import SupplyError, hex_of

MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
)
LIST_TYPES = (
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)
KIND_MANIFEST = "registry-manifest"
KIND_IMAGE_ID = "docker-image-id"


@dataclass(frozen=True)
class Identity:
    ref: str
    image_id: str  # sha256:HEX of the image config
    name: str  # the subject name: REGISTRY/REPO, or the local REPO:TAG
    digest: str  # the subject digest: the manifest digest, or the image ID for a local-only image
    kind: str  # KIND_MANIFEST or KIND_IMAGE_ID


def split_ref(ref: str) -> tuple[str, str, str, str]:
    """(registry host or "", repository path, tag or "latest" or "", digest or "") of a reference
    (vfleet.imageref.parse); a reference that names no repository is refused."""
    r = parse_ref(ref)
    if not r.path:
        raise SupplyError(f"{ref!r} is not an image reference (REPO[:TAG] or HOST/REPO[:TAG|@sha256:D])")
    return r.host, r.path, r.tag_or_latest, r.digest or ""


def _registry_get(host: str, path: str, reference: str) -> tuple[str, dict[str, Any]]:
    """(Docker-Content-Digest, manifest) of HOST/PATH at `reference` (tag or digest), over https with the
    certificate verified, with docker's login for HOST when the registry asks for one (vfleet.supply.registry).
    Only a registry declared insecure is asked over https unverified and then plain http, as docker does."""
    headers = {"Accept": ", ".join(MANIFEST_TYPES + LIST_TYPES)}
    if host in HUB_NAMES and "/" not in path:
        path = f"library/{path}"  # Docker Hub's official images: docker.io/x is docker.io/library/x
    declared = insecure(host)
    errors = []
    for scheme in ("https", "http") if declared else ("https",):
        session = Session(host, scheme, verify=not declared)
        url = f"{session.base}/v2/{path}/manifests/{reference}"
        try:
            resp = session.get(f"/v2/{path}/manifests/{reference}", headers)
        except httpx.HTTPError as exc:
            if not declared and is_tls_error(exc):
                raise tls_failure(host, url, exc) from exc
            errors.append(f"{url}: {exc}")
            continue
        if resp.status_code == 404:
            raise SupplyError(f"registry {host} has no manifest {path}:{reference} (404)")
        if resp.status_code != 200:
            raise SupplyError(f"registry {host} answered {resp.status_code} for {url}")
        manifest: dict[str, Any] = resp.json()
        media = manifest.get("mediaType") or resp.headers.get("content-type", "")
        if media in LIST_TYPES:
            raise SupplyError(
                f"{host}/{path}:{reference} is a multi-platform index; name one platform's manifest (REPO@sha256:D)"
            )
        digest = resp.headers.get("docker-content-digest") or "sha256:" + hashlib.sha256(resp.content).hexdigest()
        return digest, manifest
    how = f"declared insecure ({declared}): asked over https, then http" if declared else f"https only; {INSECURE_HOW}"
    raise SupplyError(f"cannot ask registry {host} for the digest of {path}:{reference} ({how}): " + "; ".join(errors))


def registry_manifest_digest(ref: str) -> str:
    """The manifest digest REF's registry serves for it (a tag resolved, a digest confirmed): what a
    rollout, promotion and the supply-chain gate all name the image by. A reference without a registry
    part is an error naming the fix: a fleet pulls from a registry, so there must be one to ask."""
    host, path, tag, digest = split_ref(ref)
    if not host:
        raise SupplyError(no_registry_message(ref))
    got, _ = _registry_get(host, path, digest or tag)
    if digest and got != digest:
        raise SupplyError(f"registry {host} serves {got} for {ref}, not the digest the reference names")
    return got


def no_registry_message(ref: str) -> str:
    return (
        f"{ref} names no registry (its first part is not a host: it has no dot, no port and is not localhost), "
        "so no registry can be asked for its digest and no node could pull it by digest; push the image and name "
        "it as REGISTRY/REPO@sha256:DIGEST (or REGISTRY/REPO:TAG; Docker Hub is docker.io/REPO)"
    )


def resolve(ref: str) -> Identity:
    """The identity of REF, asked of its registry (registry references) or of this daemon (local ones)."""
    host, path, tag, digest = split_ref(ref)
    if host:
        got, manifest = _registry_get(host, path, digest or tag)
        if digest and got != digest:
            raise SupplyError(f"registry {host} serves {got} for {ref}, not the digest the reference names")
        config = str((manifest.get("config") or {}).get("digest", ""))
        hex_of(config)
        return Identity(ref, config, f"{host}/{path}", got, KIND_MANIFEST)
    if digest:
        raise SupplyError(no_registry_message(ref))
    try:
        out = docker("image", "inspect", "--format", "{{json .Id}}", ref).stdout
    except DockerError as exc:
        raise SupplyError(f"{ref}: no such image on this Docker daemon ({exc})") from exc
    image_id = str(json.loads(out))
    hex_of(image_id)
    return Identity(ref, image_id, ref, image_id, KIND_IMAGE_ID)
