"""A Docker daemon for builds and tests: use the running one, or install and start one.

CI is a clean machine: `docker.io` may be missing (only a client may be on PATH), and nothing starts
dockerd. `ensure_dockerd()` makes one available on the default socket, installing `docker.io` with
apt-get when it is root and `dockerd` is absent. A file lock keeps two callers from starting two
daemons. The daemon is left running for later callers; it belongs to no test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from vfleet.errors import VfleetError
from vfleet.host import apt_install, host_lock
from vfleet.waiting import wait_until

LOG = Path("/tmp/vfleet-dockerd.log")
SOCKET = Path("/var/run/docker.sock")
# The Debian client (20.10) builds with BuildKit itself; newer clients need the buildx plugin for it.
DEBIAN_CLIENT = Path("/usr/bin/docker")


class DockerError(VfleetError):
    """Docker is missing, not running, or a docker command failed."""


def docker_bin() -> str:
    """The client that builds with BuildKit: Debian's 20.10 client if present, else `docker` on PATH."""
    if DEBIAN_CLIENT.exists():
        return str(DEBIAN_CLIENT)
    found = shutil.which("docker")
    if found is None:
        raise DockerError("no docker client: install docker.io (apt-get install -y docker.io)")
    return found


def daemon_up() -> bool:
    client = shutil.which("docker") or (str(DEBIAN_CLIENT) if DEBIAN_CLIENT.exists() else None)
    if client is None:
        return False
    try:
        proc = subprocess.run(
            [client, "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and bool(proc.stdout.strip())


def _docker_io_installed() -> bool:
    return shutil.which("dockerd") is not None and DEBIAN_CLIENT.exists()


def ensure_dockerd(timeout: float = 90.0) -> str:
    """Make sure a Docker daemon answers on the default socket; returns how it was found."""
    if daemon_up() and buildkit_client_ok():
        return "running"
    with host_lock("dockerd"):
        if daemon_up() and buildkit_client_ok():
            return "running"
        if not _docker_io_installed():
            apt_install(["docker.io"], DockerError, done=_docker_io_installed)
        if daemon_up():
            return "running"
        _wait_for_a_stopping_daemon(max(timeout, 180.0))
        with LOG.open("ab") as log:
            subprocess.Popen(
                ["dockerd", "--host", f"unix://{SOCKET}"],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        wait_until(daemon_up, timeout, 1.0, f"dockerd to answer on {SOCKET}", state=_log_tail, error=DockerError)
        return "started"


PID_FILE = Path("/var/run/docker.pid")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stopping_pid() -> int | None:
    """The pid of a dockerd that no longer answers but has not exited yet (it stops its containers
    first, and keeps its pid file until then): a new dockerd would refuse to start beside it."""
    try:
        pid = int(PID_FILE.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _pid_alive(pid) else None


def _wait_for_a_stopping_daemon(timeout: float) -> None:
    if _stopping_pid() is None:
        return
    wait_until(
        lambda: _stopping_pid() is None,
        timeout,
        1.0,
        f"the dockerd of {PID_FILE} that no longer answers to exit before a new one starts",
        state=lambda: f"pid {_stopping_pid()} still runs; stop it (kill PID) if it does not exit",
        error=DockerError,
    )


def _log_tail() -> str:
    tail = LOG.read_text(errors="replace")[-1500:] if LOG.exists() else ""
    return f"its log ({LOG}) ends with:\n{tail}"


def buildkit_client_ok() -> bool:
    return DEBIAN_CLIENT.exists() or shutil.which("docker-buildx") is not None


def docker(
    *args: str,
    check: bool = True,
    capture: bool = True,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run one docker command; on failure raise DockerError with the command and its stderr."""
    argv = [docker_bin(), *args]
    proc = subprocess.run(argv, capture_output=capture, text=True, env=env, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        err = (proc.stderr or "").strip()[-2000:] if capture else "(see output above)"
        raise DockerError(f"`docker {' '.join(args[:3])} ...` failed ({proc.returncode}): {err}")
    return proc
