#!/usr/bin/python
# Copyright: the vfleet authors. Apache-2.0.
"""Read a serving node's state in one round trip, write its deployment record atomically, or swap
its serving container and wait for /health.

A rollout asks every node the same three questions before it decides anything: which container
serves (docker inspect), what the deployment record says, and whether /health answers. One module
call instead of three tasks keeps the controller's cost per node down; so does the swap (stop,
remove, run, wait for /health) in one call, whose wait runs on the node, not on the controller.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: vfleet_node_state
short_description: Read the serving container, the deployment record and /health; or write the record
options:
  action:
    description: >-
      read; record (write O(record) to O(state_dir)/deployed.json, atomically); prepare (create
      O(state_dir) and O(dirs), and write O(env) to O(env_file) with mode 0600, for the container's --env-file);
      or start (docker stop with O(stop_timeout), docker rm, docker run O(argv), then poll /health until
      200 within O(timeout), failing at once with the log tail when the container exits).
    type: str
    choices: [read, record, prepare, start]
    default: read
  container:
    description: Name of the serving container (actions read and start; the role's vfleet_node_container_name).
    type: str
  state_dir:
    description: Directory of the deployment record (actions read, record, prepare; the role's vfleet_node_state_dir).
    type: path
  port:
    description: >-
      Host port of the serving container, for /health on 127.0.0.1 (actions read and start; the role's
      vfleet_node_host_port).
    type: int
  record:
    description: >-
      The record to write (action record), as the controller signed it (`vfleet deploy-record sign`: its fields,
      updated_at included, and its signature), written as given; updated_at is added only to a record without one.
    type: dict
  env_file:
    description: The node's env file (action prepare); its directory is made 0700.
    type: path
  env:
    description: KEY -> value lines of the env file (action prepare); empty values are left out.
    type: dict
  timeout:
    description: Seconds to wait for /health (action start; the role's vfleet_node_health_timeout).
    type: float
  interval:
    description: Seconds between polls (action start).
    type: float
    default: 1
  argv:
    description: The full `docker run` command line of the new serving container (action start).
    type: list
    elements: str
  stop_timeout:
    description: Seconds docker stop waits before it kills the old container (action start).
    type: int
    default: 30
  dirs:
    description: More directories to create (action prepare).
    type: list
    elements: path
    default: []
  docker_down_ok:
    description: >-
      Action read: when the node's Docker daemon does not answer, return its error as RV(docker_error)
      instead of failing (the fleet status reads every node, and a node whose daemon is down is a row of
      its own). A swap leaves it false: it must not act on a node it cannot read.
    type: bool
    default: false
author: vfleet
"""

EXAMPLES = r"""
- name: Read the node state
  vfleet_node_state:
    container: "{{ vfleet_node_container_name }}"
    state_dir: "{{ vfleet_node_state_dir }}"
    port: "{{ vfleet_node_host_port }}"
"""

RETURN = r"""
container:
  description: >-
    The serving container's docker inspect, reduced to Id, Name, Image, Created, RestartCount, State and
    Config.Image/Labels (never its environment, which holds the node's secrets); {} when there is none.
  returned: read
  type: dict
record:
  description: The deployment record as the file holds it (its signature included), {} when there is none.
  returned: always
  type: dict
healthy:
  description: Whether the container exists and GET 127.0.0.1:PORT/health answered 200.
  returned: read
  type: bool
docker_error:
  description: Why the node's Docker daemon did not answer (read with O(docker_down_ok) only).
  returned: read, when the daemon did not answer
  type: str
seconds:
  description: Seconds from docker stop to healthy.
  returned: start
  type: float
"""

import datetime
import json
import os
import subprocess
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule

PROFILES_ENV = "VFLEET_PROFILES_DIGEST"
PROFILES_LABEL = "org.vfleet.profiles.digest"


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


#: What `read` returns of `docker container inspect`: the fields the role reads, and nothing else.
#: The whole inspect holds Config.Env, which carries the node's secrets (VLLM_API_KEY, HF_TOKEN from the
#: env file); a registered result is printed at -v, so the module never returns it.
INSPECT_KEEP = {
    "Id": None,
    "Name": None,
    "Image": None,
    "Created": None,
    "RestartCount": None,
    "State": (
        "Status",
        "Running",
        "Paused",
        "Restarting",
        "OOMKilled",
        "Dead",
        "ExitCode",
        "Error",
        "StartedAt",
        "FinishedAt",
    ),
    "Config": ("Image", "Labels"),
}


def summarize(inspect):
    """The allowlisted part of one `docker container inspect` document (INSPECT_KEEP)."""
    out = {}
    for key, fields in INSPECT_KEEP.items():
        if key not in inspect:
            continue
        value = inspect[key]
        if fields is not None:
            value = {f: value[f] for f in fields if isinstance(value, dict) and f in value}
        out[key] = value
    return out


def read(module, p):
    proc = subprocess.run(
        ["docker", "container", "inspect", p["container"]], capture_output=True, text=True, timeout=60, check=False
    )
    container = summarize(json.loads(proc.stdout)[0]) if proc.returncode == 0 and proc.stdout.strip() else {}
    if proc.returncode != 0 and "No such" not in proc.stderr:
        msg = f"docker container inspect {p['container']} failed: {proc.stderr.strip()[:300]}"
        if not p["docker_down_ok"]:
            module.fail_json(msg=msg)
        record = _read_record(_record_path(p))
        module.exit_json(changed=False, container={}, record=record, healthy=False, docker_error=msg)
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
    data.setdefault("updated_at", datetime.datetime.now(datetime.timezone.utc).isoformat())
    os.makedirs(p["state_dir"], exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    module.exit_json(changed=True, record=data)


def _health(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError, ValueError):
        return 0


def wait_health(module, p, t_start):
    """One module run for the whole wait: a poll costs an HTTP request, not an Ansible task."""
    t0 = time.monotonic()
    status = 0
    while time.monotonic() - t0 < p["timeout"]:
        status = _health(p["port"])
        if status == 200:
            module.exit_json(changed=True, seconds=round(time.monotonic() - t_start, 1))
        state = subprocess.run(
            ["docker", "container", "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", p["container"]],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout.split()
        if not state or state[0] in ("exited", "dead"):
            tail = subprocess.run(
                ["docker", "logs", "--tail", "20", p["container"]],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            lines = (tail.stdout + tail.stderr).strip().splitlines()[-8:]
            module.fail_json(
                msg=(
                    f"{p['container']} stopped while starting (state {' '.join(state) or 'gone'}) after "
                    f"{time.monotonic() - t0:.0f} s; its log ended: {' / '.join(lines)[:1500]}"
                )
            )
        time.sleep(p["interval"])
    module.fail_json(
        msg=f"{p['container']}: /health did not answer 200 within {p['timeout']:.0f} s (last status {status or 'none'})"
    )


#: What dockerd answers `docker stop` when the container's main process has exited but is not reaped yet: the
#: kernel ends the rest of the container's processes first, and one that is in uninterruptible sleep (I/O, a large
#: unmap under load) holds it there for a while. Seen once on the 2-core test fleet, under load, in a rollout.
ZOMBIE = "is zombie and can not be killed"
#: How long the swap waits for such a container to finish exiting before it gives up.
ZOMBIE_WAIT_S = 120.0


def _status(name):
    out = subprocess.run(
        ["docker", "inspect", "--format", "{{.State.Status}}", name],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return out.stdout.strip() if out.returncode == 0 else "gone"


def stop(module, name, stop_timeout, wait_s=ZOMBIE_WAIT_S, interval=2.0):
    """docker stop NAME; where dockerd says its main process is a zombie, wait (up to WAIT_S) for the container to
    finish exiting instead of failing the swap on a state that ends by itself."""
    result = subprocess.run(
        ["docker", "stop", "--time", str(stop_timeout), name],
        capture_output=True,
        text=True,
        timeout=stop_timeout + 120,
        check=False,
    )
    if result.returncode == 0 or "No such container" in result.stderr:
        return
    if ZOMBIE not in result.stderr:
        module.fail_json(msg=f"docker stop {name} failed: {result.stderr.strip()[:500]}")
    deadline = time.monotonic() + wait_s
    status = _status(name)
    while status in ("running", "removing") and time.monotonic() < deadline:
        time.sleep(interval)
        status = _status(name)
    if status in ("running", "removing"):
        module.fail_json(
            msg=(
                f"docker stop {name} failed: its main process is a zombie ({result.stderr.strip()[:300]}) and the "
                f"container was still {status} after {wait_s:.0f} s: a process of it does not exit (look at the "
                "node: `ps -eo pid,stat,cmd`, a D state)"
            )
        )


def start(module, p):
    """Replace the serving container with one started from ARGV, then wait for /health."""
    t0 = time.monotonic()
    name = p["container"]
    stop(module, name, p["stop_timeout"])
    rm = subprocess.run(["docker", "rm", "--force", name], capture_output=True, text=True, timeout=120, check=False)
    if rm.returncode != 0 and "No such container" not in rm.stderr:
        module.fail_json(msg=f"docker rm {name} failed: {rm.stderr.strip()[:500]}")
    run = subprocess.run(_pin_profiles(p["argv"]), capture_output=True, text=True, timeout=600, check=False)
    if run.returncode != 0:
        if "port is already allocated" in run.stderr:
            module.fail_json(msg=_port_taken(name, p["port"], run.stderr))
        module.fail_json(msg=f"docker run of {name} failed (exit {run.returncode}): {run.stderr.strip()[:1000]}")
    wait_health(module, p, t0)


def _pin_profiles(argv):
    """The rendered line names the controller's serve profiles (VFLEET_PROFILES_DIGEST=...); the
    container is started with the digest its image is labelled with instead, so the entrypoint checks
    that the image's copy is the one its label claims. The rollout has already checked that label
    against the controller's copy; a rollback or a restore goes back to an image of an older release,
    whose own profiles it served before. An image without the label gets no check (not a vfleet build)."""
    prefix = PROFILES_ENV + "="
    if not any(a.startswith(prefix) for a in argv):
        return argv
    label = subprocess.run(
        ["docker", "image", "inspect", "--format", '{{ index .Config.Labels "' + PROFILES_LABEL + '" }}', argv[-1]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout.strip()
    label = "" if label == "<no value>" else label
    out = []
    for a in argv:
        if a.startswith(prefix):
            if not label:
                out.pop()  # its --env
                continue
            a = prefix + label
        out.append(a)
    return out


def _port_taken(name, port, stderr):
    """docker run failed because the host port is allocated. Either another container publishes it,
    or no container does: then the Docker daemon holds the port for a container it was starting when
    it was killed (dockerd restores the allocation, not the container, after an unclean stop; seen on
    the test fleet by killing a node during `docker run`), and only a daemon restart frees it."""
    # docker run leaves the container it could not start in state "created"; remove it.
    subprocess.run(["docker", "rm", "--force", name], capture_output=True, text=True, timeout=120, check=False)
    holders = subprocess.run(
        ["docker", "ps", "--all", "--filter", f"publish={port}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout.split()
    if holders:
        return (
            f"docker run of {name} failed: host port {port} is published by container {', '.join(holders)} on "
            f"this node; stop that container or serve on another port (vfleet_node_host_port)"
        )
    return (
        f"docker run of {name} failed: the Docker daemon on this node holds host port {port} although no "
        f"container publishes it (a daemon stopped uncleanly while it was starting a container keeps that "
        f"port allocated); restart the Docker daemon on the node (systemctl restart docker) and run the "
        f"rollout again. docker said: {stderr.strip()[-300:]}"
    )


def prepare(module, p):
    changed = False
    for d in [p["state_dir"], *p["dirs"]]:
        if not os.path.isdir(d):
            os.makedirs(d, mode=0o755, exist_ok=True)
            changed = True
    env_dir = os.path.dirname(p["env_file"])
    if not os.path.isdir(env_dir):
        os.makedirs(env_dir, mode=0o700, exist_ok=True)
        changed = True
    lines = ["# Written by the vfleet_node role; secrets come from vault. Do not commit."]
    lines += [f"{k}={v}" for k, v in sorted((p["env"] or {}).items()) if v]
    text = "\n".join(lines) + "\n"
    try:
        with open(p["env_file"]) as f:
            same = f.read() == text and (os.stat(p["env_file"]).st_mode & 0o777) == 0o600
    except FileNotFoundError:
        same = False
    if not same:
        tmp = f"{p['env_file']}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, p["env_file"])
        changed = True
    module.exit_json(changed=changed)


def main():
    module = AnsibleModule(
        argument_spec={
            "action": {
                "type": "str",
                "choices": ["read", "record", "prepare", "start"],
                "default": "read",
            },
            # No defaults of their own: the role passes its variables (defaults/main.yml holds them).
            "container": {"type": "str"},
            "state_dir": {"type": "path"},
            "port": {"type": "int"},
            "record": {"type": "dict"},
            "env_file": {"type": "path"},
            "env": {"type": "dict", "no_log": True},
            "dirs": {"type": "list", "elements": "path", "default": []},
            "argv": {"type": "list", "elements": "str"},
            "stop_timeout": {"type": "int", "default": 30},
            "timeout": {"type": "float"},
            "interval": {"type": "float", "default": 1},
            "docker_down_ok": {"type": "bool", "default": False},
        },
        required_if=[
            ("action", "read", ["container", "state_dir", "port"]),
            ("action", "record", ["record", "state_dir"]),
            ("action", "prepare", ["env_file", "state_dir"]),
            ("action", "start", ["argv", "container", "port", "timeout"]),
        ],
    )
    p = module.params
    actions = {"read": read, "record": record, "prepare": prepare, "start": start}
    actions[p["action"]](module, p)


if __name__ == "__main__":
    main()
