"""The stand-in test fleet of the e2e rollout scenarios (tests/e2e/ops/test_ansible_fleet.py and
tests/e2e/ops/test_fleet_node_faults.py): 4 Docker-in-Docker nodes, a local registry and the HAProxy balancer that
lb.yml sets up, the light stand-in images pushed to it, and Ctx, which drives the operator's CLI (`vfleet fleet
...`) or raw ansible-playbook against it and reads every outcome from the nodes and the balancer themselves.

One fleet serves both modules (tests/e2e/conftest.py, `standin`, session scope): their scenarios run in order,
and each starts from the state the previous left. Figures (wall time per scenario, swap time per node, bytes
pulled per node) go to .cache/fleet/figures.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from lab import testfleet
from lab.docker import docker
from lab.images import FAKE_REPO, build_fake_images, build_node_image, cache_dir
from vfleet.fleet.ansible import env as ansible_env
from vfleet.fleet.ansible import playbook_argv, run_playbook

# The stand-in fleet settings (shared with benchmarks/bench_fleet_scale.py); batches of 3 here: the
# canary, then the other three in one batch (the batch tests override it).
FAST: dict[str, Any] = {**testfleet.STANDIN_FAST, "vfleet_batch_size": 3}
STANDIN_VARS = testfleet.STANDIN_VARS
#: The balancer's health-check interval on this fleet of stand-ins (ctx), in ms.
LB_CHECK_MS = 500
LOCK = "/var/lib/vfleet/fleet-lock.json"


def flat(text: str) -> str:
    """Output with the YAML callback's line folding undone, for substring checks."""
    return " ".join(text.split())


def played_groups(text: str) -> list[tuple[str, list[str]]]:
    """(play name, hosts that reported a result) per play run, in order; a play with serial batches
    runs once per batch. The balancer and localhost are left out (a delegated result names its node)."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if m := re.match(r"^PLAY \[(.+?)\] \*", line):
            out.append((m[1], []))
        elif out and (m := re.match(r"^(?:ok|changed|fatal|skipping): \[([^\]\s]+)", line)):
            host = m[1]
            if host != "localhost" and not host.endswith("-lb") and host not in out[-1][1]:
                out[-1][1].append(host)
    return out


def recap_changed(text: str) -> dict[str, int]:
    """host -> changed= count from the PLAY RECAP."""
    return {m[0]: int(m[1]) for m in re.findall(r"(?m)^(\S+)\s+: ok=\d+\s+changed=(\d+)", text)}


def new_figures() -> dict[str, Any]:
    return {"wall_s": {}, "swap_s": {}, "pull_bytes": {}}


#: The figures of this process's stand-in fleet.
FIGURES: dict[str, Any] = new_figures()


class Ctx:
    def __init__(self, fleet: testfleet.Fleet, refs: dict[str, str], figures: dict[str, Any]) -> None:
        self.fleet = fleet
        self.figures = figures
        self.refs = refs  # variant -> reference as the nodes see it
        self.names = [n.name for n in fleet.nodes]

    def _run(self, scenario: str, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        t0 = time.monotonic()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
        self.figures["wall_s"][scenario] = round(time.monotonic() - t0, 1)
        proc.stdout += proc.stderr
        logs = cache_dir() / "scenario-logs"
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"{scenario}.log").write_text(proc.stdout)
        return proc

    def playbook(
        self, scenario: str, image: str, playbook: str = "rollout", limit: str | None = None, **extra: Any
    ) -> subprocess.CompletedProcess[str]:
        """Raw ansible-playbook, as an operator may run it."""
        extra_vars = {**FAST, **extra}
        if image:
            extra_vars["vfleet_image"] = image
        return self._run(scenario, playbook_argv(playbook, self.fleet.inventory, extra_vars, limit), ansible_env())

    def cli(self, scenario: str, action: str, *args: str, **extra: Any) -> subprocess.CompletedProcess[str]:
        """The operator's CLI: `vfleet fleet ACTION --inventory INV ARGS -e K=V ...`, INV the test fleet's inventory."""
        argv = [sys.executable, "-m", "vfleet", "fleet", action, "--inventory", str(self.fleet.inventory), *args]
        for k, v in {**FAST, **extra}.items():
            argv += ["-e", f"{k}={json.dumps(v)}"]
        return self._run(scenario, argv, dict(os.environ))

    def serving(self, node: str) -> dict[str, Any]:
        info = self.fleet.serving(node)
        assert info is not None, f"{node}: no serving container"
        return info

    def image_id(self, variant: str) -> str:
        out = docker("image", "inspect", "--format", "{{.Id}}", f"{FAKE}:{variant}")
        return out.strip()

    def snapshot(self) -> dict[str, tuple[str, str]]:
        """node -> (container id, image id) of the serving container."""
        out = {}
        for n in self.names:
            info = self.fleet.serving(n)
            out[n] = (info["Id"], info["Image"]) if info else ("", "")
        return out

    def lb_status(self) -> dict[str, str]:
        return self.fleet.lb_status()

    def assert_on(self, node: str, variant: str) -> None:
        info = self.serving(node)
        assert info["Image"] == self.image_id(variant), f"{node} runs {info['Config']['Image']}, not {variant}"
        assert info["State"]["Running"], f"{node}: serving container not running"
        assert self.fleet.health(node) == 200, f"{node}: /health is not 200"
        variant_served = self._get(node, "/variant")
        assert variant_served == variant, f"{node} serves {variant_served!r}"
        assert self.lb_status()[node] == "UP", f"{node} is not UP in the balancer"

    def _get(self, node: str, path: str) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://{self.fleet.node(node).ip}:8000{path}", timeout=5) as r:
            return str(r.read().decode().strip())

    def record(self, node: str) -> dict[str, Any]:
        out = docker("exec", node, "cat", "/var/lib/vfleet/deployed.json")
        data: dict[str, Any] = json.loads(out)
        return data

    def lock_file(self) -> str:
        return docker("exec", self.fleet.lb.name, "cat", LOCK, check=False)


FAKE = FAKE_REPO


def labelled_fake(variant: str, source: str, label: str) -> str:
    """FAKE:VARIANT, the stand-in server SOURCE with one more LABEL (key=value); its local reference."""
    local = f"{FAKE}:{variant}"
    subprocess.run(
        ["docker", "build", "--quiet", "-t", local, "-"],
        input=f"FROM {FAKE}:{source}\nLABEL {label}\n",
        text=True,
        capture_output=True,
        check=True,
        timeout=300,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )
    return local


@contextlib.contextmanager
def standin_fleet(figures: dict[str, Any], figures_file: str) -> Iterator[Ctx]:
    """A stand-in fleet of 4 nodes behind its balancer, the stand-in images pushed to its registry, nothing
    deployed. Removed (by label) at the end; FIGURES written to .cache/fleet/FIGURES_FILE."""
    from vfleet.dockerd import ensure_dockerd

    ensure_dockerd()
    name = f"t{os.getpid()}"
    t0 = time.monotonic()
    build_node_image()
    local = build_fake_images()
    try:
        fleet = testfleet.up(name, nodes=4, mirror=True)
        testfleet.write_inventory(fleet, extra_vars=STANDIN_VARS)
        # The stand-ins answer /health at once: the balancer checks them every LB_CHECK_MS (an input of this test
        # fleet, not the role's default of 2 s, which is tolerant of a busy vLLM node), so that each swap's wait for
        # the node to be UP again is one short check, not a 2-second one.
        fast_checks = {"vfleet_lb_check_interval_ms": LB_CHECK_MS}
        lb = run_playbook("lb", fleet.inventory, fast_checks, capture=True, timeout=600)
        assert lb.returncode == 0, (lb.stdout + lb.stderr)[-3000:]
        refs = {v: fleet.push(local[v]) for v in ("good-1", "good-2", "good-3", "noverify", "unhealthy", "busy")}
        figures["wall_s"]["fleet_up"] = round(time.monotonic() - t0, 1)
        yield Ctx(fleet, refs, figures)
    finally:
        testfleet.down(name)
        (cache_dir() / figures_file).write_text(json.dumps(figures, indent=2))


def ensure_on(ctx: Ctx, variant: str) -> None:
    """Every node of CTX's fleet serving VARIANT, healthy and in the pool: as it is, or after a rollout."""
    try:
        for n in ctx.names:
            ctx.assert_on(n, variant)
    except AssertionError:
        proc = ctx.cli(f"ensure_on_{variant}", "rollout", "--image", ctx.refs[variant])
        assert proc.returncode == 0, proc.stdout[-3000:]
        for n in ctx.names:
            ctx.assert_on(n, variant)
