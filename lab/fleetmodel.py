"""A test fleet's state: its nodes, registry and balancer as `make fleet-up` left them (fleet.json in
its state directory), and what the tests and benchmarks ask of a running fleet (push an image, a node's
docker, a node's health, the bytes a pull moves, the registry's requests). Starting and removing a
fleet is lab.testfleet, which re-exports these names.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from lab.docker import docker
from lab.images import cache_dir
from lab.registrylog import RegistryRequest
from vfleet.errors import VfleetError
from vfleet.fleet.mark import FLEET_LABEL
from vfleet.verify.client import status_of

#: The label of every container of a fleet (its value the fleet's name): vfleet.fleet.mark's, which checks it.
LABEL = FLEET_LABEL
#: The balancer's frontend port on the fleet network.
LB_PORT = 8000


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
    network: str = ""
    lb: Node = field(default_factory=lambda: Node("", ""))
    nodes: list[Node] = field(default_factory=list)
    pushed: list[str] = field(default_factory=list)  # controller-side tags, removed on down
    profile: str = "tiny/cpu"  # the serve profile of its nodes
    mirror: str = ""  # container name of the zone's pull-through mirror ("" when none)
    mirror_addr: str = ""  # IP:5000 of that mirror, as the nodes see it

    @property
    def lb_url(self) -> str:
        return f"http://{self.lb.ip}:{LB_PORT}"

    @property
    def dir(self) -> Path:
        return state_dir(self.name)

    @property
    def inventory(self) -> Path:
        return self.dir / "inventory.yml"

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "fleet.json").write_text(json.dumps(asdict(self), indent=2))

    @property
    def api_key_file(self) -> Path:
        """The fleet's API key (mode 0600), when `up` made one; the inventory reads it with a lookup."""
        return self.dir / "api_key"

    def alias(self, local_ref: str) -> str:
        """The controller-side name of LOCAL_REF in the fleet registry (127.0.0.1:PORT/REPO:TAG)."""
        return f"{self.registry_local}/{local_ref.rsplit('/', 1)[-1]}"

    def digest_ref(self, local_ref: str) -> str:
        """REPO@sha256:D as the nodes see a pushed LOCAL_REF: the manifest digest docker recorded
        for the push (RepoDigests of the controller-side alias)."""
        alias = self.alias(local_ref)
        digests = json.loads(docker("image", "inspect", "--format", "{{json .RepoDigests}}", alias))
        repo = alias.rsplit(":", 1)[0]
        found = [d.split("@", 1)[1] for d in digests or [] if d.split("@", 1)[0] == repo]
        if not found:
            raise VfleetError(
                f"{local_ref} was not pushed to fleet {self.name}: "
                f"`python -m lab fleet push --name {self.name} {local_ref}`"
            )
        return f"{self.registry_addr}/{repo.split('/', 1)[1]}@{found[0]}"

    def push(self, local_ref: str) -> str:
        """Push a controller image to the fleet registry; return the reference the nodes use."""
        repo_tag = local_ref.rsplit("/", 1)[-1]
        alias = self.alias(local_ref)
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
        accept = {"Accept": "application/vnd.docker.distribution.manifest.v2+json"}
        manifest = httpx.get(f"{base}/manifests/{tag}", headers=accept, timeout=30).raise_for_status().json()
        config = httpx.get(f"{base}/blobs/{manifest['config']['digest']}", timeout=30, follow_redirects=True)
        diff_ids = config.raise_for_status().json()["rootfs"]["diff_ids"]
        out = self.node_docker(node, "image", "inspect", have_image_id, check=False)
        have = set(json.loads(out)[0]["RootFS"]["Layers"]) if out.strip() else set()
        return sum(
            int(layer["size"]) for layer, diff in zip(manifest["layers"], diff_ids, strict=True) if diff not in have
        )

    def registry_requests(self, container: str = "", since: str = "") -> list[RegistryRequest]:
        """The requests a registry of the fleet (default: the central one) answered, from its log
        (REGISTRY_LOG_LEVEL=info: one "response completed" line per request), since an RFC 3339 time."""
        args = ["logs", *(["--since", since] if since else []), container or self.registry]
        text = docker(*args, check=False, stderr=True)
        return [r for line in text.splitlines() if (r := RegistryRequest.parse(line)) is not None]

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
        return data[0] if data else None

    def health(self, node: str, port: int = 8000, path: str = "/health") -> int:
        """HTTP status of the node's serving container (0 if nothing answers)."""
        return status_of(f"http://{self.node(node).ip}:{port}{path}")

    def lb_status(self) -> dict[str, str]:
        """server -> its HAProxy status (UP, DRAIN, MAINT, ...) in the fleet's backend, from the balancer's
        runtime socket."""
        assert self.lb.name, f"fleet {self.name} has no balancer"
        out = docker(
            "exec", self.lb.name, "sh", "-c", "echo 'show stat' | socat stdio unix-connect:/run/haproxy/admin.sock"
        )
        rows = [line.split(",") for line in out.splitlines() if line.startswith("vfleet,")]
        return {r[1]: r[17] for r in rows if r[1] not in ("FRONTEND", "BACKEND")}


def state_dir(name: str) -> Path:
    return cache_dir() / "fleets" / name


def load(name: str) -> Fleet:
    path = state_dir(name) / "fleet.json"
    if not path.exists():
        raise VfleetError(f"no test fleet {name!r} (no {path}): start one with `make fleet-up FLEET={name}`")
    data = json.loads(path.read_text())
    data["nodes"] = [Node(**n) for n in data["nodes"]]
    data["lb"] = Node(**data["lb"])
    return Fleet(**data)
