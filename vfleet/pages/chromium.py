"""Debian's chromium for the page tests: installed with apt-get when it is missing and this is root
(as vfleet.dockerd installs docker.io and vfleet.monitoring installs prometheus)."""

from __future__ import annotations

from vfleet.host import ensure_binary

PACKAGE = "chromium"


def ensure_chromium() -> str:
    """The path of Debian's chromium binary, installing the package first when it is missing."""
    return ensure_binary("chromium", [PACKAGE], no_recommends=True)
