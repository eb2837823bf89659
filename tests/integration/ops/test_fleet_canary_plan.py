"""One canary per platform (ansible/roles/vfleet/tasks/plan.yml): in a run over nodes of several
platforms (the PLATFORM of each node's vfleet_node_profile MODEL/PLATFORM), the first node of each
platform is a canary, swapped and boot-verified one at a time before any batch, so that no platform
meets the image first in a full batch. The plan is read from a real `vfleet fleet rollout` run on
local nodes (tests/support/fleet.py) that stop at the fleet lock, held by another controller,
right after the plan is printed: nothing is pulled."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.fleet import LOCK, local_inventory, pulled, rollout

pytestmark = pytest.mark.slow  # ansible-playbook runs, a few seconds each

#: Nodes in inventory order, with their (production) profiles: b200, h200 and mi355x, interleaved.
MIXED = {
    "b200-1": "glm-5.3-flash/b200",
    "b200-2": "kimi-k3/b200",
    "h200-1": "glm-5.3-flash/h200",
    "b200-3": "glm-5.3-flash/b200",
    "h200-2": "glm-5.3-flash/h200",
    "mi-1": "kimi-k3/mi355x",
}


def _inventory(tmp: Path, nodes: dict[str, str]) -> Path:
    """The inventory of tests/support/fleet.py with NODES (name: profile) as the nodes, and the lock held by a
    run of another controller, so that the run stops at the lock."""
    inv = local_inventory(tmp)
    doc = yaml.safe_load(inv.read_text())
    group = doc["all"]["children"]["vfleet_nodes"]
    group.pop("children")
    group["hosts"] = {name: {"vfleet_node_profile": profile} for name, profile in nodes.items()}
    inv.write_text(yaml.safe_dump(doc, sort_keys=False))
    other = {"run_id": "x", "playbook": "rollout of reg.example/x@sha256:feed", "controller": "ctl-b.example"}
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    LOCK.write_text(json.dumps(other))
    return inv


@pytest.fixture(autouse=True)
def _free_lock() -> Iterator[None]:
    yield
    LOCK.unlink(missing_ok=True)


def test_a_mixed_run_has_one_canary_per_platform_before_any_batch(tmp_path: Path) -> None:
    """Six nodes of three platforms at 2 per batch: the first node of each platform is a canary, the rest
    go in batches (rollback.yml makes the same plan; one platform keeps one canary, as
    tests/e2e/ops/test_ansible_fleet.py checks: `canary n1; batch 1: n2, n3; batch 2: n4`)."""
    proc = rollout(_inventory(tmp_path, MIXED), "--batch-size", "2")
    out = proc.stdout
    assert proc.returncode != 0 and "is held by rollout of reg.example/x@sha256:feed" in out, out[-3000:]
    assert not pulled(out)
    plan = "6 node(s) of vfleet_nodes; canary b200-1 (b200), h200-1 (h200), mi-1 (mi355x); batch 1: b200-2, b200-3; "
    plan += "batch 2: h200-2;"
    assert plan in out, out[-3000:]
