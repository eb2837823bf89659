"""A newcomer's first fleet command on a machine where dockerd is not running (issue 23): `make
fleet-up` starts the daemon itself, as `make image` does, the test fleet comes up, and `make fleet-down`
removes it by its label. The daemon is stopped here first (the e2e tier has started one by now), so the
test walks a dockerd-less start whatever ran before it; it starts no container of its own outside the
fleet, and every later test finds a daemon again through ensure_dockerd."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from conftest import REPO

from lab.docker import ids_by_label
from lab.testfleet import LABEL
from vfleet.dockerd import PID_FILE, daemon_up, ensure_dockerd

pytestmark = [pytest.mark.slow, pytest.mark.long]  # the whole file: make test-long (tests/README.md, Long tests)


def _stop_dockerd(timeout: float = 120) -> None:
    """SIGTERM the dockerd that serves this machine's socket (the one of its pid file, /var/run/docker.pid,
    which ensure_dockerd started where none ran) and wait until the socket no longer answers. Any other
    dockerd on the host (a test fleet node's, inside its container) is left alone."""
    pid = int(PID_FILE.read_text().strip())
    os.kill(pid, signal.SIGTERM)  # ProcessLookupError: the pid file is stale, and the socket's daemon is another
    deadline = time.monotonic() + timeout
    while daemon_up():
        assert time.monotonic() < deadline, f"dockerd (pid {pid}) still answers {timeout:.0f} s after SIGTERM"
        time.sleep(1)


def test_make_fleet_up_on_a_machine_without_a_running_dockerd_starts_it() -> None:
    ensure_dockerd()  # whatever ran before, there is a daemon to stop: the stop below is this test's doing
    _stop_dockerd()
    assert not daemon_up()
    name = f"newcomer{os.getpid()}"
    try:
        proc = subprocess.run(
            ["make", "fleet-up", f"FLEET={name}", "NODES=1"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "Cannot connect to the Docker daemon" not in proc.stdout + proc.stderr
        assert daemon_up(), "make fleet-up returned, but no daemon answers"
        assert ids_by_label("container", f"{LABEL}={name}"), f"fleet {name} has no container: {proc.stdout[-2000:]}"
    finally:
        down = subprocess.run(
            ["make", "fleet-down", f"FLEET={name}"], cwd=REPO, capture_output=True, text=True, timeout=600, check=False
        )
    assert down.returncode == 0, down.stdout[-2000:] + down.stderr[-2000:]
    assert not ids_by_label("container", f"{LABEL}={name}"), "make fleet-down left containers of the fleet"
