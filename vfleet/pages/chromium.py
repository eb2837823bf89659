"""Debian's chromium for the page tests: installed with apt-get when it is missing and this is root
(as vfleet.dockerd installs docker.io and vfleet.monitoring installs prometheus)."""

from __future__ import annotations

import os
import shutil
import subprocess

from vfleet.errors import VfleetError

PACKAGE = "chromium"


def _install() -> None:
    if os.geteuid() != 0:
        raise VfleetError(f"chromium is not installed and this is not root: run `apt-get install -y {PACKAGE}`")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (
        ["apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-q"],
        ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q", "--no-install-recommends", PACKAGE],
    ):
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise VfleetError(f"`{' '.join(argv)}` failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")


def ensure_chromium() -> str:
    """The path of Debian's chromium binary, installing the package first when it is missing."""
    found = shutil.which("chromium")
    if found is None:
        _install()
        found = shutil.which("chromium")
    if found is None:
        raise VfleetError(f"the {PACKAGE} package is installed but `chromium` is not on PATH")
    return found
