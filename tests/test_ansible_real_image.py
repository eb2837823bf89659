"""Fresh deploy and upgrade of the REAL vfleet CPU image on a 3-node Docker-in-Docker fleet, with the
real boot-verify (`vfleet verify`, full suite, server log copied from the node) on every node.

The heaviest fleet test (about 3.7 GB pushed and pulled per node, six vLLM boots): one test only.
The upgrade is the same image plus one layer that changes the tiny profile file, as a
profile-only release would; the bytes each node pulls for it are recorded, with the wall time and
the swap time (stop -> healthy) per node, in .cache/fleet/figures-real.json.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from vfleet import PACKAGE_DIR, tinymodel
from vfleet.fleet import testfleet
from vfleet.fleet.ansible import env as ansible_env
from vfleet.fleet.ansible import playbook_argv
from vfleet.fleet.docker import docker, docker_bin, image_exists
from vfleet.fleet.images import build_node_image, cache_dir

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("VFLEET_SKIP_REAL_IMAGE_FLEET") == "1",
        reason="VFLEET_SKIP_REAL_IMAGE_FLEET=1: the real-image rollout (about 9 min on 2 cores) is skipped",
    ),
]
UPGRADE = "vfleet-cpu-fleet-upgrade:profile-only"
API_KEY = secrets.token_hex(16)


def _rollout(fleet: testfleet.Fleet, image: str, out: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    extra: dict[str, Any] = {
        "vfleet_image": image,
        "vfleet_node_check_promotion": False,
        "vfleet_node_poll_interval": 3,
        "vfleet_node_health_timeout": 420,
        "vfleet_node_verify_out": str(out),
        "vfleet_batch_size": 2,
        # The image refuses to serve without an API key: it travels in the node's env file (no_log)
        # and to boot-verify through the environment.
        "vfleet_node_api_key": API_KEY,
    }
    t0 = time.monotonic()
    proc = subprocess.run(
        playbook_argv("rollout", fleet.inventory, extra),
        env=ansible_env(),
        text=True,
        capture_output=True,
        timeout=1800,
        check=False,
    )
    return proc, round(time.monotonic() - t0, 1)


def _reports_pass(out: Path, nodes: list[str]) -> None:
    for n in nodes:
        report = json.loads((out / n / "report.json").read_text())
        assert report["passed"] is True, f"{n}: boot-verify report does not pass: {report.get('counts')}"


def test_fresh_deploy_and_profile_only_upgrade_of_the_real_cpu_image(tmp_path: Path) -> None:
    from vfleet.dockerd import ensure_dockerd
    from vfleet.images import image_ref

    ensure_dockerd()
    ref = image_ref("cpu")
    if not image_exists(ref):
        from vfleet.images import build_image

        build_image("cpu")
    model = tinymodel.build()
    build_node_image()
    figures: dict[str, Any] = {"wall_s": {}, "swap_s": {}, "pull_bytes": {}}
    name = f"r{os.getpid()}"
    with tempfile.TemporaryDirectory(dir=cache_dir()) as ctx:
        profile = Path(ctx) / "model.yaml"
        profile.write_text(
            (PACKAGE_DIR.parent / "serve_configs/models/tiny/model.yaml")
            .read_text()
            .replace("description: ", "description: (fleet upgrade test) ", 1)
        )
        (Path(ctx) / "Dockerfile").write_text(
            f"FROM {ref}\nCOPY model.yaml /opt/vfleet/serve_configs/models/tiny/model.yaml\n"
            "LABEL org.vfleet.role=fleet-test-upgrade\n"
        )
        subprocess.run(
            [docker_bin(), "build", "--quiet", "-t", UPGRADE, ctx],
            check=True,
            capture_output=True,
            timeout=900,
            env={**os.environ, "DOCKER_BUILDKIT": "0"},
        )
    try:
        t0 = time.monotonic()
        fleet = testfleet.up(name, nodes=3)
        for n in fleet.nodes:
            docker("exec", n.name, "mkdir", "-p", "/srv/models")
            docker("cp", f"{model}/.", f"{n.name}:/srv/models")
        first = fleet.push(ref)
        second = fleet.push(UPGRADE)
        figures["wall_s"]["setup_fleet_push"] = round(time.monotonic() - t0, 1)
        names = [n.name for n in fleet.nodes]
        ids = {r: docker("image", "inspect", "--format", "{{.Id}}", r).strip() for r in (ref, UPGRADE)}

        proc, figures["wall_s"]["fresh_deploy"] = _rollout(fleet, first, tmp_path / "fresh")
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        for n in names:
            info = fleet.serving(n)
            assert info is not None and info["Image"] == ids[ref], f"{n} does not run {ref}"
            assert fleet.health(n) == 200
        _reports_pass(tmp_path / "fresh", names)

        figures["pull_bytes"]["profile_only_upgrade"] = {
            n: fleet.pull_bytes(second.split("/", 1)[1], ids[ref], n) for n in names
        }
        proc, figures["wall_s"]["upgrade"] = _rollout(fleet, second, tmp_path / "upgrade")
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        for n in names:
            info = fleet.serving(n)
            assert info is not None and info["Image"] == ids[UPGRADE], f"{n} does not run the upgrade"
            assert fleet.health(n) == 200
            rec = json.loads(docker("exec", n, "cat", "/var/lib/vfleet/deployed.json"))
            assert rec["previous"]["image_id"] == ids[ref]
            figures["swap_s"][n] = rec["swap_seconds"]
        _reports_pass(tmp_path / "upgrade", names)
        for n in names:
            assert figures["pull_bytes"]["profile_only_upgrade"][n] < 1_000_000, figures["pull_bytes"]
    finally:
        testfleet.down(name)
        docker("image", "rm", UPGRADE, check=False)
        (cache_dir() / "figures-real.json").write_text(json.dumps(figures, indent=2))
