"""Running promtool (`vfleet alerts` checks and unit-tests the rules with it), installing Debian's
prometheus package when it is missing and this is root. Part of vfleet.monitoring.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from vfleet.errors import VfleetError


class PromtoolError(VfleetError):
    """promtool is missing and cannot be installed here."""


def _install_prometheus() -> None:
    if os.geteuid() != 0:
        raise PromtoolError("promtool is not installed and this is not root: run `apt-get install -y prometheus`")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "prometheus"],
    ):
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise PromtoolError(f"`{' '.join(argv)}` failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")


def ensure_promtool() -> str:
    """The promtool binary; Debian's `prometheus` package is installed with apt-get when it is missing
    and this is root (as vfleet.dockerd installs docker.io). Installing starts no service here."""
    found = shutil.which("promtool")
    if found is None:
        _install_prometheus()
        found = shutil.which("promtool")
    if found is None:
        raise PromtoolError("the prometheus package is installed but promtool is not on PATH")
    return found


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `promtool ARGS` (output captured, never raises on its exit status)."""
    return subprocess.run([ensure_promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
