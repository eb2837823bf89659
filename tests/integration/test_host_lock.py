"""Two processes that take the same host lock take turns (vfleet.host.host_lock): the e2e lanes once
ran `apt-get install debootstrap` at the same moment on a fresh machine and the second failed on dpkg's
lock; the base, the image wheels and the stand-in are built under such a lock too. A different name
does not wait."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

CHILD = """
import sys, time
from pathlib import Path
from vfleet import host
host.LOCK_DIR = Path(sys.argv[1])
with host.host_lock(sys.argv[2]):
    start = time.monotonic()
    time.sleep(1.5)
    print(start, time.monotonic())
"""


def _two(tmp_path: Path, a: str, b: str) -> list[tuple[float, float]]:
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), name], stdout=subprocess.PIPE, text=True)
        for name in (a, b)
    ]
    spans = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0
        s, e = (float(x) for x in out.split())
        spans.append((s, e))
    return sorted(spans)


def test_the_same_lock_is_held_by_one_process_at_a_time(tmp_path: Path) -> None:
    (_, e1), (s2, _) = _two(tmp_path, "apt", "apt")
    assert s2 >= e1, "the second process entered while the first held the lock"


def test_other_locks_do_not_wait(tmp_path: Path) -> None:
    t0 = time.monotonic()
    (_, e1), (s2, _) = _two(tmp_path, "base", "standin")
    assert s2 < e1, "two different locks were taken in turn"
    assert time.monotonic() - t0 < 30
