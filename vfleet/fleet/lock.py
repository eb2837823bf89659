"""The fleet rollout lock: one rollout (or rollback) per fleet at a time.

The lock is a JSON file created atomically on the controller. It records the process that holds
it: the `ansible-playbook` process that runs the playbook (found by walking up from the caller),
so a rollout that died, failed or was killed leaves a *stale* lock that the next run takes over,
while a live one is refused. A read-modify-write of the lock happens under an flock on a guard file.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from vfleet.errors import VfleetError


class LockHeld(VfleetError):
    """Another rollout holds the fleet lock."""

    exit_code = 3


@dataclass
class Holder:
    pid: int
    start_ticks: int
    host: str
    user: str
    run_id: str
    playbook: str
    since: float


def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(ppid, start time in clock ticks) of a live process, None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[19])


def _cmdline(pid: int) -> list[str]:
    try:
        return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def owner_process(start: int | None = None) -> int:
    """The pid that owns this run: the topmost `ansible-playbook` ancestor (its task workers are
    forks with the same command line, and short-lived), else our parent."""
    pid = start or os.getpid()
    found = 0
    seen = 0
    while pid > 1 and seen < 64:
        if any(os.path.basename(a) == "ansible-playbook" for a in _cmdline(pid)[:2]):
            found = pid
        stat = _proc_stat(pid)
        if stat is None:
            break
        pid = stat[0]
        seen += 1
    return found or os.getppid()


def _alive(holder: Holder) -> bool:
    stat = _proc_stat(holder.pid)
    return stat is not None and stat[1] == holder.start_ticks and holder.host == socket.gethostname()


@contextmanager
def _guard(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".guard", "a+") as g:
        fcntl.flock(g, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(g, fcntl.LOCK_UN)


def read(path: Path) -> Holder | None:
    try:
        return Holder(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise VfleetError(f"{path}: unreadable fleet lock ({exc}); remove it if no rollout is running") from exc


def acquire(path: Path, run_id: str, playbook: str, pid: int | None = None) -> tuple[Holder, Holder | None]:
    """Take the lock for the owning process. Returns (us, the stale holder we replaced or None)."""
    owner = pid or owner_process()
    stat = _proc_stat(owner)
    if stat is None:
        raise VfleetError(f"process {owner} is gone; cannot take the fleet lock for it")
    me = Holder(
        pid=owner,
        start_ticks=stat[1],
        host=socket.gethostname(),
        user=os.environ.get("USER", str(os.getuid())),
        run_id=run_id,
        playbook=playbook,
        since=time.time(),
    )
    with _guard(path):
        current = read(path)
        if current is not None and _alive(current):
            if current.pid == me.pid and current.start_ticks == me.start_ticks:
                return current, None
            started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(current.since))
            raise LockHeld(
                f"fleet lock {path} is held by a running {current.playbook} (run {current.run_id}, "
                f"pid {current.pid} on {current.host}, user {current.user}, since {started}); "
                "wait for it to finish - a second rollout on the same fleet is refused"
            )
        tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(me)))
        os.replace(tmp, path)
        return me, current


def release(path: Path, pid: int | None = None) -> bool:
    """Drop the lock if the owning process holds it. True if it was ours and is now gone."""
    owner = pid or owner_process()
    with _guard(path):
        current = read(path)
        if current is None or current.pid != owner:
            return False
        path.unlink()
        return True
