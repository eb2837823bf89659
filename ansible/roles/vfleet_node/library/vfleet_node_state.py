#!/usr/bin/python
# Copyright: the vfleet authors. Apache-2.0.
"""Read a serving node's state in one round trip, or write its deployment record atomically.

A rollout asks every node the same three questions before it decides anything: which container
serves (docker inspect), what the deployment record says, and whether /health answers. One module
call instead of three tasks keeps the controller's cost per node down.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: vfleet_node_state
short_description: Read the serving container, the deployment record and /health; or write the record
options:
  action:
    description: read, or record (write O(record) to O(state_dir)/deployed.json, atomically).
    type: str
    choices: [read, record]
    default: read
  container:
    description: Name of the serving container.
    type: str
    default: vfleet-serve
  state_dir:
    description: Directory of the deployment record.
    type: path
    default: /var/lib/vfleet
  port:
    description: Host port of the serving container (for /health on 127.0.0.1).
    type: int
    default: 8000
  record:
    description: The record to write (action record); updated_at is added.
    type: dict
author: vfleet
"""

EXAMPLES = r"""
- name: Read the node state
  vfleet_node_state:
    container: vfleet-serve
"""

RETURN = r"""
container:
  description: docker inspect of the serving container, {} when there is none.
  returned: read
  type: dict
record:
  description: The deployment record, {} when there is none.
  returned: always
  type: dict
healthy:
  description: Whether the container exists and GET 127.0.0.1:PORT/health answered 200.
  returned: read
  type: bool
"""

import datetime
import json
import os
import subprocess
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule


def _record_path(p):
    return os.path.join(p["state_dir"], "deployed.json")


def _read_record(path):
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        return {"unreadable": str(exc)}


def read(module, p):
    proc = subprocess.run(
        ["docker", "container", "inspect", p["container"]], capture_output=True, text=True, timeout=60, check=False
    )
    container = json.loads(proc.stdout)[0] if proc.returncode == 0 and proc.stdout.strip() else {}
    if proc.returncode != 0 and "No such" not in proc.stderr:
        module.fail_json(msg=f"docker container inspect {p['container']} failed: {proc.stderr.strip()[:300]}")
    healthy = False
    if container:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{p['port']}/health", timeout=5) as resp:
                healthy = resp.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            healthy = False
    module.exit_json(changed=False, container=container, record=_read_record(_record_path(p)), healthy=healthy)


def record(module, p):
    path = _record_path(p)
    data = dict(p["record"] or {})
    data["updated_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    os.makedirs(p["state_dir"], exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    module.exit_json(changed=True, record=data)


def main():
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "choices": ["read", "record"], "default": "read"},
            "container": {"type": "str", "default": "vfleet-serve"},
            "state_dir": {"type": "path", "default": "/var/lib/vfleet"},
            "port": {"type": "int", "default": 8000},
            "record": {"type": "dict"},
        },
        required_if=[("action", "record", ["record"])],
    )
    p = module.params
    (read if p["action"] == "read" else record)(module, p)


if __name__ == "__main__":
    main()
