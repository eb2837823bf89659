#!/usr/bin/python
# Copyright: the vfleet authors. Apache-2.0.
"""The fleet rollout lock: one JSON file on a host that no run swaps (the plan's lock host: the balancer,
a vfleet_lock host or vfleet_lock_host), so that it excludes every controller, not only the one that
took it.

It is created with O_CREAT|O_EXCL, so two controllers racing for it cannot both win. A lock belongs to
the controller process that took it (the claim: controller host, pid and the pid's start time, which
lock.yml reads on the controller with the vfleet_controller lookup: `vfleet fleet`, or the plain
ansible-playbook run). Its run id alone is no key: the run takes the lock again, or releases it, only
with the same run id AND the same live process. A lock is never taken over silently: the holder may run
on another controller, where this host cannot tell whether it is alive (lock.yml says, from the
controller, whether a holder of that controller still runs). A run that ended without releasing it
(killed, or a controller that lost the fleet) leaves it held; `force` (vfleet fleet rollout --break-lock)
takes it over and returns the holder. Nothing this module returns or prints holds the run id.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: vfleet_lock
short_description: Take, release or read the vfleet fleet lock
options:
  path:
    description: Lock file on the lock host.
    type: path
    required: true
  state:
    description: present takes the lock for run_id, absent releases it if run_id holds it, query reads it.
    type: str
    choices: [present, absent, query]
    default: present
  run_id:
    description: Identifier of this run (made by vfleet fleet, or by the plan of a plain ansible-playbook run).
    type: str
  claim:
    description: >-
      This run's controller process (controller, pid, pid_start, process), from the vfleet_controller lookup;
      recorded with the lock, and matched, with the run id, to take it again or release it.
    type: dict
  holder:
    description: What else to record about this run (user, playbook, since).
    type: dict
    default: {}
  verdict:
    description: >-
      Whether the holder lock.yml read before is alive (controller, pid, text), said in a refusal when that
      holder still holds the lock.
    type: dict
    default: {}
  force:
    description: Take the lock over from another holder (it is returned as C(broken)).
    type: bool
    default: false
author: vfleet
"""

EXAMPLES = r"""
- name: Take the fleet lock
  vfleet_lock:
    path: /var/lib/vfleet/fleet-lock.json
    run_id: 20261201T101500Z-4711
    claim: {controller: ctl-a, pid: "4711", pid_start: "81234", process: vfleet fleet}
    holder: {user: ops, playbook: rollout}
"""

RETURN = r"""
holder:
  description: The holder after the call, without its run id (absent when the lock is free).
  returned: always
  type: dict
broken:
  description: The holder that was taken over with force, without its run id.
  returned: when force took over a lock
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule


def _read(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {"run_id": "?", "unreadable": str(exc)}


def _public(h):
    """A lock record as it may be shown: without the run id."""
    return None if h is None else {k: v for k, v in h.items() if k != "run_id"}


def _describe(h):
    if h.get("unreadable"):
        return f"an unreadable lock ({h['unreadable']})"
    return (
        f"{h.get('playbook', '?')} of {h.get('user', '?')} on controller {h.get('controller', '?')} "
        f"(pid {h.get('pid') or '?'}), since {h.get('since', '?')}"
    )


def _same_run(current, run_id, claim):
    """Whether CURRENT was taken by this run: the same run id from the same live controller process."""
    return bool(
        run_id
        and current.get("run_id") == run_id
        and str(claim.get("pid") or "")
        and all(str(current.get(k) or "") == str(claim.get(k) or "") for k in ("controller", "pid", "pid_start"))
    )


def _create(path, record):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)


def _release(module, path, current, run_id, claim):
    if current is None:
        module.exit_json(changed=False, holder=None, msg="the lock was not held")
    if not _same_run(current, run_id, claim):
        module.exit_json(
            changed=False,
            holder=_public(current),
            msg=f"held by {_describe(current)}, left alone: a lock is released only by the controller process of "
            "the run that took it (--break-lock takes over the lock of a run that is gone)",
        )
    os.unlink(path)
    module.exit_json(changed=True, holder=None, msg="released")


def _refusal(path, current, verdict):
    said = ""
    if verdict.get("text") and all(
        str(verdict.get(k) or "") == str(current.get(k) or "") for k in ("controller", "pid")
    ):
        said = f" {verdict['text']}"
    return (
        f"fleet lock {path} on this host is held by {_describe(current)}: a second rollout or rollback of the "
        f"fleet is refused (a verify too).{said} If that run is still going, wait for it; take it over with "
        "`vfleet fleet rollout|rollback|verify --break-lock` only when that run is gone (killed, or its "
        "controller lost the fleet)"
    )


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "absent", "query"], "default": "present"},
            "run_id": {"type": "str"},
            "claim": {"type": "dict", "default": {}},
            "holder": {"type": "dict", "default": {}},
            "verdict": {"type": "dict", "default": {}},
            "force": {"type": "bool", "default": False},
        },
        required_if=[("state", "present", ["run_id", "claim"]), ("state", "absent", ["run_id", "claim"])],
    )
    p = module.params
    path, run_id, claim = p["path"], p["run_id"], p["claim"] or {}
    current = _read(path)
    if p["state"] == "query":
        module.exit_json(changed=False, holder=_public(current))
    if not (str(claim.get("pid") or "").isdigit() and claim.get("controller") and claim.get("pid_start")):
        module.fail_json(
            msg=f"no controller process to hold the lock for: claim {claim!r} (the vfleet_controller lookup)"
        )
    if p["state"] == "absent":
        _release(module, path, current, run_id, claim)
    record = dict(p["holder"], **claim, run_id=run_id)
    os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
    if current is not None and _same_run(current, run_id, claim):
        module.exit_json(changed=False, holder=_public(current), msg="this run holds the lock already")
    if current is None:
        try:
            _create(path, record)
            module.exit_json(changed=True, holder=_public(record))
        except FileExistsError:
            current = _read(path) or {"run_id": "?"}
    if not p["force"]:
        module.fail_json(msg=_refusal(path, current, p["verdict"] or {}), holder=_public(current))
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)
    module.exit_json(
        changed=True,
        holder=_public(record),
        broken=_public(current),
        msg=f"took the lock over from {_describe(current)}",
    )


if __name__ == "__main__":
    main()
