"""Fleet rollout on a real multi-node Docker fleet: 4 Docker-in-Docker nodes and a local registry.

Every outcome is read from the nodes themselves (which image the serving container runs, /health).
The images here are light stand-in servers (busybox httpd serving /health, /metrics, /verify), as
the issue allows for the fault scenarios; boot-verify is the stand-in `GET /verify` for them. The
scenarios run in order on one fleet (module fixture): each starts from the state the previous left.
Figures (wall time per scenario, swap time per node, bytes pulled per node) go to
.cache/fleet/figures.json.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vfleet.fleet import testfleet
from vfleet.fleet.ansible import env as ansible_env
from vfleet.fleet.ansible import playbook_argv
from vfleet.fleet.docker import docker
from vfleet.fleet.images import build_fake_images, build_node_image, cache_dir

pytestmark = pytest.mark.slow

VERIFY_STANDIN = [
    sys.executable,
    "-c",
    "import sys, urllib.request; urllib.request.urlopen(sys.argv[1])",
    "{url}/verify",
]
FAST: dict[str, Any] = {
    "vfleet_node_check_promotion": False,  # the stand-in images have no boot-verify report to promote
    "vfleet_node_poll_interval": 1,
    "vfleet_node_health_timeout": 30,
    "vfleet_node_drain_timeout": 5,
    "vfleet_node_stop_timeout": 2,
    "vfleet_batch_size": 3,  # canary, then the other three in one batch (the batch test overrides it)
}
# In the inventory (group vars), not in FAST: extra vars would beat the per-host fault of the batch test.
STANDIN_VARS: dict[str, Any] = {"vfleet_node_verify_argv": VERIFY_STANDIN}
FIGURES: dict[str, Any] = {"wall_s": {}, "swap_s": {}, "pull_bytes": {}}


def flat(text: str) -> str:
    """Output with the YAML callback's line folding undone, for substring checks."""
    return " ".join(text.split())


def recap_changed(text: str) -> dict[str, int]:
    """host -> changed= count from the PLAY RECAP."""
    return {m[0]: int(m[1]) for m in re.findall(r"(?m)^(\S+)\s+: ok=\d+\s+changed=(\d+)", text)}


class Ctx:
    def __init__(self, fleet: testfleet.Fleet, refs: dict[str, str]) -> None:
        self.fleet = fleet
        self.refs = refs  # variant -> reference as the nodes see it
        self.names = [n.name for n in fleet.nodes]

    def rollout(
        self, scenario: str, image: str, playbook: str = "rollout", limit: str | None = None, **extra: Any
    ) -> subprocess.CompletedProcess[str]:
        extra_vars = {**FAST, **extra}
        if image:
            extra_vars["vfleet_image"] = image
        t0 = time.monotonic()
        proc = subprocess.run(
            playbook_argv(playbook, self.fleet.inventory, extra_vars, limit),
            env=ansible_env(),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        FIGURES["wall_s"][scenario] = round(time.monotonic() - t0, 1)
        proc.stdout += proc.stderr
        return proc

    def serving(self, node: str) -> dict[str, Any]:
        info = self.fleet.serving(node)
        assert info is not None, f"{node}: no serving container"
        return info

    def image_id(self, variant: str) -> str:
        out = docker("image", "inspect", "--format", "{{.Id}}", f"vfleet-fake:{variant}")
        return out.strip()

    def snapshot(self) -> dict[str, tuple[str, str]]:
        """node -> (container id, image id) of the serving container."""
        out = {}
        for n in self.names:
            info = self.fleet.serving(n)
            out[n] = (info["Id"], info["Image"]) if info else ("", "")
        return out

    def assert_on(self, node: str, variant: str) -> None:
        info = self.serving(node)
        assert info["Image"] == self.image_id(variant), f"{node} runs {info['Config']['Image']}, not {variant}"
        assert info["State"]["Running"], f"{node}: serving container not running"
        assert self.fleet.health(node) == 200, f"{node}: /health is not 200"
        variant_served = self._get(node, "/variant")
        assert variant_served == variant, f"{node} serves {variant_served!r}"

    def _get(self, node: str, path: str) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://{self.fleet.node(node).ip}:8000{path}", timeout=5) as r:
            return str(r.read().decode().strip())

    def record(self, node: str) -> dict[str, Any]:
        out = docker("exec", node, "cat", "/var/lib/vfleet/deployed.json")
        data: dict[str, Any] = json.loads(out)
        return data


@pytest.fixture(scope="module")
def ctx() -> Iterator[Ctx]:
    from vfleet.dockerd import ensure_dockerd

    ensure_dockerd()
    name = f"t{os.getpid()}"
    t0 = time.monotonic()
    build_node_image()
    local = build_fake_images()
    try:
        fleet = testfleet.up(name, nodes=4)
        testfleet.write_inventory(fleet, extra_vars=STANDIN_VARS)
        refs = {v: fleet.push(local[v]) for v in ("good-1", "good-2", "noverify", "unhealthy")}
        FIGURES["wall_s"]["fleet_up"] = round(time.monotonic() - t0, 1)
        yield Ctx(fleet, refs)
    finally:
        testfleet.down(name)
        for ref in local.values():
            docker("image", "rm", ref, check=False)
        out = cache_dir() / "figures.json"
        out.write_text(json.dumps(FIGURES, indent=2))


def test_fresh_deploy_then_concurrent_rerun_is_idempotent_and_locked(ctx: Ctx) -> None:
    proc = ctx.rollout("fresh_deploy", ctx.refs["good-1"])
    assert proc.returncode == 0, proc.stdout[-3000:]
    for n in ctx.names:
        ctx.assert_on(n, "good-1")
        rec = ctx.record(n)
        assert rec["image_id"] == ctx.image_id("good-1")
        assert rec["image"].startswith(ctx.refs["good-1"].rsplit(":", 1)[0] + "@sha256:")
        FIGURES["swap_s"].setdefault("fresh_deploy", {})[n] = rec["swap_seconds"]
    before = ctx.snapshot()

    # Re-run the same rollout, and while it runs start a second one: the lock refuses the second.
    extra = {**FAST, "vfleet_image": ctx.refs["good-1"]}
    t0 = time.monotonic()
    first = subprocess.Popen(
        playbook_argv("rollout", ctx.fleet.inventory, extra),
        env=ansible_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lock = ctx.fleet.dir / "locks" / f"{ctx.fleet.name}.lock"
    while not lock.exists() and first.poll() is None:
        time.sleep(0.2)
    second = ctx.rollout("concurrent_refused", ctx.refs["good-2"])
    out, _ = first.communicate(timeout=600)
    FIGURES["wall_s"]["rerun_idempotent"] = round(time.monotonic() - t0, 1)
    assert second.returncode != 0
    assert "held by a running" in flat(second.stdout), second.stdout[-2000:]
    assert first.returncode == 0, out[-3000:]
    changed = recap_changed(out)
    assert all(changed[n] == 0 for n in ctx.names), changed
    assert flat(out).count("is healthy; nothing to do") == len(ctx.names), out[-3000:]
    assert ctx.snapshot() == before, "an idempotent re-run (or the refused rollout) touched a node"
    assert not lock.exists(), "the lock outlived a successful rollout"


def test_status_reports_image_profile_health(ctx: Ctx, tmp_path: Path) -> None:
    out = tmp_path / "status.json"
    proc = ctx.rollout("status", "", playbook="status", vfleet_status_file=str(out))
    assert proc.returncode == 0, proc.stdout[-2000:]
    rows = {r["node"]: r for r in json.loads(out.read_text())}
    assert set(rows) == set(ctx.names)
    for n in ctx.names:
        assert rows[n]["image_id"] == ctx.serving(n)["Image"]
        assert rows[n]["profile"] == "tiny/cpu"
        assert rows[n]["healthy"] is True


@pytest.mark.injected_fault
def test_canary_failing_boot_verify_goes_back_and_stops(ctx: Ctx) -> None:
    before = ctx.snapshot()
    proc = ctx.rollout("canary_fails_verify", ctx.refs["noverify"])
    assert proc.returncode != 0
    assert "failed at Boot-verify" in flat(proc.stdout) and "and healthy" in flat(proc.stdout), proc.stdout[-3000:]
    canary, *rest = ctx.names
    ctx.assert_on(canary, "good-1")
    assert ctx.snapshot()[canary][0] != before[canary][0], "the canary was never swapped"
    for n in rest:
        assert ctx.snapshot()[n] == before[n], f"{n} was touched after the canary failed"


@pytest.mark.injected_fault
def test_health_timeout_rolls_the_canary_back(ctx: Ctx) -> None:
    before = ctx.snapshot()
    proc = ctx.rollout("health_timeout", ctx.refs["unhealthy"], vfleet_node_health_timeout=4)
    assert proc.returncode != 0
    assert "failed at Wait for health" in flat(proc.stdout), proc.stdout[-3000:]
    canary, *rest = ctx.names
    ctx.assert_on(canary, "good-1")
    for n in rest:
        assert ctx.snapshot()[n] == before[n]


@pytest.mark.injected_fault
def test_failure_in_second_batch_stops_the_rollout(ctx: Ctx) -> None:
    """Canary n1, then batches of one: n2 (batch 1), n3 (batch 2, boot-verify fails there), n4 never."""
    n1, n2, n3, n4 = ctx.names
    old_id = ctx.image_id("good-1")
    FIGURES["pull_bytes"]["upgrade_app_layer_only"] = {
        n: ctx.fleet.pull_bytes("vfleet-fake:good-2", old_id, n) for n in ctx.names
    }
    before = ctx.snapshot()
    fault = {"vfleet_node_verify_argv": [sys.executable, "-c", "raise SystemExit('injected boot-verify failure')"]}
    testfleet.write_inventory(ctx.fleet, extra_vars=STANDIN_VARS, host_vars={n3: fault})
    try:
        proc = ctx.rollout("second_batch_fails", ctx.refs["good-2"], vfleet_batch_size=1, vfleet_max_fail_percentage=0)
    finally:
        testfleet.write_inventory(ctx.fleet, extra_vars=STANDIN_VARS)
    assert proc.returncode != 0
    for n in (n1, n2):
        ctx.assert_on(n, "good-2")
        FIGURES["swap_s"].setdefault("upgrade", {})[n] = ctx.record(n)["swap_seconds"]
        assert ctx.record(n)["previous"]["image_id"] == old_id
    ctx.assert_on(n3, "good-1")
    assert ctx.snapshot()[n4] == before[n4], "the rollout went on past the failed batch"
    assert "injected boot-verify failure" in flat(proc.stdout)


def test_rollback_returns_a_node_to_its_previous_image(ctx: Ctx) -> None:
    n2 = ctx.names[1]
    proc = ctx.rollout("rollback_one_node", "", playbook="rollback", limit=f"localhost,{n2}")
    assert proc.returncode == 0, proc.stdout[-3000:]
    ctx.assert_on(n2, "good-1")


def test_preflight_refuses_an_image_that_is_not_promoted(ctx: Ctx, tmp_path: Path) -> None:
    """The real `vfleet promote --check` against an empty promotions file: nothing is swapped."""
    before = ctx.snapshot()
    digest_ref = ctx.record(ctx.names[1])["image"]
    registry = tmp_path / "promotions.jsonl"
    registry.write_text("")
    proc = ctx.rollout(
        "unpromoted_refused", digest_ref, vfleet_node_check_promotion=True, vfleet_node_promotions_file=str(registry)
    )
    assert proc.returncode != 0
    assert "not promoted" in flat(proc.stdout), proc.stdout[-3000:]
    assert ctx.snapshot() == before


def test_unreachable_node_stops_the_rollout_before_any_swap(ctx: Ctx) -> None:
    n4 = ctx.names[3]
    before = ctx.snapshot()
    docker("stop", "--time", "1", n4)
    proc = ctx.rollout("unreachable_node", ctx.refs["good-2"])
    assert proc.returncode != 0
    text = flat(proc.stdout)
    assert f"preflight (unreachable, unpromoted image, disk or GPUs) failed on {n4}" in text, proc.stdout[-3000:]
    assert "nothing was swapped" in text
    for n in ctx.names[:3]:
        assert ctx.snapshot()[n] == before[n]
