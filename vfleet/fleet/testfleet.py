"""A test fleet on one machine: N Docker-in-Docker nodes (each its own dockerd and image store)
and a local registry, all labelled org.vfleet.fleet=NAME and removed by that label.

The registry is published on the controller's loopback (the controller's dockerd treats 127.0.0.1
registries as insecure, so no daemon config changes), and the nodes pull from its container address
(their dockerd starts with --insecure-registry for it). The same repository and tag, seen from two
addresses, is the same manifest and digest.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vfleet.errors import VfleetError
from vfleet.fleet.docker import docker, ids_by_label, inspect
from vfleet.fleet.images import NODE_IMAGE, build_node_image, cache_dir

LABEL = "org.vfleet.fleet"
#: REFERENCE section 6: the flag set that runs dockerd inside a container on this kernel (--privileged fails).
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


@dataclass
class Node:
    name: str
    ip: str


@dataclass
class Fleet:
    name: str
    registry: str  # container name
    registry_addr: str  # IP:5000, as the nodes see it
    registry_local: str  # 127.0.0.1:PORT, as the controller sees it
    nodes: list[Node] = field(default_factory=list)
    pushed: list[str] = field(default_factory=list)  # controller-side tags, removed on down

    @property
    def dir(self) -> Path:
        return state_dir(self.name)

    @property
    def inventory(self) -> Path:
        return self.dir / "inventory.yml"

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "fleet.json").write_text(json.dumps(asdict(self), indent=2))

    def push(self, local_ref: str) -> str:
        """Push a controller image to the fleet registry; return the reference the nodes use."""
        repo_tag = local_ref.rsplit("/", 1)[-1]
        alias = f"{self.registry_local}/{repo_tag}"
        docker("tag", local_ref, alias)
        if alias not in self.pushed:
            self.pushed.append(alias)
            self.save()
        docker("push", alias, timeout=1800)
        return f"{self.registry_addr}/{repo_tag}"

    def pull_bytes(self, repo_tag: str, have_image_id: str, node: str) -> int:
        """Compressed bytes a pull of REPO_TAG transfers to NODE, which holds image HAVE_IMAGE_ID:
        the sizes (from the registry manifest) of the layers whose content the node lacks."""
        repo, tag = repo_tag.rsplit(":", 1)
        base = f"http://{self.registry_local}/v2/{repo}"
        req = urllib.request.Request(
            f"{base}/manifests/{tag}", headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            manifest = json.loads(resp.read())
        with urllib.request.urlopen(f"{base}/blobs/{manifest['config']['digest']}", timeout=30) as resp:
            diff_ids = json.loads(resp.read())["rootfs"]["diff_ids"]
        out = self.node_docker(node, "image", "inspect", have_image_id, check=False)
        have = set(json.loads(out)[0]["RootFS"]["Layers"]) if out.strip() else set()
        return sum(
            int(layer["size"]) for layer, diff in zip(manifest["layers"], diff_ids, strict=True) if diff not in have
        )

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name or n.name.endswith(f"-{name}"):
                return n
        raise VfleetError(f"fleet {self.name} has no node {name}")

    def node_docker(self, node: str, *args: str, check: bool = True) -> str:
        return docker("exec", self.node(node).name, "docker", *args, check=check)

    def serving(self, node: str, container: str = "vfleet-serve") -> dict[str, Any] | None:
        """docker inspect of the serving container on NODE (None if absent)."""
        out = self.node_docker(node, "container", "inspect", container, check=False)
        if not out.strip():
            return None
        data: list[dict[str, Any]] = json.loads(out)
        return data[0]

    def health(self, node: str, port: int = 8000, path: str = "/health") -> int:
        """HTTP status of the node's serving container (0 if nothing answers)."""
        url = f"http://{self.node(node).ip}:{port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (urllib.error.URLError, OSError):
            return 0


def state_dir(name: str) -> Path:
    return cache_dir() / "fleets" / name


def load(name: str) -> Fleet:
    path = state_dir(name) / "fleet.json"
    if not path.exists():
        raise VfleetError(f"no test fleet {name!r} (no {path}): start one with `vfleet fleet up --name {name}`")
    data = json.loads(path.read_text())
    data["nodes"] = [Node(**n) for n in data["nodes"]]
    return Fleet(**data)


def _ip(container: str) -> str:
    info = inspect("container", container)
    ip = (info or {}).get("NetworkSettings", {}).get("IPAddress", "")
    if not ip:
        raise VfleetError(f"container {container} has no IP address on the default bridge")
    return str(ip)


def _wait_dockerd(container: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if docker("exec", container, "docker", "version", "--format", "{{.Server.Version}}", check=False).strip():
            return
        time.sleep(1)
    log = docker("exec", container, "tail", "-n", "20", "/var/log/dockerd.log", check=False)
    raise VfleetError(f"dockerd in fleet node {container} did not start in {timeout:.0f} s:\n{log}")


def write_inventory(
    fleet: Fleet,
    profile: str = "tiny/cpu",
    group: str = "cpu_x86",
    extra_vars: dict[str, Any] | None = None,
    host_vars: dict[str, dict[str, Any]] | None = None,
) -> Path:
    hosts = {n.name: {"vfleet_node_address": n.ip, **(host_vars or {}).get(n.name, {})} for n in fleet.nodes}
    doc = {
        "all": {
            # Fleet-wide: the lock play runs on the controller (localhost), outside vfleet_nodes.
            "vars": {"vfleet_fleet_name": fleet.name, "vfleet_lock_dir": str(fleet.dir / "locks")},
            "children": {
                "vfleet_nodes": {
                    "vars": {
                        "ansible_connection": "community.docker.docker",
                        "ansible_python_interpreter": "/usr/bin/python3",
                        "vfleet_node_min_free_gb": 1,
                        **(extra_vars or {}),
                    },
                    "children": {group: {"vars": {"vfleet_node_profile": profile}, "hosts": hosts}},
                }
            },
        }
    }
    fleet.inventory.write_text(
        "---\n# Written by vfleet fleet up; removed by vfleet fleet down.\n" + yaml.safe_dump(doc, sort_keys=False)
    )
    return fleet.inventory


def up(name: str, nodes: int = 3, profile: str = "tiny/cpu", group: str = "cpu_x86") -> Fleet:
    """Start the registry and NODES nodes; on any failure remove what was started."""
    if nodes < 1:
        raise VfleetError("a fleet needs at least one node (--nodes N)")
    if ids_by_label("container", f"{LABEL}={name}"):
        raise VfleetError(f"test fleet {name!r} already exists: `vfleet fleet down --name {name}` first")
    build_node_image()
    labels = ["--label", "org.vfleet.managed=true", "--label", f"{LABEL}={name}"]
    reg = f"vfleet-fleet-{name}-registry"
    try:
        docker(
            "run",
            "--detach",
            "--name",
            reg,
            *labels,
            "--label",
            "org.vfleet.role=registry",
            "--volume",
            "/var/lib/vfleet-registry",
            "--publish",
            "127.0.0.1::5000",
            "--entrypoint",
            "/usr/bin/docker-registry",
            NODE_IMAGE,
            "serve",
            "/etc/vfleet-registry.yml",
        )
        port = docker("port", reg, "5000/tcp").split()[0].rsplit(":", 1)[1]
        fleet = Fleet(name=name, registry=reg, registry_addr=f"{_ip(reg)}:5000", registry_local=f"127.0.0.1:{port}")
        fleet.save()
        for i in range(1, nodes + 1):
            node = f"vfleet-fleet-{name}-node{i}"
            docker(
                "run",
                "--detach",
                "--name",
                node,
                "--hostname",
                f"node{i}",
                *labels,
                "--label",
                "org.vfleet.role=fleet-node",
                *DIND_FLAGS,
                "--env",
                f"VFLEET_DOCKERD_ARGS=--insecure-registry {fleet.registry_addr}",
                NODE_IMAGE,
            )
            fleet.nodes.append(Node(name=node, ip=_ip(node)))
        fleet.save()
        for n in fleet.nodes:
            _wait_dockerd(n.name)
        write_inventory(fleet, profile, group)
        return fleet
    except BaseException:
        down(name)
        raise


def down(name: str) -> list[str]:
    """Remove every container (with its anonymous volumes) labelled for fleet NAME, and the
    controller-side registry tags it pushed. Returns what was removed."""
    removed = ids_by_label("container", f"{LABEL}={name}")
    if removed:
        docker("rm", "--force", "--volumes", *removed)
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
