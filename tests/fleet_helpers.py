"""Helpers of the light fleet tests: an inventory whose one node is this machine (a local connection,
state in a tmp directory, no balancer), with or without the test-fleet mark, and the real rollout.yml
run on it through `vfleet fleet` or through ansible-playbook itself. No Docker container is started:
a run stops before the pull, or at the free-disk check at the latest (the node needs 200 GB)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from vfleet.fleet.ansible import env as ansible_env
from vfleet.fleet.ansible import playbook_argv
from vfleet.fleet.inventory import TEST_FLEET_GROUP

#: An address nothing listens on: the supply-chain gate cannot tie the reference to a digest.
NOWHERE = "127.0.0.1:9/vfleet/nowhere@sha256:" + "ab" * 32


def local_inventory(
    tmp: Path, *, test_fleet: bool = False, lock_vars: dict[str, Any] | None = None, **node_vars: Any
) -> Path:
    """One node, gate-node, profile tiny/cpu; with TEST_FLEET the group `vfleet fleet up` writes. The
    fleet lock is on localhost (vfleet_lock_host), unless LOCK_VARS (all's vars) say otherwise."""
    lock_vars = lock_vars or {}
    inv = tmp / "inventory.yml"
    node = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "vfleet_node_state_dir": str(tmp / "state"),
        "vfleet_node_env_file": str(tmp / "state" / "secrets.env"),
        "vfleet_node_model_dir": str(tmp / "models"),
        "vfleet_node_verify_out": str(tmp / "verify-out"),
        **node_vars,
    }
    children: dict[str, Any] = {
        "vfleet_nodes": {
            "vars": node,
            "children": {"cpu_x86": {"vars": {"vfleet_node_profile": "tiny/cpu"}, "hosts": {"gate-node": {}}}},
        }
    }
    if test_fleet:
        children[TEST_FLEET_GROUP] = {"children": {"vfleet_nodes": {}}}
    doc = {
        "all": {
            # No balancer, so the lock needs a host: this controller, the one machine these runs start on.
            "vars": {
                "vfleet_fleet_name": "gate",
                "vfleet_lb_kind": "none",
                "vfleet_lock_path": str(tmp / "lock.json"),
                "vfleet_lock_host": "localhost",
                **lock_vars,
            },
            "children": children,
        }
    }
    inv.write_text(yaml.safe_dump(doc))
    return inv


def flat(text: str) -> str:
    """Output with the YAML callback's line folding undone, for substring checks."""
    return " ".join(text.split())


def fleet(inv: Path, action: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`vfleet fleet ACTION --inventory INV ARGS`; stdout holds both streams, flattened."""
    argv = [sys.executable, "-m", "vfleet", "fleet", action, "--inventory", str(inv), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    proc.stdout = flat(proc.stdout + proc.stderr)
    return proc


def rollout(inv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return fleet(inv, "rollout", "--image", NOWHERE, *args)


def playbook(inv: Path, name: str, extra: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """ansible-playbook NAME.yml run directly, as an operator may, with the same settings as the CLI."""
    proc = subprocess.run(
        playbook_argv(name, inv, extra), env=ansible_env(), capture_output=True, text=True, timeout=300, check=False
    )
    proc.stdout = flat(proc.stdout + proc.stderr)
    return proc


def pulled(out: str) -> bool:
    return "Pull and inspect the image" in out
