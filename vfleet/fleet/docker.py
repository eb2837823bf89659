"""A thin, typed wrapper over the `docker` CLI of the controller's daemon."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from vfleet.errors import VfleetError


def docker_bin() -> str:
    exe = shutil.which("docker")
    if exe is None:
        raise VfleetError("no `docker` client on PATH: install docker.io (apt-get install -y docker.io)")
    return exe


def docker(
    *args: str, check: bool = True, input: bytes | None = None, timeout: float = 600, stderr: bool = False
) -> str:
    """Run `docker ARGS`; return stdout (and stderr after it, with STDERR: `docker logs` of a
    container that logs there). A failure raises VfleetError with docker's own message."""
    proc = subprocess.run([docker_bin(), *args], input=input, capture_output=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise VfleetError(f"docker {' '.join(args[:3])} failed: {err[-1] if err else proc.returncode}")
    out = proc.stdout + (proc.stderr if stderr else b"")
    return out.decode(errors="replace")


def daemon_ok() -> bool:
    try:
        return (
            subprocess.run(
                [docker_bin(), "info", "--format", "{{.ServerVersion}}"],
                capture_output=True,
                timeout=20,
                check=False,
            ).returncode
            == 0
        )
    except (VfleetError, subprocess.TimeoutExpired):
        return False


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
