# Copyright: the vfleet authors. Apache-2.0.
"""The controller process of this run, as the fleet lock records and checks it (docs/fleet.md, "The fleet
lock"), and whether a lock's holder is alive.

A lock belongs to the process that started the run, not to whoever knows its run id. `vfleet fleet`
names itself in VFLEET_CONTROLLER_PID; the name counts only when that pid is an ancestor of the play
that reads it (so a plain ansible-playbook run cannot borrow the pid of another run's `vfleet fleet`).
Without it, the run's process is its ansible-playbook. The process is recorded with its start time,
so a pid the system has given to another process since is not mistaken for the holder.

    lookup('vfleet_controller')                        {controller, pid, pid_start, process}
    lookup('vfleet_controller', 'verdict', holder=H)   whether holder H (a lock record) is alive, a sentence
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: vfleet_controller
short_description: This run's controller process, and whether a fleet lock holder is alive
description:
  - Without terms, this run's controller process as the fleet lock records it, a dict with controller
    (host name), pid, pid_start and process (C(vfleet fleet) or C(ansible-playbook)).
  - With the term C(verdict) and the option holder (a lock record), a sentence on whether that holder
    is alive, as far as this controller can tell.
options:
  holder:
    description: A fleet lock record (controller, pid, pid_start).
    type: dict
author: vfleet
"""

PROC = Path("/proc")


def _ps(pid: int, field: str) -> str | None:
    """One ps field of PID (where there is no /proc); None when PID does not run."""
    proc = subprocess.run(
        ["ps", "-o", f"{field}=", "-p", str(pid)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "LC_ALL": "C"},
    )
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of PID, None when it does not run. Linux: /proc/PID/stat (the start in
    clock ticks after boot); elsewhere ps (the start to the second)."""
    if not PROC.is_dir():
        ppid, start = _ps(pid, "ppid"), _ps(pid, "lstart")
        return (int(ppid), start) if ppid and start else None
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ... starttime (22nd)
    if fields[0] == "Z":  # a zombie: dead, not yet reaped
        return None
    return int(fields[1]), fields[19]


def _argv(pid: int) -> list[str]:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return (_ps(pid, "args") or "").split()


def _comm(pid: int) -> str:
    try:
        return (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return _ps(pid, "comm") or "?"


def _ancestors() -> list[int]:
    """This process and its ancestors, nearest first."""
    chain, pid = [], os.getpid()
    while pid > 1 and pid not in chain:
        chain.append(pid)
        st = _stat(pid)
        if st is None:
            break
        pid = st[0]
    return chain


def _is_ansible_playbook(pid: int) -> bool:
    return any(Path(arg).name == "ansible-playbook" for arg in _argv(pid)[:2])


def controller() -> dict[str, str]:
    """This run's controller process: `vfleet fleet` where VFLEET_CONTROLLER_PID names a live ancestor,
    else the ansible-playbook process (the top of its forked workers)."""
    chain = _ancestors()
    claimed = os.environ.get("VFLEET_CONTROLLER_PID", "")
    if claimed.isdigit() and int(claimed) in chain:
        pid, process = int(claimed), "vfleet fleet"
    else:
        books = [i for i, p in enumerate(chain) if _is_ansible_playbook(p)]
        if not books:
            raise AnsibleError("vfleet_controller: no ansible-playbook process among this play's ancestors")
        top = books[0]
        while top + 1 < len(chain) and _is_ansible_playbook(chain[top + 1]):
            top += 1
        pid, process = chain[top], "ansible-playbook"
    st = _stat(pid)
    if st is None:
        raise AnsibleError(f"vfleet_controller: the controller process {pid} has no start time")
    return {"controller": socket.gethostname(), "pid": str(pid), "pid_start": st[1], "process": process}


def verdict(holder: dict[str, Any]) -> str:
    """Whether HOLDER (a lock record) is alive, as far as this controller can tell, in one sentence."""
    if not holder or holder.get("unreadable"):
        return ""
    here = socket.gethostname()
    where, pid = str(holder.get("controller") or ""), str(holder.get("pid") or "")
    if where != here:
        return (
            f"Whether its holder is alive cannot be told here: it ran on controller {where or '?'}, not on this one "
            f"({here}); look there (ps -p {pid or 'PID'})."
        )
    if not pid.isdigit():
        return "Whether its holder is alive cannot be told: it recorded no pid."
    st = _stat(int(pid))
    if st is not None and st[1] == str(holder.get("pid_start") or st[1]):
        return (
            f"Its holder is alive: pid {pid} ({_comm(int(pid))}) still runs on this controller ({here}); wait for it."
        )
    return (
        f"Its holder is dead: pid {pid} no longer runs on this controller ({here}), so its run ended without "
        "releasing the lock."
    )


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: Any = None, **kwargs: Any) -> list[Any]:
        if not terms:
            return [controller()]
        if list(terms) == ["verdict"]:
            return [verdict(dict(kwargs.get("holder") or {}))]
        raise AnsibleError(f"vfleet_controller: unknown terms {terms!r}; none, or 'verdict' with holder=RECORD")
