#!/usr/bin/python
# Copyright: the vfleet authors. Apache-2.0.
"""Read and drive a vfleet HAProxy backend over the runtime API socket.

It reads the servers of a backend, and takes a node out of the pool and back in, each in ONE module
run (a rollout's controller cost per node is its number of task round trips): drain = DRAIN, then the
combined drain condition of vfleet (no open session to the server in HAProxy and no running or
waiting request in vLLM, held for a settle window, within a bound), then MAINT; ready = READY, then
wait until the health checks report UP. Runs on the balancer host (or on the controller for a
balancer of the operator's own, with socket unset: then drain only waits on vLLM's gauges).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: vfleet_haproxy
short_description: Read a vfleet HAProxy backend and wait for a server to drain or come up
description:
  - C(check) verifies that the runtime API socket answers and that every server in O(servers) is in O(backend).
  - C(drain) sets O(server) to DRAIN, waits until HAProxy shows no open session to it and vLLM's
    C(vllm:num_requests_running) plus C(vllm:num_requests_waiting) at O(metrics_url) are 0, for
    O(settle) seconds in a row, at most O(timeout) seconds, then sets it to MAINT and waits until
    HAProxy reports MAINT. Without O(socket) it only waits (the operator's balancer drained it).
  - C(hold) sets O(server) to MAINT and waits until HAProxy reports it.
  - C(ready) sets O(server) to READY and waits until HAProxy reports it fully C(UP) (health checks passed).
options:
  action:
    description: What to do.
    type: str
    required: true
    choices: [check, drain, hold, ready]
  socket:
    description: HAProxy runtime API socket (level admin). Unset for drain without a balancer of ours.
    type: path
  backend:
    description: HAProxy backend of the fleet.
    type: str
    default: vfleet
  server:
    description: Server name (the inventory host name) for drain, hold and ready.
    type: str
  servers:
    description: Server names that must exist, for check.
    type: list
    elements: str
    default: []
  metrics_url:
    description: The node's vLLM /metrics URL, for drain.
    type: str
  settle:
    description:
      - Seconds the idle condition must hold, for drain. No default of the module's own; the role passes
        vfleet_lb_settle_s, whose default is written once, in the role's defaults/main.yml.
    type: float
  timeout:
    description: Bound in seconds.
    type: float
    default: 300
  interval:
    description: Seconds between polls.
    type: float
    default: 0.5
  dead_after:
    description: Seconds of failed /metrics reads after which the node counts as dead (drain).
    type: float
    default: 10
author: vfleet
"""

EXAMPLES = r"""
- name: Wait until node1 is idle
  vfleet_haproxy:
    action: drain
    socket: /run/haproxy/admin.sock
    server: node1
    metrics_url: http://10.0.0.11:8000/metrics
    settle: "{{ vfleet_lb_settle_s }}"
"""

RETURN = r"""
servers:
  description: server name -> status and current sessions, as HAProxy reported them last.
  returned: always
  type: dict
seconds:
  description: Seconds waited (for drain, from DRAIN to idle).
  returned: drain, ready
  type: float
started:
  description: Epoch seconds at which the node left the pool (DRAIN or MAINT was set).
  returned: drain, hold
  type: float
last:
  description: The last observation (sessions, running, waiting, status).
  returned: drain
  type: dict
"""

import csv
import os
import re
import socket
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule

GAUGE_RE = re.compile(r"^vllm:num_requests_(running|waiting)(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)


class LbError(Exception):
    pass


def runtime(sock_path, command, timeout=5.0):
    """Send one command to the runtime API; return its answer."""
    if not os.path.exists(sock_path):
        raise LbError(
            f"HAProxy runtime socket {sock_path} does not exist: is HAProxy running with "
            f"`stats socket {sock_path} level admin`? (vfleet_lb_socket; run lb.yml to set the balancer up)"
        )
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(timeout)
    try:
        client.connect(sock_path)
        client.sendall(command.encode() + b"\n")
        chunks = []
        while True:
            data = client.recv(65536)
            if not data:
                break
            chunks.append(data)
    except OSError as exc:
        raise LbError(f"HAProxy runtime socket {sock_path}: {exc} (permissions, or HAProxy not running)") from exc
    finally:
        client.close()
    return b"".join(chunks).decode(errors="replace")


def servers_of(sock_path, backend):
    """server name -> {status, scur} for BACKEND; LbError if the backend does not exist."""
    text = runtime(sock_path, "show stat").lstrip("# ")
    rows = [r for r in csv.DictReader(text.splitlines()) if r.get("pxname") == backend]
    if not rows:
        raise LbError(f"HAProxy has no backend {backend!r} (vfleet_lb_backend); run lb.yml to write the configuration")
    return {
        r["svname"]: {"status": r["status"], "scur": int(r["scur"] or 0)}
        for r in rows
        if r["svname"] not in ("FRONTEND", "BACKEND")
    }


def vllm_load(url, timeout=5.0):
    """(running, waiting) summed over label sets; None for a gauge vLLM did not export."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        text = resp.read().decode(errors="replace")
    found = {"running": None, "waiting": None}
    for kind, value in GAUGE_RE.findall(text):
        found[kind] = (found[kind] or 0.0) + float(value)
    return found["running"], found["waiting"]


def check(module, p):
    servers = servers_of(p["socket"], p["backend"])
    missing = [s for s in p["servers"] if s not in servers]
    if missing:
        raise LbError(
            f"HAProxy backend {p['backend']!r} has no server {', '.join(missing)} (it has: "
            f"{', '.join(sorted(servers)) or 'none'}); add the node to the inventory group of the balancer "
            "and run lb.yml, or fix the host name"
        )
    module.exit_json(changed=False, servers=servers)


def set_state(p, state):
    """set server BACKEND/SERVER state STATE; LbError naming the server when HAProxy refuses."""
    servers = servers_of(p["socket"], p["backend"])
    if p["server"] not in servers:
        raise LbError(
            f"HAProxy backend {p['backend']!r} has no server {p['server']} "
            f"(it has: {', '.join(sorted(servers)) or 'none'}); "
            "add the node to the inventory group of the balancer and run lb.yml, or fix the host name"
        )
    answer = runtime(p["socket"], f"set server {p['backend']}/{p['server']} state {state}").strip()
    if answer:
        raise LbError(f"HAProxy refused `set server {p['backend']}/{p['server']} state {state}`: {answer}")


def wait_maint(p, timeout=10.0):
    t0 = time.monotonic()
    status = "?"
    while time.monotonic() - t0 < timeout:
        status = servers_of(p["socket"], p["backend"])[p["server"]]["status"]
        if status.startswith("MAINT"):
            return
        time.sleep(0.2)
    raise LbError(f"{p['server']}: HAProxy did not report MAINT within {timeout:.0f} s (status {status})")


def drain(module, p):
    started = time.time()
    if p["socket"]:
        set_state(p, "drain")
    result = wait_idle(module, p)
    if p["socket"]:
        set_state(p, "maint")
        wait_maint(p)
    module.exit_json(changed=True, started=started, **result)


def hold(module, p):
    started = time.time()
    set_state(p, "maint")
    wait_maint(p)
    module.exit_json(changed=True, started=started)


def ready(module, p):
    set_state(p, "ready")
    wait_up(module, p)


def wait_idle(module, p):
    """Wait for the drain condition; return the result when it holds, fail the module when it cannot."""
    t0 = time.monotonic()
    deadline = t0 + p["timeout"]
    idle_since = None
    failing_since = None
    last = {}
    servers = {}
    while True:
        now = time.monotonic()
        sessions = 0
        if p["socket"]:
            servers = servers_of(p["socket"], p["backend"])
            if p["server"] not in servers:
                raise LbError(f"HAProxy backend {p['backend']!r} has no server {p['server']!r}")
            sessions = servers[p["server"]]["scur"]
            last["status"] = servers[p["server"]]["status"]
        last["sessions"] = sessions
        try:
            running, waiting = vllm_load(p["metrics_url"])
            failing_since = None
            last.update(running=running, waiting=waiting, metrics_error=None)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            failing_since = failing_since or now
            running = waiting = None
            last.update(running=None, waiting=None, metrics_error=str(exc))
            if now - failing_since >= p["dead_after"]:
                module.fail_json(
                    msg=(
                        f"{p['server']}: the node stopped answering during the drain ({p['metrics_url']}: {exc} for "
                        f"{now - failing_since:.0f} s; balancer status {last.get('status', 'n/a')}, "
                        f"{sessions} open sessions); it is out of the pool for new requests"
                    ),
                    servers=servers,
                    last=last,
                    seconds=round(now - t0, 2),
                )
        if running is None and waiting is None and last.get("metrics_error") is None:
            module.fail_json(
                msg=f"{p['server']}: {p['metrics_url']} exports no vllm:num_requests_running/waiting gauge; "
                "cannot tell whether requests are in flight",
                last=last,
            )
        idle = sessions == 0 and (running or 0) == 0 and (waiting or 0) == 0 and last["metrics_error"] is None
        if idle:
            idle_since = idle_since if idle_since is not None else now
            if now - idle_since >= p["settle"]:
                return {"servers": servers, "last": last, "seconds": round(now - t0, 2)}
        else:
            idle_since = None
        if now >= deadline:
            module.fail_json(
                msg=(
                    f"{p['server']}: drain did not reach zero within {p['timeout']:.0f} s (last seen: balancer "
                    f"sessions {sessions}, vLLM running {running}, waiting {waiting}); the node was not stopped"
                ),
                servers=servers,
                last=last,
                seconds=round(now - t0, 2),
            )
        time.sleep(p["interval"])


def wait_up(module, p):
    t0 = time.monotonic()
    status = "?"
    servers = {}
    while time.monotonic() - t0 < p["timeout"]:
        servers = servers_of(p["socket"], p["backend"])
        if p["server"] not in servers:
            raise LbError(f"HAProxy backend {p['backend']!r} has no server {p['server']!r}")
        status = servers[p["server"]]["status"]
        if status == "UP":
            module.exit_json(changed=True, servers=servers, seconds=round(time.monotonic() - t0, 2))
        time.sleep(p["interval"])
    module.fail_json(
        msg=f"{p['server']}: HAProxy did not report it UP within {p['timeout']:.0f} s (status {status}); "
        "its health check fails from the balancer",
        servers=servers,
    )


def main():
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "required": True, "choices": ["check", "drain", "hold", "ready"]},
            "socket": {"type": "path"},
            "backend": {"type": "str", "default": "vfleet"},
            "server": {"type": "str"},
            "servers": {"type": "list", "elements": "str", "default": []},
            "metrics_url": {"type": "str"},
            "settle": {"type": "float"},
            "timeout": {"type": "float", "default": 300},
            "interval": {"type": "float", "default": 0.5},
            "dead_after": {"type": "float", "default": 10},
        },
        required_if=[
            ("action", "check", ["socket"]),
            ("action", "drain", ["server", "metrics_url", "settle"]),
            ("action", "hold", ["socket", "server"]),
            ("action", "ready", ["socket", "server"]),
        ],
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode and p["action"] in ("drain", "hold", "ready"):
        module.exit_json(changed=True, msg=f"check mode: {p['server']} would be set to {p['action']}")
    try:
        actions = {"check": check, "drain": drain, "hold": hold, "ready": ready}
        actions[p["action"]](module, p)
    except LbError as exc:
        module.fail_json(msg=str(exc))


if __name__ == "__main__":
    main()
