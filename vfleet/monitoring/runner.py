"""Running promtool (`vfleet alerts` checks and unit-tests the rules with it), installing Debian's
prometheus package when it is missing and this is root. Part of vfleet.monitoring.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from vfleet.errors import VfleetError
from vfleet.host import ensure_binary


class PromtoolError(VfleetError):
    """promtool is missing and cannot be installed here."""


def ensure_promtool() -> str:
    """The promtool binary; Debian's `prometheus` package is installed with apt-get when it is missing
    and this is root (as vfleet.dockerd installs docker.io). Installing starts no service here."""
    return ensure_binary("promtool", ["prometheus"], PromtoolError, no_recommends=True)


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `promtool ARGS` (output captured, never raises on its exit status)."""
    return subprocess.run([ensure_promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
