"""The fleet's docker calls on the controller's daemon: output as text, and lookups by label."""

from __future__ import annotations

import json
from typing import Any

from vfleet.dockerd import docker as _run
from vfleet.dockerd import docker_bin

__all__ = ["docker", "docker_bin", "ids_by_label", "image_exists", "inspect"]


def docker(*args: str, check: bool = True, timeout: float = 600, stderr: bool = False) -> str:
    """`docker ARGS` through vfleet.dockerd's one wrapper; returns stdout (and stderr after it, with
    STDERR: `docker logs` of a container that logs there). A failure raises DockerError (a
    VfleetError) with docker's own message."""
    proc = _run(*args, check=check, timeout=timeout)
    return proc.stdout + (proc.stderr if stderr else "")


def image_exists(ref: str) -> bool:
    return bool(docker("image", "ls", "--quiet", ref).strip())


def inspect(kind: str, name: str) -> dict[str, Any] | None:
    out = docker(kind, "inspect", "--format", "{{json .}}", name, check=False)
    if not out.strip():
        return None
    data: dict[str, Any] = json.loads(out)
    return data


def ids_by_label(kind: str, label: str) -> list[str]:
    """Containers (`ps -a`) or volumes/networks/images carrying LABEL (key=value)."""
    if kind == "container":
        out = docker("ps", "--all", "--quiet", "--filter", f"label={label}")
    elif kind == "image":
        out = docker("image", "ls", "--quiet", "--filter", f"label={label}")
    else:
        out = docker(kind, "ls", "--quiet", "--filter", f"label={label}")
    return sorted(set(out.split()))
