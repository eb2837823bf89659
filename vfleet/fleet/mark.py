"""The test-fleet mark, as it is (docs/fleet.md, "Test-fleet switches"): an inventory is a test fleet's
only when every one of its hosts is a container that `make fleet-up` started on this controller's
docker, labelled for one fleet, and the inventory reaches it through that docker. A group named
vfleet_test_fleet is only the inventory's claim: a production inventory with that group added by hand
is no test fleet, and the reason says which host is not such a node.

The labels are written here, once: lab (which `make fleet-up` is) imports them. Both the CLI
(vfleet/fleet/inventory.py, before ansible-playbook starts) and the playbooks (`vfleet fleet mark`,
run by ansible/roles/vfleet_node/tasks/mark.yml before the lock) judge the hosts with `judge`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from vfleet.dockerd import DockerError, docker

#: The group an inventory of `make fleet-up` has, holding every host: the claim, never the proof.
TEST_FLEET_GROUP = "vfleet_test_fleet"
#: Every container of a test fleet carries these labels: managed, the fleet's name, and its role.
MANAGED_LABEL = "org.vfleet.managed"
FLEET_LABEL = "org.vfleet.fleet"
ROLE_LABEL = "org.vfleet.role"
#: The roles of the containers an inventory of a test fleet may name as hosts.
NODE_ROLE = "fleet-node"
BALANCER_ROLE = "balancer"
HOST_ROLES = (NODE_ROLE, BALANCER_ROLE)
#: Ansible's connections that run a task inside a container of this controller's docker.
DOCKER_CONNECTIONS = ("community.docker.docker", "docker")


@dataclass(frozen=True)
class Mark:
    """Whether the inventory is a test fleet's, and why (or why not), in words for a refusal."""

    test_fleet: bool
    why: str

    def as_json(self) -> str:
        return json.dumps({"test_fleet": self.test_fleet, "why": self.why})


@dataclass(frozen=True)
class HostSpec:
    """How Ansible reaches one host: what the mark needs of its (effective) variables."""

    name: str
    connection: str = ""
    host: str = ""  # ansible_host
    docker_host: str = ""  # ansible_docker_host
    extra_args: str = ""  # ansible_docker_extra_args: another daemon than the one checked here
    fleet: str = ""  # vfleet_fleet_name

    @classmethod
    def of(cls, name: str, hostvars: dict[str, Any]) -> HostSpec:
        def var(key: str) -> str:
            value = hostvars.get(key)
            return "" if value is None else str(value)

        return cls(
            name,
            var("ansible_connection"),
            var("ansible_host"),
            var("ansible_docker_host"),
            var("ansible_docker_extra_args"),
            var("vfleet_fleet_name"),
        )

    @property
    def container(self) -> str:
        return self.docker_host or self.host or self.name


def _reach_problem(spec: HostSpec) -> str:
    """Why SPEC is not reached as a container of this controller's docker ('' when it is)."""
    if spec.connection not in DOCKER_CONNECTIONS:
        return f"{spec.name} is reached over {spec.connection or 'ssh'}, not as a container of this controller's docker"
    if spec.extra_args:
        return f"{spec.name}: ansible_docker_extra_args points its connection at another docker daemon"
    if spec.host and spec.docker_host and spec.host != spec.docker_host:
        return f"{spec.name}: ansible_host {spec.host} and ansible_docker_host {spec.docker_host} name two containers"
    if not spec.fleet:
        return f"{spec.name} has no vfleet_fleet_name, the fleet whose label its container must carry"
    return ""


def _labels(containers: list[str]) -> dict[str, dict[str, str]]:
    """container name -> its labels, for those of CONTAINERS this controller's docker has."""
    proc = docker(
        "container", "inspect", "--format", "{{json .Name}} {{json .Config.Labels}}", *containers, check=False
    )
    out: dict[str, dict[str, str]] = {}
    for line in proc.stdout.splitlines():
        name, _, labels = line.partition(" ")
        try:
            out[str(json.loads(name)).lstrip("/")] = dict(json.loads(labels) or {})
        except ValueError:
            continue
    return out


def _label_problem(spec: HostSpec, labels: dict[str, str] | None) -> str:
    if labels is None:
        return f"{spec.name}: no container {spec.container} in this controller's docker"
    if labels.get(MANAGED_LABEL) != "true" or labels.get(ROLE_LABEL) not in HOST_ROLES:
        return f"{spec.name}: container {spec.container} is no node `make fleet-up` started (its labels)"
    if labels.get(FLEET_LABEL) != spec.fleet:
        return (
            f"{spec.name}: container {spec.container} belongs to test fleet {labels.get(FLEET_LABEL)!r}, "
            f"not to {spec.fleet!r} (vfleet_fleet_name)"
        )
    return ""


def judge(claimed: bool, specs: list[HostSpec]) -> Mark:
    """The mark of an inventory whose hosts are SPECS; CLAIMED: its group vfleet_test_fleet holds every host.
    Docker is asked only when the claim is made and every host is reached through it."""
    if not claimed:
        return Mark(False, f"no group {TEST_FLEET_GROUP} holds every host")
    if not specs:
        return Mark(False, "the inventory has no host")
    reach = [p for p in map(_reach_problem, specs) if p]
    if reach:
        return Mark(False, _not_nodes(reach))
    fleets = sorted({s.fleet for s in specs})
    if len(fleets) > 1:
        return Mark(False, _not_nodes([f"its hosts name {len(fleets)} fleets ({', '.join(fleets)})"]))
    try:
        found = _labels(sorted({s.container for s in specs}))
    except DockerError as exc:
        return Mark(False, _not_nodes([f"this controller's docker cannot be asked ({exc})"]))
    problems = [p for s in specs if (p := _label_problem(s, found.get(s.container)))]
    if problems:
        return Mark(False, _not_nodes(problems))
    return Mark(True, f"every host is a container of test fleet {fleets[0]} (label {FLEET_LABEL}={fleets[0]})")


def _not_nodes(problems: list[str]) -> str:
    shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
    return f"its group {TEST_FLEET_GROUP} is no mark: not every host is a node `make fleet-up` started ({shown})"


def judge_json(claimed: bool, hosts: dict[str, dict[str, Any]]) -> Mark:
    """`judge` on the hosts as the playbook passes them: {host: its variables}."""
    return judge(claimed, [HostSpec.of(name, dict(v or {})) for name, v in sorted(hosts.items())])
