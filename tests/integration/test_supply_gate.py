"""The rollout's supply-chain gate (ansible/roles/vfleet_node/tasks/supply.yml) on a real rollout.yml run
whose one node is this machine (a local connection, state in a tmp directory, no balancer): what the
gate cannot verify stops the run before the pull, with the reason named, and the switch that skips the
gate is refused outside a test fleet. The gate passing and a node then pulling is the lifecycle test's
(tests/e2e/test_fleet_lifecycle.py: the real CPU image, staged unsigned, then tampered, then signed); the
Docker-in-Docker fleet scenarios run with the switch on (their stand-in images have no build record)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from supply_helpers import make_key

#: An address nothing listens on: the gate cannot tie the reference to a digest.
NOWHERE = "127.0.0.1:9/vfleet/nowhere@sha256:" + "ab" * 32


def _inventory(tmp: Path, **node_vars: Any) -> Path:
    inv = tmp / "inventory.yml"
    node = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "vfleet_node_state_dir": str(tmp / "state"),
        "vfleet_node_env_file": str(tmp / "state" / "secrets.env"),
        "vfleet_node_model_dir": str(tmp / "models"),
        "vfleet_node_check_promotion": False,
        "vfleet_node_check_gpus": False,
        **node_vars,
    }
    doc = {
        "all": {
            "vars": {"vfleet_fleet_name": "gate", "vfleet_lb_kind": "none", "vfleet_lock_path": str(tmp / "lock.json")},
            "children": {
                "vfleet_nodes": {
                    "vars": node,
                    "children": {"cpu_x86": {"vars": {"vfleet_node_profile": "tiny/cpu"}, "hosts": {"gate-node": {}}}},
                }
            },
        }
    }
    inv.write_text(yaml.safe_dump(doc))
    return inv


def _rollout(inv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "vfleet", "fleet", "rollout", "--inventory", str(inv), "--image", NOWHERE, *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    proc.stdout = " ".join((proc.stdout + proc.stderr).split())
    return proc


def _pulled(out: str) -> bool:
    return "Pull and inspect the image" in out


@pytest.mark.injected_fault
def test_an_image_the_gate_cannot_verify_stops_the_run_before_the_pull(tmp_path: Path) -> None:
    """Fault: a reference whose registry does not answer. The gate fails closed on the digest check."""
    _, pub = make_key(tmp_path, "trusted")
    proc = _rollout(_inventory(tmp_path), "--trusted-key", str(pub), "--supply-store", str(tmp_path / "store"))
    assert proc.returncode != 0, proc.stdout[-3000:]
    out = proc.stdout
    assert f"NOT verified {NOWHERE}: digest:" in out, out[-3000:]
    assert "The rollout stops before any node pulls the image" in out
    assert "No node has been touched" in out
    assert not _pulled(out), out[-3000:]
    assert not (tmp_path / "lock.json").exists(), "the failed run's fleet lock was not released"


def test_no_trusted_key_is_a_failure_not_a_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no key anywhere nothing could pass, so the gate says that first (before it asks a registry)."""
    monkeypatch.delenv("VFLEET_TRUSTED_KEYS", raising=False)
    proc = _rollout(_inventory(tmp_path))
    assert proc.returncode != 0
    assert f"NOT verified {NOWHERE}: signature: no trusted key given" in proc.stdout, proc.stdout[-3000:]
    assert not _pulled(proc.stdout)


def test_allow_unsigned_is_refused_outside_a_test_fleet(tmp_path: Path) -> None:
    proc = _rollout(_inventory(tmp_path), "--allow-unsigned")
    assert proc.returncode != 0
    out = proc.stdout
    assert "vfleet_node_allow_unsigned (--allow-unsigned) is for a test fleet started with `vfleet fleet up`" in out
    assert "NOT CHECKED" not in out and not _pulled(out), out[-3000:]


def test_allow_unsigned_on_a_test_fleet_says_the_image_went_unchecked(tmp_path: Path) -> None:
    """The marker `vfleet fleet up` writes lets the switch through, and the run says so, then goes on
    with the preflight tasks after the gate (where this run stops later does not matter here)."""
    proc = _rollout(_inventory(tmp_path, vfleet_node_test_fleet=True), "--allow-unsigned")
    assert proc.returncode != 0
    out = proc.stdout
    assert f"NOT CHECKED: {NOWHERE} goes out without its signature, SBOM and provenance being verified" in out
    after_gate = "TASK [vfleet_node : Check the node's docker daemon and measure free disk under its root]"
    assert after_gate in out, out[-3000:]


def test_a_missing_trusted_key_file_is_named(tmp_path: Path) -> None:
    proc = _rollout(_inventory(tmp_path), "--trusted-key", str(tmp_path / "nope.pub"))
    assert proc.returncode != 0
    assert f"--trusted-key {tmp_path / 'nope.pub'}: no such file" in proc.stdout, proc.stdout[-2000:]
