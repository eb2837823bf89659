"""What the boot-verify suite runs against: the server, its profile, its log, and the figures."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from vfleet.profiles import Profile
from vfleet.verify.client import Client
from vfleet.verify.metrics import Metrics


def docker_where() -> str:
    """Which docker daemon the suite's docker calls reach (`vfleet verify --docker-host` sets DOCKER_HOST
    for the run, vfleet.verify.suite)."""
    host = os.environ.get("DOCKER_HOST")
    return f"DOCKER_HOST={host}" if host else "the local docker"


@dataclass
class Target:
    url: str
    profile: Profile
    client: Client
    log_file: Path | None
    container: str | None
    figures: dict[str, Any] = field(default_factory=dict)
    start_metrics: Metrics | None = None

    def log_text(self) -> str | None:
        """The server log as it is now (the log grows during the run)."""
        if self.log_file is not None:
            return self.log_file.read_text(errors="replace")
        if self.container is not None:
            proc = subprocess.run(
                ["docker", "logs", self.container], capture_output=True, text=True, timeout=60, check=False
            )
            if proc.returncode != 0:
                pytest.fail(
                    f"expected `docker logs {self.container}` ({docker_where()}) to work; "
                    f"saw: {proc.stderr.strip()[:300]}"
                )
            return proc.stdout + proc.stderr
        return None
