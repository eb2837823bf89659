"""Helpers of the light fleet tests: an inventory whose one node is this machine (a local connection,
state in a tmp directory, no balancer), and the real rollout.yml run on it through `vfleet fleet` or
through ansible-playbook itself. No Docker container is started: a run stops before the pull, or at the
free-disk check at the latest (the node needs 200 GB).

Such an inventory is never a test fleet's (its node is no container `make fleet-up` started), so no
test-fleet switch or override is honoured on it, and its node serves a production profile (PRODUCTION)
unless a test is about the refusal of one that is not. With CLAIMED it carries the group
vfleet_test_fleet, added by hand: the claim a production inventory could make, which must not count.
The fleet lock is the role's own file (LOCK) on this machine: its path is no input."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from vfleet.fleet.ansible import env as ansible_env
from vfleet.fleet.ansible import playbook_argv, role_defaults
from vfleet.fleet.mark import TEST_FLEET_GROUP

#: An address nothing listens on: the supply-chain gate cannot tie the reference to a digest.
NOWHERE = "127.0.0.1:9/vfleet/nowhere@sha256:" + "ab" * 32
#: A production profile of the catalog (it renders anywhere; no run here gets as far as its GPUs).
PRODUCTION = "glm-5.3-flash/b200"
#: The fleet lock on its host (here localhost): the role's one path, no input.
LOCK = Path(role_defaults("vfleet")["vfleet_lock_path"])


def local_inventory(
    tmp: Path,
    *,
    claimed: bool = False,
    profile: str = PRODUCTION,
    lock_vars: dict[str, Any] | None = None,
    **node_vars: Any,
) -> Path:
    """One node, gate-node, serving PROFILE; with CLAIMED the group vfleet_test_fleet added by hand (no
    mark: the node is no test-fleet container). The fleet lock is on localhost (vfleet_lock_host), unless
    LOCK_VARS (all's vars) say otherwise."""
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
            "children": {"cpu_x86": {"vars": {"vfleet_node_profile": profile}, "hosts": {"gate-node": {}}}},
        }
    }
    if claimed:
        children[TEST_FLEET_GROUP] = {"children": {"vfleet_nodes": {}}}
    doc = {
        "all": {
            # No balancer, so the lock needs a host: this controller, the one machine these runs start on.
            "vars": {
                "vfleet_fleet_name": "gate",
                "vfleet_lb_kind": "none",
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
    """ansible-playbook NAME.yml run directly, as an operator may, with the same settings as the CLI. A raw
    run that fails after the lock keeps it (no `vfleet fleet` releases it): the lock this run took, and
    only that one, is removed after it, so that the next test finds the fleet unlocked."""
    before = LOCK.read_text() if LOCK.is_file() else None
    proc = subprocess.run(
        playbook_argv(name, inv, extra), env=ansible_env(), capture_output=True, text=True, timeout=300, check=False
    )
    if before is None and LOCK.is_file():
        run = re.search(r"run (\S+): \d+ node\(s\)", proc.stdout)
        if run and run[1] in LOCK.read_text():
            LOCK.unlink()
    proc.stdout = flat(proc.stdout + proc.stderr)
    return proc


def pulled(out: str) -> bool:
    return "Pull and inspect the image" in out
