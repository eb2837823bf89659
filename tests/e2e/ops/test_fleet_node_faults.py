"""A node's own faults during a rollout or a fleet verify, on a real multi-node Docker fleet of stand-ins (4
Docker-in-Docker nodes, a local registry and the HAProxy balancer: tests/support/standin_fleet.py), every node on good-1
first: a drain that never reaches zero, fleet verify out of the pool, a node or its Docker daemon dying mid-drain
or mid-swap, a daemon that keeps a port after a kill, bad balancer input, and the gates that stop a run before any
swap (an image ID that moved, an unpromoted image, other serve profiles, a base the checkout does not know, an
unreachable node).

Outcomes are read from the nodes and the balancer themselves; the scenarios run in order on the stand-in fleet
that tests/e2e/ops/test_ansible_fleet.py ran on before (tests/e2e/conftest.py, `standin`). Figures go to
.cache/fleet/figures.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support.standin_fleet import FAKE, FAST, FIGURES, Ctx, ensure_on, flat, labelled_fake
from support.supply import make_key

from lab import testfleet
from lab.docker import docker
from lab.images import cache_dir
from vfleet.paths import profiles_digest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ctx(standin: Ctx) -> Ctx:
    """The stand-in fleet (tests/e2e/conftest.py) with every node on good-1, as test_ansible_fleet.py leaves it;
    rolled out there first when this module runs without it."""
    ensure_on(standin, "good-1")
    return standin


@pytest.mark.long
@pytest.mark.injected_fault
def test_a_drain_that_never_reaches_zero_leaves_the_node_serving_in_the_pool(ctx: Ctx) -> None:
    """The 'busy' stand-in reports two running requests forever (injected: a real vLLM drains)."""
    n4 = ctx.names[3]
    proc = ctx.cli("deploy_busy", "rollout", "--image", ctx.refs["busy"], "--limit", n4)
    assert proc.returncode == 0, proc.stdout[-3000:]
    before = ctx.snapshot()[n4]
    proc = ctx.cli(
        "drain_timeout", "rollout", "--image", ctx.refs["good-1"], "--limit", n4, vfleet_lb_drain_timeout_s=3
    )
    assert proc.returncode != 0
    text = flat(proc.stdout)
    assert f"{n4}: drain did not reach zero within 3 s" in text and "vLLM running 2.0" in text, proc.stdout[-3000:]
    assert "the node was not stopped" in text and "healthy and in the pool" in text
    assert ctx.snapshot()[n4] == before, "the busy node was stopped"
    assert ctx.lb_status()[n4] == "UP", "the node was left out of the pool"


@pytest.mark.long
@pytest.mark.injected_fault
def test_fleet_verify_judges_each_node_out_of_the_pool(ctx: Ctx) -> None:
    """fleet verify drains each node before it verifies it and puts it back after (issue 22, item 1):
    a node whose boot-verify fails (injected: a stand-in verify that exits 1) stays out of the pool, its
    record and the status name the run and the report; the next fleet verify names the run that held
    it, verifies it and puts it back. A node whose drain never finishes (n4 on the 'busy' stand-in,
    which reports two running requests forever) is NOT VERIFIED: put back as it was, and the run fails
    naming it. Real vLLM under client traffic: tests/e2e/ops/test_fleet_lifecycle.py."""
    n1, _, n3, n4 = ctx.names
    if ctx._get(n4, "/variant") != "busy":
        assert ctx.cli("deploy_busy_for_verify", "rollout", "--image", ctx.refs["busy"], "--limit", n4).returncode == 0
    failing = [sys.executable, "-c", "import sys; sys.exit('injected: boot-verify failed on this node')"]
    proc = ctx.cli("verify_fails_one", "verify", "--limit", n3, vfleet_node_verify_argv=failing)
    assert proc.returncode != 0, proc.stdout[-3000:]
    text = flat(proc.stdout)
    assert f"fleet verify failed on {n3}" in text and "boot-verify FAILED" in text, proc.stdout[-3000:]
    assert "stays out of the pool (MAINT)" in text and "/report.md" in text, proc.stdout[-3000:]
    assert ctx.lb_status()[n3] == "MAINT", ctx.lb_status()
    held = ctx.record(n3)["out_of_pool"]
    assert held["why"] == "failed verify" and held["report"], held
    assert ctx.record(n3)["last_verify"]["passed"] is False
    # The server's log is kept beside the report although the node goes on serving (out of the pool).
    kept = ctx.record(n3)["last_verify"]["log"]
    assert kept == f"{held['report']}/container.log" and Path(kept).is_file(), ctx.record(n3)["last_verify"]
    assert f"its whole log: {kept}" in text, proc.stdout[-3000:]
    status = flat(ctx.cli("status_after_failed_verify", "status").stdout)
    assert f"OUT OF THE POOL: failed verify (run {held['run_id']})" in status, status[-3000:]
    assert not ctx.lock_file(), "a failed verify left the fleet lock"
    # Every node again, at most 2 out at once: n3 comes back, n4 cannot be drained.
    proc = ctx.cli("verify_all", "verify", "--max-out-of-pool", "2", vfleet_lb_drain_timeout_s=3)
    assert proc.returncode != 0, proc.stdout[-3000:]
    text = flat(proc.stdout)
    assert f"held by failed verify run {held['run_id']}" in text, proc.stdout[-3000:]
    assert f"fleet verify failed on {n4}:" in text and f"{n4}: NOT VERIFIED: it could not leave the pool" in text
    assert text.count("boot-verify passed out of the pool") == 3, proc.stdout[-3000:]
    assert all(ctx.lb_status()[n] == "UP" for n in ctx.names), ctx.lb_status()
    for n in (n1, n3):
        rec = ctx.record(n)
        assert not rec.get("out_of_pool") and rec["last_verify"]["passed"] is True, rec
    assert not ctx.record(n4).get("out_of_pool"), ctx.record(n4)


@pytest.mark.long
@pytest.mark.injected_fault
def test_a_node_that_dies_mid_drain_fails_the_run_and_says_so(ctx: Ctx) -> None:
    """n4 still reports busy (injected), so its drain waits; the node (the whole DinD host) is then
    stopped. Afterwards it comes back and the next rollout brings it to a healthy image."""
    n4 = ctx.names[3]
    argv = [sys.executable, "-m", "vfleet", "fleet", "rollout", "--inventory", str(ctx.fleet.inventory)]
    argv += ["--image", ctx.refs["good-1"], "--limit", n4]
    for k, v in {**FAST, "vfleet_lb_drain_timeout_s": 120}.items():
        argv += ["-e", f"{k}={json.dumps(v)}"]
    t0 = time.monotonic()
    bg = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while ctx.lb_status()[n4] != "DRAIN" and time.monotonic() < deadline:
        time.sleep(0.3)
    assert ctx.lb_status()[n4] == "DRAIN", "the drain never started"
    docker("stop", "--time", "1", n4)
    out, _ = bg.communicate(timeout=300)
    FIGURES["wall_s"]["node_dies_mid_drain"] = round(time.monotonic() - t0, 1)
    assert bg.returncode != 0
    text = flat(out)
    assert f"{n4}: the node stopped answering during the drain" in text, out[-3000:]
    assert "it is out of the pool for new requests" in text
    assert ctx.lb_status()[n4] != "UP"
    docker("start", n4)
    testfleet.wait_dockerd(n4)
    proc = ctx.cli("recover_dead_node", "rollout", "--image", ctx.refs["good-1"], "--limit", n4)
    assert proc.returncode == 0, proc.stdout[-3000:]
    ctx.assert_on(n4, "good-1")


def _wedge_port(ctx: Ctx, node: str, ref: str, port: int = 8000, tries: int = 40) -> int:
    """Kill NODE (the whole Docker-in-Docker host) while its dockerd starts a container that
    publishes PORT, until the restarted daemon refuses PORT although no container publishes it: the
    state CI hit when the lifecycle test's canary was killed between `docker run`'s create and start.
    The fault is the real daemon's; only the moment of the kill is searched for (the window is a few
    tenths of a second after `docker run` begins). Returns the number of kills it took."""
    argv = ["docker", "exec", node, "docker", "run", "--detach", "--name", "vfleet-serve", "-p", f"{port}:8000", ref]
    probe = [
        "docker",
        "exec",
        node,
        "docker",
        "run",
        "--detach",
        "--name",
        "vfleet-wedge-probe",
        "-p",
        f"{port}:8000",
        ref,
    ]
    delay = 0.15
    for attempt in range(1, tries + 1):
        ctx.fleet.node_docker(node, "rm", "--force", "vfleet-serve", check=False)
        run = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        docker("kill", node)
        run.wait(timeout=60)
        docker("start", node)
        testfleet.wait_dockerd(node)
        state = ctx.fleet.node_docker(
            node, "container", "inspect", "--format", "{{.State.Status}}", "vfleet-serve", check=False
        ).strip()
        ctx.fleet.node_docker(node, "rm", "--force", "vfleet-serve", check=False)
        if state == "created":
            p = subprocess.run(probe, capture_output=True, text=True, timeout=120, check=False)
            ctx.fleet.node_docker(node, "rm", "--force", "vfleet-wedge-probe", check=False)
            if p.returncode != 0 and "port is already allocated" in p.stderr:
                return attempt
            delay += 0.02 if attempt % 2 else -0.02
        elif state:  # already started: kill earlier
            delay = max(0.02, delay - 0.04)
        else:  # not created yet: kill later
            delay += 0.05
    raise AssertionError(f"{node}: no kill in {tries} left the daemon holding port {port}")


@pytest.mark.long
@pytest.mark.injected_fault
@pytest.mark.injected_fault
def test_a_node_whose_daemon_dies_mid_swap_is_named_and_a_rerun_finishes_it(ctx: Ctx) -> None:
    """n4's Docker daemon (the whole Docker-in-Docker node) is killed while the swap waits for the new
    container's /health: the run says in words that the node's daemon went away, what to run next, and that
    the node is out of the pool; once the node is back, the same rollout finishes the swap (issue 33)."""
    n4 = ctx.names[3]
    argv = [sys.executable, "-m", "vfleet", "fleet", "rollout", "--inventory", str(ctx.fleet.inventory)]
    argv += ["--image", ctx.refs["unhealthy"], "--limit", n4]
    for k, v in {**FAST, "vfleet_node_health_timeout": 120}.items():
        argv += ["-e", f"{k}={json.dumps(v)}"]
    bg = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    unhealthy, deadline = ctx.image_id("unhealthy"), time.monotonic() + 120
    while time.monotonic() < deadline and (ctx.fleet.serving(n4) or {}).get("Image") != unhealthy:
        time.sleep(0.3)
    assert (ctx.fleet.serving(n4) or {}).get("Image") == unhealthy, "the swap never started the new container"
    docker("kill", n4)
    try:
        out, _ = bg.communicate(timeout=300)
        (cache_dir() / "scenario-logs" / "daemon_gone.log").write_text(out)
        assert bg.returncode != 0, out[-3000:]
        text = flat(out)
        assert "the Docker daemon of the node went away during this step" in text, out[-6000:]
        assert "systemctl start docker" in text and "run the same rollout again" in text, out[-3000:]
        assert "OUT OF THE POOL" in text, out[-3000:]
        assert ctx.lb_status()[n4] != "UP"
    finally:
        docker("start", n4)
        testfleet.wait_dockerd(n4)
    proc = ctx.cli("daemon_gone_rerun", "rollout", "--image", ctx.refs["good-1"], "--limit", n4)
    assert proc.returncode == 0, proc.stdout[-3000:]
    ctx.assert_on(n4, "good-1")


@pytest.mark.long
def test_a_node_killed_while_starting_its_container_names_the_daemon_restart(ctx: Ctx) -> None:
    """A node's dockerd killed between a container's create and start keeps the host port allocated
    after it comes back, with no container publishing it; the swap cannot start the serving container
    there, and going back to the previous image cannot either. The run fails naming the fix (restart
    the daemon), the node stays out of the pool, and after a daemon restart the same rollout brings it
    back. (CI's run of stop 18 failed the lifecycle test's recovery on exactly this.)"""
    n4 = ctx.names[3]
    kills = _wedge_port(ctx, n4, ctx.refs["good-1"])
    FIGURES["port_wedge_kills"] = kills
    proc = ctx.cli("stale_port", "rollout", "--image", ctx.refs["good-1"], "--limit", n4)
    assert proc.returncode != 0, proc.stdout[-3000:]
    text = flat(proc.stdout)
    assert "holds host port 8000 although no container publishes it" in text, proc.stdout[-3000:]
    assert "restart the Docker daemon on the node" in text
    assert ctx.lb_status()[n4] != "UP"
    assert ctx.fleet.serving(n4) is None, "the container that could not start was left behind"
    # The operator restarts the daemon (here: the node, whose main process it is) and runs it again.
    docker("restart", "--time", "5", n4)
    testfleet.wait_dockerd(n4)
    proc = ctx.cli("stale_port_after_restart", "rollout", "--image", ctx.refs["good-1"], "--limit", n4)
    assert proc.returncode == 0, proc.stdout[-3000:]
    ctx.assert_on(n4, "good-1")


def test_bad_balancer_input_is_named_and_nothing_is_swapped(ctx: Ctx) -> None:
    before = ctx.snapshot()
    proc = ctx.cli(
        "missing_socket", "rollout", "--image", ctx.refs["good-2"], vfleet_lb_socket="/run/haproxy/nope.sock"
    )
    assert proc.returncode != 0
    assert "HAProxy runtime socket /run/haproxy/nope.sock does not exist" in flat(proc.stdout), proc.stdout[-3000:]
    proc = ctx.cli("unknown_backend", "rollout", "--image", ctx.refs["good-2"], vfleet_lb_backend="nosuch")
    assert proc.returncode != 0
    assert "HAProxy has no backend 'nosuch'" in flat(proc.stdout), proc.stdout[-3000:]
    # A node in the inventory that the balancer does not know (lb.yml was not run after adding it).
    inv = ctx.fleet.inventory.read_text()
    ghost = "vfleet-ghost-node"
    doc = yaml.safe_load(inv)
    # A container of this fleet (node 1's, so that the test-fleet mark still holds) under a name HAProxy lacks.
    doc["all"]["children"]["vfleet_nodes"]["children"]["cpu_x86"]["hosts"][ghost] = {"ansible_host": ctx.names[0]}
    ctx.fleet.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        proc = ctx.cli("node_unknown_to_balancer", "rollout", "--image", ctx.refs["good-2"], "--limit", ghost)
    finally:
        ctx.fleet.inventory.write_text(inv)
    assert proc.returncode != 0
    assert f"has no server {ghost}" in flat(proc.stdout), proc.stdout[-3000:]
    assert ctx.snapshot() == before


@pytest.mark.injected_fault
def test_nodes_that_pulled_another_image_than_the_gate_verified_stop_before_a_swap(ctx: Ctx) -> None:
    """Injected fault: a tag that moves between the supply-chain gate and the pull cannot be timed here,
    so the gate's fact is overridden (-e beats set_fact) with an image ID no node will pull. The check
    after the pull must stop the run before the canary."""
    before = ctx.snapshot()
    other = "sha256:" + "3" * 64
    proc = ctx.cli("gate_id_moved", "rollout", "--image", ctx.refs["good-2"], vfleet_node__verified_id=other)
    assert proc.returncode != 0
    text = flat(proc.stdout)
    # The run resolved the tag once (roles/vfleet/tasks/resolve.yml) and names the digest from then on.
    repo = ctx.refs["good-2"].rsplit(":", 1)[0]
    assert f"{ctx.refs['good-2']} is {repo}@sha256:" in text, text[-3000:]
    assert f"but the supply-chain gate verified {other} for {repo}@sha256:" in text and "the tag moved" in text, text[
        -3000:
    ]
    assert "No container has been swapped" in text
    assert ctx.snapshot() == before
    # Injected fault (issue 21): the gate skipped (--allow-unsigned, via FAST) while the switch check's fact
    # says no switch skipped it. An empty verified ID is then no pass: before, any empty one passed.
    proc = ctx.cli("gate_id_empty", "rollout", "--image", ctx.refs["good-2"], vfleet_node__supply_unchecked=False)
    assert proc.returncode != 0
    text = flat(proc.stdout)
    assert f"the supply-chain gate verified no image ID for {repo}@sha256:" in text, text[-3000:]
    assert "and no test-fleet switch" in text, text[-3000:]
    assert "No container has been swapped" in text
    assert ctx.snapshot() == before


def test_preflight_refuses_an_image_that_is_not_promoted(ctx: Ctx, tmp_path: Path) -> None:
    """The real `vfleet promote --check`, with the rollout's --trusted-key threaded to it: against an empty
    promotions file, then against a hand-written line naming a report that does not exist (the line alone
    proves nothing). Nothing is swapped."""
    before = ctx.snapshot()
    digest_ref = ctx.record(ctx.names[1])["image"]
    digest = digest_ref.rpartition("@")[2]
    _, pub = make_key(tmp_path, "controller")
    registry = tmp_path / "promotions.jsonl"
    registry.write_text("")
    check = {"vfleet_node_check_promotion": True, "vfleet_node_promotions_file": str(registry)}
    proc = ctx.cli("unpromoted_refused", "rollout", "--image", digest_ref, "--trusted-key", f"verify,ab={pub}", **check)
    assert proc.returncode != 0
    assert "was never promoted" in flat(proc.stdout), proc.stdout[-3000:]
    assert ctx.snapshot() == before
    forged = {"digest": digest, "profile": "tiny/cpu", "promoted_at": "2026-12-02T00:00:00+00:00",
              "report": str(tmp_path / "nowhere" / "report.json")}  # fmt: skip
    registry.write_text(json.dumps(forged) + "\n")
    proc = ctx.cli(
        "hand_written_line_refused", "rollout", "--image", digest_ref, "--trusted-key", f"verify,ab={pub}", **check
    )
    assert proc.returncode != 0
    text = flat(proc.stdout)
    # "not a readable report" comes only after the key was accepted: no key would have stopped it first.
    assert "not promoted" in text and "not a readable report" in text, proc.stdout[-3000:]
    assert ctx.snapshot() == before


def test_rollout_refuses_an_image_of_other_serve_profiles_before_any_node_is_touched(ctx: Ctx) -> None:
    """The image's org.vfleet.profiles.digest label must be the controller's serve_configs digest (the
    copy it renders and boot-verifies with); otherwise the run stops after the pull, before the canary.
    With the right label, every node's container is started with that digest, which the real
    entrypoint checks against its own copy (tests/unit/build/test_image_serve.py; the lifecycle test runs it)."""
    ours = profiles_digest()
    other = "sha256:" + "0" * 64
    refs = {}
    for variant, digest in (("profiles-other", other), ("profiles-ours", ours)):
        refs[variant] = ctx.fleet.push(labelled_fake(variant, "good-2", f"org.vfleet.profiles.digest={digest}"))
    before = ctx.snapshot()
    proc = ctx.cli("profiles_other", "rollout", "--image", refs["profiles-other"], vfleet_node_check_profiles=True)
    assert proc.returncode != 0
    text = flat(proc.stdout)
    assert f"carries serve profiles {other}, but this controller's checkout has {ours}" in text, proc.stdout[-3000:]
    assert "No node has been touched" in text
    assert ctx.snapshot() == before

    proc = ctx.cli("profiles_ours", "rollout", "--image", refs["profiles-ours"], vfleet_node_check_profiles=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    want = docker("image", "inspect", "--format", "{{.Id}}", f"{FAKE}:profiles-ours").strip()
    for n in ctx.names:
        info = ctx.serving(n)
        assert info["Image"] == want and ctx.fleet.health(n) == 200, n
        assert f"VFLEET_PROFILES_DIGEST={ours}" in info["Config"]["Env"], info["Config"]["Env"]


@pytest.mark.long
def test_a_rollout_across_vllm_bases_passes_the_gate_and_the_canary_and_goes_back(ctx: Ctx, tmp_path: Path) -> None:
    """Issue 24, item 5: from an image of vLLM 0.30.0 to one of 0.34.0 and back, with the supply-chain gate
    on. No machine here boots vLLM 0.34.0, and the servers of this fleet are stand-ins in every scenario:
    each image here is the stand-in server with the label `org.vfleet.vllm.version` of its base, signed
    as a build of that base (provenance naming the base in its build label VLLM_VERSION, with that base's
    upstream image and series; test_supply_policy.signed_record). The gate checks each against its base,
    the canary is boot-verified, and every node ends on the base. An image signed as vLLM 0.99.0, a base
    this checkout's versions.json does not know, stops at the gate before any node pulls it."""
    from support.supply_records import CLEAN, signed_record

    from vfleet.supply.audit import _summarise
    from vfleet.supply.identity import KIND_MANIFEST, Identity, registry_manifest_digest, split_ref

    refs: dict[str, str] = {}
    for base in ("0.30.0", "0.34.0", "0.99.0"):
        local = labelled_fake(f"base-{base}", "good-1", f"org.vfleet.vllm.version={base}")
        refs[base] = ctx.fleet.push(local)
        host, path, _, _ = split_ref(refs[base])
        digest = registry_manifest_digest(refs[base])
        image_id = docker("image", "inspect", "--format", "{{.Id}}", local).strip()
        ident = Identity(f"{host}/{path}@{digest}", image_id, f"{host}/{path}", digest, KIND_MANIFEST)
        signed_record(tmp_path, _summarise({"service": "pypi"}, CLEAN), base, ident=ident)
    gate = ("--trusted-key", f"provenance={tmp_path / 'release.pub'}", "--supply-store", str(tmp_path / "store"))

    for scenario, base in (("across_bases_to_0.34", "0.34.0"), ("across_bases_back_to_0.30", "0.30.0")):
        proc = ctx.cli(scenario, "rollout", "--image", refs[base], *gate, vfleet_node_allow_unsigned=False)
        assert proc.returncode == 0, proc.stdout[-3000:]
        text = flat(proc.stdout)
        assert "NOT CHECKED: supply chain" not in text, text[-3000:]
        assert "SBOM and materials match" in text, text[-3000:]
        assert "Boot-verify the node with vfleet verify" in text, text[-3000:]  # the canary's, then the batch's
        want = docker("image", "inspect", "--format", "{{.Id}}", f"{FAKE}:base-{base}").strip()
        for n in ctx.names:
            info = ctx.serving(n)
            assert info["Image"] == want and ctx.fleet.health(n) == 200, n
            assert info["Config"]["Labels"]["org.vfleet.vllm.version"] == base, n

    before = ctx.snapshot()
    unknown = refs["0.99.0"]
    proc = ctx.cli("across_bases_unknown", "rollout", "--image", unknown, *gate, vfleet_node_allow_unsigned=False)
    assert proc.returncode != 0
    text = flat(proc.stdout)
    assert "built on vLLM 0.99.0, a base this checkout's versions.json does not know" in text, text[-3000:]
    assert ctx.snapshot() == before


def test_unreachable_node_stops_the_rollout_before_any_swap(ctx: Ctx) -> None:
    n4 = ctx.names[3]
    before = ctx.snapshot()
    docker("stop", "--time", "1", n4)
    try:
        proc = ctx.cli("unreachable_node", "rollout", "--image", ctx.refs["good-2"])
    finally:
        docker("start", n4)
    assert proc.returncode != 0
    text = flat(proc.stdout)
    what = "preflight (unreachable, unpromoted or unverified image, disk or GPUs)"
    assert f"{what} failed on {n4}" in text, proc.stdout[-3000:]
    assert "nothing was swapped" in text
    for n in ctx.names[:3]:
        assert ctx.snapshot()[n] == before[n]
