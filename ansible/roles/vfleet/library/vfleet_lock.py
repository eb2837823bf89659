#!/usr/bin/python
# Copyright: the vfleet authors. Apache-2.0.
"""The fleet rollout lock: one JSON file on a host that no run swaps (the plan's lock host: the balancer,
a vfleet_lock host or vfleet_lock_host), so that it excludes every controller, not only the one that
took it.

It is created with O_CREAT|O_EXCL, so two controllers racing for it cannot both win. A lock is never
taken over silently: the holder may run on another controller, where this host cannot tell whether
it is alive (lock.yml says, from the controller, whether a holder of that controller still runs; this
module runs on the lock host, which cannot see a controller's processes). A run that ended without
releasing it (killed, or a controller that lost the fleet) leaves it held; `force` (vfleet fleet
rollout --break-lock) takes it over and returns the holder.
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
    description: Identifier of this run (one ansible-playbook invocation).
    type: str
  holder:
    description: What to record about this run (controller, user, playbook, since).
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
    holder: {controller: ctl-a, user: ops, playbook: rollout}
"""

RETURN = r"""
holder:
  description: The holder after the call (absent when the lock is free).
  returned: always
  type: dict
broken:
  description: The holder that was taken over with force.
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


def _describe(h):
    if h.get("unreadable"):
        return f"an unreadable lock ({h['unreadable']})"
    return (
        f"{h.get('playbook', '?')} run {h.get('run_id', '?')} of {h.get('user', '?')} on controller "
        f"{h.get('controller', '?')} (pid {h.get('pid', '?')}), since {h.get('since', '?')}"
    )


def _create(path, record):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "absent", "query"], "default": "present"},
            "run_id": {"type": "str"},
            "holder": {"type": "dict", "default": {}},
            "force": {"type": "bool", "default": False},
        },
        required_if=[("state", "present", ["run_id"]), ("state", "absent", ["run_id"])],
    )
    p = module.params
    path = p["path"]
    current = _read(path)
    if p["state"] == "query":
        module.exit_json(changed=False, holder=current)
    if p["state"] == "absent":
        if current is None:
            module.exit_json(changed=False, holder=None, msg="the lock was not held")
        if current.get("run_id") != p["run_id"]:
            module.exit_json(
                changed=False, holder=current, msg=f"held by another run, left alone: {_describe(current)}"
            )
        os.unlink(path)
        module.exit_json(changed=True, holder=None, msg="released")
    record = dict(p["holder"], run_id=p["run_id"])
    os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
    if current is not None and current.get("run_id") == p["run_id"]:
        module.exit_json(changed=False, holder=current)
    if current is None:
        try:
            _create(path, record)
            module.exit_json(changed=True, holder=record)
        except FileExistsError:
            current = _read(path) or {"run_id": "?"}
    if not p["force"]:
        module.fail_json(
            msg=(
                f"fleet lock {path} on this host is held by {_describe(current)}: a second rollout or rollback "
                "of the fleet is refused. If that run is still going, wait for it. If it is gone (killed, or its "
                "controller lost the fleet), take the lock over with `vfleet fleet rollout|rollback --break-lock` "
                "(-e vfleet_lock_break=true)"
            ),
            holder=current,
        )
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)
    module.exit_json(changed=True, holder=record, broken=current, msg=f"took the lock over from {_describe(current)}")


if __name__ == "__main__":
    main()
