"""Where the fleet lock lives and what a refusal says about its holder (ansible/roles/vfleet/tasks/plan.yml,
lock.yml), on real rollout.yml runs through `vfleet fleet rollout` whose one node is this machine (a local
connection, no balancer: tests/fleet_helpers.py). The lock never lives on a node, since a swapped or lost
node would take the lock with it or block every later run; with no balancer and no lock host the run is
refused naming the fix. A lock held by another run is refused, and the refusal says whether its holder is
alive where this controller can tell (a holder of this controller, by its pid). The balancer-hosted lock,
a concurrent second rollout and --break-lock run on the Docker fleet (tests/e2e/test_ansible_fleet.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fleet_helpers import local_inventory, pulled, rollout

pytestmark = pytest.mark.slow  # ansible-playbook runs, about 10 s each

OTHER_RUN = "20261201T000000Z-4711"


def _inventory(tmp: Path, **lock_vars: str) -> Path:
    """The one-node test-fleet inventory (promotion off: the unpromoted reference would stop the run first)."""
    return local_inventory(tmp, test_fleet=True, vfleet_node_check_promotion=False, lock_vars=lock_vars)


def _refused_before_the_pull(tmp: Path, inv: Path) -> str:
    proc = rollout(inv, "--supply-store", str(tmp / "store"))
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert not pulled(proc.stdout), proc.stdout[-3000:]
    return proc.stdout


def test_no_balancer_and_no_lock_host_is_refused_naming_the_fix(tmp_path: Path) -> None:
    out = _refused_before_the_pull(tmp_path, _inventory(tmp_path, vfleet_lock_host=""))
    assert "the fleet lock has no host" in out, out[-3000:]
    assert "as the group vfleet_lock (or vfleet_lock_host: HOST)" in out
    assert "vfleet_lock_host: localhost is safe only when every rollout and rollback of this fleet starts" in out
    assert "TASK [vfleet : Take the fleet lock]" not in out
    assert not (tmp_path / "lock.json").exists()


def test_a_lock_host_among_the_nodes_is_refused(tmp_path: Path) -> None:
    out = _refused_before_the_pull(tmp_path, _inventory(tmp_path, vfleet_lock_host="gate-node"))
    assert "the fleet lock host gate-node is a node this fleet swaps (in vfleet_nodes, and in this run)" in out, out[
        -3000:
    ]
    assert "TASK [vfleet : Take the fleet lock]" not in out
    assert not (tmp_path / "lock.json").exists()


def _with_lock_group(inv: Path) -> None:
    """Move the lock to the group vfleet_lock: a host of its own (a local connection here), in the mark."""
    doc = yaml.safe_load(inv.read_text())
    doc["all"]["vars"]["vfleet_lock_host"] = ""
    doc["all"]["children"]["vfleet_lock"] = {
        "hosts": {"lock-host": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}
    }
    doc["all"]["children"]["vfleet_test_fleet"]["children"]["vfleet_lock"] = {}  # the mark holds every host
    inv.write_text(yaml.safe_dump(doc))


@pytest.mark.parametrize("holder", ["dead", "alive", "other-controller"])
def test_a_held_lock_is_refused_saying_whether_its_holder_is_alive(tmp_path: Path, holder: str) -> None:
    inv = _inventory(tmp_path)
    _with_lock_group(inv)
    here = subprocess.run(["hostname"], capture_output=True, text=True, check=True).stdout.strip()
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        if holder == "dead":
            sleeper.kill()
            sleeper.wait()
        record = {
            "run_id": OTHER_RUN,
            "playbook": "rollout of reg.example/x@sha256:feed",
            "user": "ops",
            "controller": "ctl-b.example" if holder == "other-controller" else here,
            "pid": str(sleeper.pid),
        }
        (tmp_path / "lock.json").write_text(json.dumps(record))
        out = _refused_before_the_pull(tmp_path, inv)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert "fleet lock on lock-host" in out, out[-3000:]
    assert f"is held by rollout of reg.example/x@sha256:feed run {OTHER_RUN} of ops" in out, out[-3000:]
    expect = {
        "dead": f"Its holder is dead: pid {sleeper.pid} no longer runs on this controller ({here}), so run {OTHER_RUN} "
        "ended without releasing the lock; take it over with --break-lock",
        "alive": f"Its holder is alive: pid {sleeper.pid} (sleep) still runs on this controller ({here}); wait for it",
        "other-controller": "Whether its holder is alive cannot be told here: it ran on controller ctl-b.example",
    }[holder]
    assert expect in out, out[-3000:]
    assert json.loads((tmp_path / "lock.json").read_text())["run_id"] == OTHER_RUN, "a refused run touched the lock"
