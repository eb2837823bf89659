"""Which image a boot-verify report is about, and the registry digest that names it.

A rollout pulls `REPO@sha256:D`, where D is the registry manifest digest. docker knows it for an image
that was pushed or pulled (`RepoDigests`); a local image ID (`.Id`) is another hash and never matches.
So the report records both, and promotion compares manifest digests only.

With `--container NAME` the image is read from docker (on `--docker-host` when given): the container's
`.Image` id, then that image's `RepoDigests`. An operator reference given with it must name the same
image. Without a container the report's digest comes from the reference itself (`REPO@sha256:D`) or
from this host's `docker image inspect` of a tag. `registry_digest` (what `vfleet promote` records and
`promote --check` looks up) asks the registry instead, as the supply-chain gate does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

from vfleet.errors import VfleetError
from vfleet.imageref import parse as parse_ref
from vfleet.supply.identity import no_registry_message, registry_manifest_digest
from vfleet.supply.store import SupplyError

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")

#: Where the digest came from: read from the running container, taken from the operator's
#: REPO@sha256:D, or a tag resolved by this host's docker (no container).
SOURCE_CONTAINER = "container"
SOURCE_FROM_REF = "reference"
SOURCE_TAG = "tag"


@dataclass
class ImageRecord:
    """report.json `image`."""

    ref: str | None
    id: str | None = None
    digest: str | None = None
    repo_digests: list[str] = field(default_factory=list)
    source: str | None = None
    reason: str | None = None  # why digest is None, or how it was chosen
    container: str | None = None
    docker_host: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def familiar(repo: str) -> str:
    """docker's short form of a Docker Hub repository: docker.io/library/x -> x."""
    for prefix in ("docker.io/", "index.docker.io/"):
        repo = repo.removeprefix(prefix)
    return repo.removeprefix("library/")


def docker_env(docker_host: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    return env


def _where(docker_host: str | None) -> str:
    return f"DOCKER_HOST={docker_host}" if docker_host else "the local docker"


def _docker_inspect(kind: str, name: str, docker_host: str | None) -> tuple[dict[str, Any] | None, str]:
    if shutil.which("docker") is None:
        return None, "docker is not installed here"
    try:
        proc = subprocess.run(
            ["docker", kind, "inspect", name],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=docker_env(docker_host),
        )
    except subprocess.TimeoutExpired:
        return None, f"`docker {kind} inspect {name}` ({_where(docker_host)}) did not answer within 120 s"
    if proc.returncode != 0:
        return None, f"`docker {kind} inspect {name}` ({_where(docker_host)}) failed: {proc.stderr.strip()[:300]}"
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        return None, f"`docker {kind} inspect {name}` printed no JSON"
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        return None, f"`docker {kind} inspect {name}` found nothing"
    return data[0], ""


def inspect_image(ref: str, docker_host: str | None = None) -> tuple[dict[str, Any] | None, str]:
    """`docker image inspect REF` as a dict, or (None, why)."""
    return _docker_inspect("image", ref, docker_host)


def repo_digests(info: dict[str, Any]) -> list[str]:
    return sorted(str(r) for r in info.get("RepoDigests") or [])


def _digest_of(entry: str) -> str:
    return entry.rpartition("@")[2]


def digests_for_repo(digests: list[str], repo: str) -> list[str]:
    """The distinct manifest digests of ``repo`` among `RepoDigests` entries."""
    want = familiar(repo)
    return sorted({_digest_of(e) for e in digests if familiar(e.rpartition("@")[0]) == want})


def choose_digest(digests: list[str], ref: str | None) -> tuple[str | None, str]:
    """The manifest digest that names an image: the one of ``ref``'s repository, else the only one."""
    if not digests:
        return None, (
            "the image has no RepoDigests: it was built where it runs and never pushed to or pulled from a "
            "registry, so no registry digest names it; push it and run the node from REPO@sha256:DIGEST"
        )
    if ref is not None:
        parsed = parse_ref(ref)
        repo, pinned = parsed.repo, parsed.digest
        if pinned and pinned in {_digest_of(e) for e in digests}:
            return pinned, f"{ref} names it"
        mine = digests_for_repo(digests, repo)
        if len(mine) == 1:
            return mine[0], f"RepoDigests entry of {familiar(repo)}"
    distinct = sorted({_digest_of(e) for e in digests})
    if len(distinct) == 1:
        return distinct[0], "the only digest in RepoDigests"
    return (
        None,
        f"RepoDigests name {len(distinct)} different digests ({', '.join(digests)}); pass --image REPO@sha256:D",
    )


def inspect_container(container: str, docker_host: str | None) -> dict[str, Any]:
    """`docker container inspect NAME` (on ``docker_host``); VfleetError when it cannot be read."""
    info, why = _docker_inspect("container", container, docker_host)
    if info is None:
        raise VfleetError(f"--container {container}: {why}; name the serving container (docker ps) and its host")
    return info


def from_container(
    container: str, docker_host: str | None, operator_ref: str | None, info: dict[str, Any] | None = None
) -> ImageRecord:
    """The image container NAME runs, read from docker (``info``: its `docker container inspect`, read
    here when not given). VfleetError when it cannot be read or when ``operator_ref`` names another image."""
    if info is None:
        info = inspect_container(container, docker_host)
    image_id = str(info.get("Image") or "")
    started_as = str((info.get("Config") or {}).get("Image") or "") or None
    img, why = inspect_image(image_id, docker_host)
    if img is None:
        raise VfleetError(f"--container {container} runs image {image_id}, but {why}")
    digests = repo_digests(img)
    all_digests = {_digest_of(e) for e in digests}
    if operator_ref:
        pinned = parse_ref(operator_ref).digest
        if pinned:
            if pinned not in all_digests:
                seen = ", ".join(digests) if digests else "none: never pushed or pulled"
                raise VfleetError(
                    f"--image {operator_ref} is not what container {container} runs ({_where(docker_host)}): "
                    f"it runs image {image_id} (started as {started_as}) whose registry digests are {seen}"
                )
        else:
            other, why = inspect_image(operator_ref, docker_host)
            if other is None:
                raise VfleetError(
                    f"--image {operator_ref}: cannot resolve it where container {container} runs ({why}); pass "
                    f"REPO@sha256:DIGEST, or the tag that host knows"
                )
            if other.get("Id") != image_id:
                raise VfleetError(
                    f"--image {operator_ref} is not what container {container} runs ({_where(docker_host)}): "
                    f"{operator_ref} is image {other.get('Id')}, the container runs image {image_id} "
                    f"(started as {started_as})"
                )
    ref = operator_ref or started_as
    digest, reason = choose_digest(digests, ref)
    return ImageRecord(
        ref=ref,
        id=image_id,
        digest=digest,
        repo_digests=digests,
        source=SOURCE_CONTAINER,
        reason=f"read from container {container}: {reason}",
        container=container,
        docker_host=docker_host,
    )


def from_reference(ref: str, docker_host: str | None = None) -> ImageRecord:
    """The image an operator names, without a container: REPO@sha256:D as given, else a tag resolved
    by docker. Never an error: an unresolvable reference is recorded with digest None and the reason."""
    pinned = parse_ref(ref).digest
    if pinned:
        if not DIGEST_RE.match(pinned):
            raise VfleetError(f"--image {ref}: {pinned!r} is not a sha256:<64 hex> digest")
        return ImageRecord(ref=ref, digest=pinned, source=SOURCE_FROM_REF, reason=f"taken from the reference {ref}")
    info, why = inspect_image(ref, docker_host)
    if info is None:
        return ImageRecord(ref=ref, source=SOURCE_TAG, reason=f"{why}; pass REPO@sha256:DIGEST or --container NAME")
    digests = repo_digests(info)
    mine = digests_for_repo(digests, parse_ref(ref).repo)
    if len(mine) == 1:
        digest, reason = mine[0], f"RepoDigests entry of {familiar(parse_ref(ref).repo)} ({_where(docker_host)})"
    elif not mine:
        digest, reason = (
            None,
            (
                f"{ref} (image {info.get('Id')}) has no RepoDigests entry for {familiar(parse_ref(ref).repo)}: it was "
                "never pushed to or pulled from that repository; push it and pass REPO@sha256:DIGEST"
            ),
        )
    else:
        digest, reason = None, f"{ref} has {len(mine)} digests ({', '.join(mine)}); pass REPO@sha256:DIGEST"
    return ImageRecord(
        ref=ref, id=str(info.get("Id")), digest=digest, repo_digests=digests, source=SOURCE_TAG, reason=reason
    )


def registry_digest(ref: str) -> str:
    """The registry manifest digest an operator reference names (for `vfleet promote`): D of
    REGISTRY/REPO@sha256:D, or the digest REF's registry serves for a tag (asked of the registry, with
    docker's login for it: vfleet.supply.registry), the same answer the supply-chain gate and a rollout's
    plan get. Not this host's RepoDigests: they say what the tag was when this host last pulled it.
    A reference with no registry part, or a registry that does not answer, is a VfleetError."""
    if DIGEST_RE.match(ref):
        raise VfleetError(
            f"{ref}: a bare sha256 is ambiguous (a local image ID is not a registry digest); promote REPO@sha256:DIGEST"
        )
    try:
        parsed = parse_ref(ref)
        host, pinned = parsed.host, parsed.digest
        if not host:
            raise SupplyError(no_registry_message(ref))
        if pinned:
            if not DIGEST_RE.match(pinned):
                raise SupplyError(f"{pinned!r} is not a sha256:<64 hex> digest")
            return pinned  # a digest names itself: the registry is not asked again
        return registry_manifest_digest(ref)
    except SupplyError as exc:
        raise VfleetError(f"cannot find the registry digest of {ref}: {exc}") from exc
