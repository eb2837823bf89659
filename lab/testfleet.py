"""A test fleet on one machine: N Docker-in-Docker nodes (each its own dockerd and image store),
a local registry and an HAProxy balancer, on a Docker network of their own with fixed addresses
(a node that is killed and started again keeps its address), all labelled org.vfleet.fleet=NAME and
removed by that label.

The registry is published on the controller's loopback (the controller's dockerd treats 127.0.0.1
registries as insecure, so no daemon config changes), and the nodes pull from its address on the
fleet network (their dockerd starts with --insecure-registry for it). The same repository and tag,
seen from two addresses, is the same manifest and digest. Those addresses serve plain http: starting or
loading a fleet declares them insecure to the controller's vfleet (declare_insecure), the supported way.
Each node's dockerd also listens on TCP 2375 of the fleet network, so the controller's docker CLI reaches
it (DOCKER_HOST) the way it reaches a production node over SSH. The balancer is configured by the
project's own `lb.yml` playbook.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
from pathlib import Path
from typing import Any

import yaml

from lab.docker import docker, ids_by_label
from lab.fleetmodel import LABEL, LB_PORT, Fleet, Node, state_dir
from lab.fleetmodel import load as load_model
from lab.images import NODE_IMAGE, build_node_image
from lab.registrylog import RegistryRequest
from vfleet.errors import VfleetError
from vfleet.fleet.ansible import run_playbook
from vfleet.fleet.mark import BALANCER_ROLE, MANAGED_LABEL, NODE_ROLE, ROLE_LABEL, TEST_FLEET_GROUP
from vfleet.waiting import wait_until

#: The fleet model (fleetmodel) and the registry log reader (registrylog) are re-exported here.
__all__ = [
    "DIND_FLAGS",
    "LABEL",
    "LB_PORT",
    "STANDIN_FAST",
    "STANDIN_VARS",
    "SUBNETS",
    "VERIFY_STANDIN",
    "Fleet",
    "Node",
    "RegistryRequest",
    "declare_insecure",
    "down",
    "load",
    "setup_balancer",
    "state_dir",
    "up",
    "wait_dockerd",
    "write_inventory",
]

#: Candidate subnets for a fleet network (the first one Docker accepts is used).
SUBNETS = [f"10.213.{i}.0/24" for i in range(1, 250)]
#: The flag set that runs dockerd inside a container on this kernel, where --privileged fails (docs/upstream.md).
DIND_FLAGS = [
    "--cap-add",
    "ALL",
    "--cap-drop",
    "SYS_RESOURCE",
    "--security-opt",
    "seccomp=unconfined",
    "--security-opt",
    "apparmor=unconfined",
    "--security-opt",
    "systempaths=unconfined",
    "--device-cgroup-rule",
    "a *:* rwm",
    "--volume",
    "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--volume",
    "/var/lib/docker",
]

#: Stand-in boot-verify for the light stand-in images (lab/images.py FAKE_VARIANTS): GET /verify.
VERIFY_STANDIN = [
    sys.executable,
    "-c",
    "import sys, urllib.request; urllib.request.urlopen(sys.argv[1])",
    "{url}/verify",
]
#: Inventory vars of a stand-in fleet (group vars, so that a per-host fault can override them).
STANDIN_VARS: dict[str, Any] = {"vfleet_node_verify_argv": VERIFY_STANDIN}
#: Extra vars of a stand-in fleet run: short polls and bounds (the stand-ins answer at once). The three
#: switches are honoured, and said NOT CHECKED, because the inventory carries the test-fleet mark.
STANDIN_FAST: dict[str, Any] = {
    "vfleet_node_check_promotion": False,  # the stand-in images have no boot-verify report to promote
    "vfleet_node_check_profiles": False,  # nor serve profiles (no org.vfleet.profiles.digest label)
    "vfleet_node_allow_unsigned": True,  # nor a build record to sign (the lifecycle test walks the gate)
    "vfleet_node_poll_interval": 1,
    "vfleet_node_health_timeout": 30,
    "vfleet_lb_settle_s": 1,
    "vfleet_lb_drain_timeout_s": 5,
    "vfleet_lb_dead_after_s": 3,
}


def declare_insecure(fleet: Fleet) -> None:
    """The fleet's registry and mirror serve plain http: declare them insecure registries to this process's
    vfleet and what it starts (VFLEET_INSECURE_REGISTRIES, added to what is set), as the nodes' dockerd
    declares them with --insecure-registry. Nothing else is asked over http (vfleet.supply.registry)."""
    have = [e for e in re.split(r"[,\s]+", os.environ.get("VFLEET_INSECURE_REGISTRIES", "")) if e]
    add = [a for a in (fleet.registry_addr, fleet.mirror_addr) if a and a not in have]
    if add:
        os.environ["VFLEET_INSECURE_REGISTRIES"] = ",".join([*have, *add])


def load(name: str) -> Fleet:
    """The test fleet NAME (`make fleet-up`), its registry declared insecure (declare_insecure)."""
    fleet = load_model(name)
    declare_insecure(fleet)
    return fleet


def _network(name: str, labels: list[str]) -> tuple[str, str]:
    """Create the fleet's network on the first free candidate subnet; (network name, subnet)."""
    net = f"vfleet-fleet-{name}"
    last = ""
    for subnet in SUBNETS:
        out = docker("network", "create", "--subnet", subnet, *labels, net, check=False)
        if out.strip():
            return net, subnet
        last = docker("network", "inspect", net, check=False)
        if last.strip() and last.strip() != "[]":
            raise VfleetError(f"docker network {net} already exists: `make fleet-down FLEET={name}` first")
    raise VfleetError(f"no free subnet for the fleet network among {SUBNETS[0]}..{SUBNETS[-1]}")


def wait_dockerd(container: str, timeout: float = 90) -> None:
    wait_until(
        lambda: docker("exec", container, "docker", "version", "--format", "{{.Server.Version}}", check=False).strip(),
        timeout,
        1.0,
        f"dockerd in fleet node {container} to start",
        state=lambda: (
            "its log ends with:\n" + docker("exec", container, "tail", "-n", "20", "/var/log/dockerd.log", check=False)
        ),
    )


def write_inventory(
    fleet: Fleet,
    profile: str = "tiny/cpu",
    group: str = "cpu_x86",
    extra_vars: dict[str, Any] | None = None,
    host_vars: dict[str, dict[str, Any]] | None = None,
) -> Path:
    hosts = {
        n.name: {
            "vfleet_node_address": n.ip,
            "vfleet_node_docker_host": f"tcp://{n.ip}:2375",
            **(host_vars or {}).get(n.name, {}),
        }
        for n in fleet.nodes
    }
    docker_conn = {"ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3"}
    # The key stays in its own 0600 file; the inventory only names it.
    key_var = (
        {"vfleet_node_api_key": "{{ lookup('file', '" + str(fleet.api_key_file) + "') }}"}
        if fleet.api_key_file.is_file()
        else {}
    )
    doc = {
        "all": {
            # Fleet-wide: the controller plays (plan, lock) and the balancer steps of every node read these.
            "vars": {"vfleet_fleet_name": fleet.name, "vfleet_lb_service": "standalone"},
            "children": {
                "vfleet_lb": {"vars": docker_conn, "hosts": {fleet.lb.name: {}}},
                "vfleet_nodes": {
                    "vars": {**docker_conn, "vfleet_node_min_free_gb": 1, **key_var, **(extra_vars or {})},
                    "children": {group: {"vars": {"vfleet_node_profile": profile}, "hosts": hosts}},
                },
                # The test-fleet claim (docs/fleet.md, "Test-fleet switches"): a group holding every host. The
                # mark is that claim and every host a container labelled above, checked through docker before
                # each run: only then may a switch turn a gate off, or a profile that is not production serve.
                TEST_FLEET_GROUP: {"children": {"vfleet_lb": {}, "vfleet_nodes": {}}},
            },
        }
    }
    fleet.inventory.write_text(
        "---\n# Written by make fleet-up; removed by make fleet-down.\n" + yaml.safe_dump(doc, sort_keys=False)
    )
    return fleet.inventory


def up(
    name: str,
    nodes: int = 3,
    profile: str = "tiny/cpu",
    group: str = "cpu_x86",
    model_dir: Path | None = None,
    api_key: bool = False,
    mirror: bool = False,
) -> Fleet:
    """Start the network, the registry, the balancer and NODES nodes, and set the balancer up with
    lb.yml; on any failure remove what was started. MODEL_DIR is copied to every node's /srv/models
    (the rendered container mounts it); with API_KEY the fleet gets a random API key (a 0600 file in
    its state directory, which the inventory reads), as a real fleet keeps one in its vault. With MIRROR
    the fleet also gets a pull-through mirror of its registry (Fleet.mirror_addr), as one rack or zone
    of a large fleet would; nodes pull through it when the inventory sets vfleet_node_registry_mirror."""
    if nodes < 1:
        raise VfleetError("a fleet needs at least one node (--nodes N)")
    if nodes > 200:
        raise VfleetError("a test fleet holds at most 200 nodes (--nodes N)")
    if ids_by_label("container", f"{LABEL}={name}"):
        raise VfleetError(f"test fleet {name!r} already exists: `make fleet-down FLEET={name}` first")
    build_node_image()
    # The labels the test-fleet mark checks (vfleet/fleet/mark.py): a switch is honoured only on nodes so labelled.
    labels = ["--label", f"{MANAGED_LABEL}=true", "--label", f"{LABEL}={name}"]
    try:
        net, subnet = _network(name, labels)
        prefix = subnet.rsplit(".", 1)[0]
        reg = f"vfleet-fleet-{name}-registry"
        docker(
            "run",
            "--detach",
            "--name",
            reg,
            *labels,
            "--label",
            f"{ROLE_LABEL}=registry",
            "--network",
            net,
            "--ip",
            f"{prefix}.2",
            "--volume",
            "/var/lib/vfleet-registry",
            "--publish",
            "127.0.0.1::5000",
            "--env",
            "REGISTRY_LOG_LEVEL=info",  # one "response completed" line per request: Fleet.registry_requests
            "--entrypoint",
            "/usr/bin/docker-registry",
            NODE_IMAGE,
            "serve",
            "/etc/vfleet-registry.yml",
        )
        port = docker("port", reg, "5000/tcp").split()[0].rsplit(":", 1)[1]
        lb = Node(name=f"vfleet-fleet-{name}-lb", ip=f"{prefix}.3")
        docker(
            "run",
            "--detach",
            "--name",
            lb.name,
            "--hostname",
            "lb",
            *labels,
            "--label",
            f"{ROLE_LABEL}={BALANCER_ROLE}",
            "--network",
            net,
            "--ip",
            lb.ip,
            "--entrypoint",
            "/bin/sleep",
            NODE_IMAGE,
            "infinity",
        )
        fleet = Fleet(
            name=name,
            registry=reg,
            registry_addr=f"{prefix}.2:5000",
            registry_local=f"127.0.0.1:{port}",
            network=net,
            lb=lb,
            profile=profile,
        )
        if mirror:
            # The zone's pull-through cache (docs/fleet.md, "Pull plan"): Debian's docker-registry in
            # proxy mode, fetching from the central registry what a node asks it for, once.
            fleet.mirror = f"vfleet-fleet-{name}-mirror"
            fleet.mirror_addr = f"{prefix}.4:5000"
            docker(
                "run",
                "--detach",
                "--name",
                fleet.mirror,
                *labels,
                "--label",
                f"{ROLE_LABEL}=registry-mirror",
                "--network",
                net,
                "--ip",
                f"{prefix}.4",
                "--volume",
                "/var/lib/vfleet-registry",
                "--env",
                f"REGISTRY_PROXY_REMOTEURL=http://{fleet.registry_addr}",
                "--env",
                "REGISTRY_LOG_LEVEL=info",
                "--entrypoint",
                "/usr/bin/docker-registry",
                NODE_IMAGE,
                "serve",
                "/etc/vfleet-registry.yml",
            )
        fleet.save()
        insecure = f"--insecure-registry {fleet.registry_addr}" + (
            f" --insecure-registry {fleet.mirror_addr}" if mirror else ""
        )
        for i in range(1, nodes + 1):
            node = Node(name=f"vfleet-fleet-{name}-node{i}", ip=f"{prefix}.{10 + i}")
            docker(
                "run",
                "--detach",
                "--name",
                node.name,
                "--hostname",
                f"node{i}",
                *labels,
                "--label",
                f"{ROLE_LABEL}={NODE_ROLE}",
                "--network",
                net,
                "--ip",
                node.ip,
                *DIND_FLAGS,
                "--env",
                f"VFLEET_DOCKERD_ARGS={insecure}",
                NODE_IMAGE,
            )
            fleet.nodes.append(node)
        fleet.save()
        for n in fleet.nodes:
            wait_dockerd(n.name)
            if model_dir is not None:
                docker("cp", f"{Path(model_dir).resolve()}/.", f"{n.name}:/srv/models")
        if api_key:
            fd = os.open(fleet.api_key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f"vf-{secrets.token_hex(16)}")
        write_inventory(fleet, profile, group)
        setup_balancer(fleet)
        declare_insecure(fleet)
        return fleet
    except BaseException:
        down(name)
        raise


def setup_balancer(fleet: Fleet) -> None:
    """Configure and start the fleet's HAProxy with the project's lb.yml playbook."""
    proc = run_playbook("lb", fleet.inventory, {}, capture=True, timeout=600)
    if proc.returncode != 0:
        raise VfleetError(f"lb.yml failed on test fleet {fleet.name}:\n{(proc.stdout + proc.stderr)[-3000:]}")


def down(name: str) -> list[str]:
    """Remove every container (with its anonymous volumes) labelled for fleet NAME, and the
    controller-side registry tags it pushed. Returns what was removed."""
    removed = ids_by_label("container", f"{LABEL}={name}")
    if removed:
        docker("rm", "--force", "--volumes", *removed)
    for net in ids_by_label("network", f"{LABEL}={name}"):
        docker("network", "rm", net, check=False)
    path = state_dir(name) / "fleet.json"
    if path.exists():
        for alias in json.loads(path.read_text()).get("pushed", []):
            docker("image", "rm", alias, check=False)
        for f in sorted(state_dir(name).rglob("*"), reverse=True):
            if f.is_file():
                f.unlink()
            else:
                f.rmdir()
        state_dir(name).rmdir()
    return removed
