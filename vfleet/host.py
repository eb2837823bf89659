"""What vfleet asks of the machine it runs on: a lock that one vfleet process holds at a time (two test
lanes, or an operator's two terminals, build the same base or install the same package), and a Debian
package it lacks, installed with apt-get when this is root (docker.io, debootstrap, prometheus,
chromium).

Both exist because two callers met on a fresh machine: the e2e lanes each ran `apt-get install
debootstrap` at once, and the second failed on dpkg's lock ("Could not get lock /var/lib/dpkg/
lock-frontend"). apt's own lock refuses a second apt-get instead of waiting; the host lock makes vfleet's
callers take turns, and `DPkg::Lock::Timeout` makes apt-get wait for any other apt (an unattended upgrade).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from vfleet.errors import VfleetError

LOCK_DIR = Path("/tmp")
#: How long apt-get waits for another apt's lock before it gives up (seconds).
APT_LOCK_TIMEOUT_S = 600


@contextmanager
def host_lock(name: str) -> Iterator[None]:
    """Hold /tmp/vfleet-NAME.lock (an flock: released when the process ends, however it ends)."""
    path = LOCK_DIR / f"vfleet-{name}.lock"
    path.touch(exist_ok=True)
    with path.open() as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def apt_install(
    packages: Sequence[str],
    error: type[VfleetError] = VfleetError,
    no_recommends: bool = False,
    done: Callable[[], bool] | None = None,
) -> None:
    """apt-get update and install PACKAGES (root only), one vfleet process at a time; skipped when DONE
    says, once this process holds the lock, that another one installed them meanwhile. Raises ERROR
    with apt-get's words, or naming the command to run when this is not root."""
    if os.geteuid() != 0:
        names = " ".join(packages)
        raise error(f"{names} is not installed and this is not root: run `apt-get install -y {names}`")
    with host_lock("apt"):
        if done is not None and done():
            return
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        apt = ["apt-get", "-o", f"DPkg::Lock::Timeout={APT_LOCK_TIMEOUT_S}"]
        extra = ["--no-install-recommends"] if no_recommends else []
        for argv in ([*apt, "update", "-q"], [*apt, "install", "-y", "-q", *extra, *packages]):
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
            if proc.returncode != 0:
                raise error(f"`{' '.join(argv)}` failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")


def ensure_binary(
    binary: str, packages: Sequence[str], error: type[VfleetError] = VfleetError, no_recommends: bool = False
) -> str:
    """The path of BINARY, installing PACKAGES with `apt_install` first when it is missing."""
    found = shutil.which(binary)
    if found is None:
        apt_install(packages, error, no_recommends, done=lambda: shutil.which(binary) is not None)
        found = shutil.which(binary)
    if found is None:
        raise error(f"{' '.join(packages)} is installed, but {binary} is not on PATH")
    return found
