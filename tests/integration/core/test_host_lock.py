"""Two processes that take the same host lock take turns (vfleet.host.host_lock): the e2e lanes once
ran `apt-get install debootstrap` at the same moment on a fresh machine and the second failed on dpkg's
lock; the base, the image wheels and the stand-in are built under such a lock too. A different name
does not wait. This process holds a lock; a child process tries one and writes a file once it has it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from vfleet import host

CHILD = """
import sys
from pathlib import Path
from vfleet import host
host.LOCK_DIR = Path(sys.argv[1])
with host.host_lock(sys.argv[2]):
    Path(sys.argv[3]).write_text("in")
"""


@pytest.fixture(autouse=True)
def _locks_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "LOCK_DIR", tmp_path)


def _child(tmp_path: Path, name: str) -> tuple[subprocess.Popen[bytes], Path]:
    marker = tmp_path / f"child-{name}"
    return subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), name, str(marker)]), marker


def test_the_same_lock_is_held_by_one_process_at_a_time(tmp_path: Path) -> None:
    with host.host_lock("apt"):
        child, marker = _child(tmp_path, "apt")
        time.sleep(2)  # long enough for the child to start and reach the lock; it must still wait
        assert child.poll() is None and not marker.exists(), "the child took a lock this process holds"
    assert child.wait(timeout=60) == 0 and marker.read_text() == "in", "the child never got the lock"


def test_other_locks_do_not_wait(tmp_path: Path) -> None:
    with host.host_lock("base"):
        child, marker = _child(tmp_path, "standin")
        assert child.wait(timeout=60) == 0 and marker.read_text() == "in", "another lock's name waited"
