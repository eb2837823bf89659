"""The rollout's supply-chain gate (ansible/roles/vfleet_node/tasks/supply.yml) on a real rollout.yml run
whose one node is this machine (a local connection, state in a tmp directory, no balancer): what the
gate cannot verify stops the run before the pull, with the reason named. The inventory carries the
test-fleet mark, which lets it switch the promotion check off (the unpromoted reference would stop the
run before the gate) and serve tiny/cpu, which is not a production profile; the gate itself runs as on
any fleet. The switches that skip the gate, refused or honoured, are tests/integration/test_fleet_switches.py's.
The gate passing and a node then pulling is the lifecycle test's (tests/e2e/test_fleet_lifecycle.py: the
real CPU image, staged unsigned, then tampered, then signed); the Docker-in-Docker fleet scenarios run
with the switch on (their stand-in images have no build record)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fleet_helpers import NOWHERE, local_inventory, pulled, rollout
from supply_helpers import make_key


def _inventory(tmp: Path) -> Path:
    return local_inventory(tmp, test_fleet=True, vfleet_node_check_promotion=False)


@pytest.mark.injected_fault
def test_an_image_the_gate_cannot_verify_stops_the_run_before_the_pull(tmp_path: Path) -> None:
    """Fault: a reference whose registry does not answer. The gate fails closed on the digest check."""
    _, pub = make_key(tmp_path, "trusted")
    proc = rollout(_inventory(tmp_path), "--trusted-key", str(pub), "--supply-store", str(tmp_path / "store"))
    assert proc.returncode != 0, proc.stdout[-3000:]
    out = proc.stdout
    assert f"NOT verified {NOWHERE}: digest:" in out, out[-3000:]
    assert "The rollout stops before any node pulls the image. Push the image to the registry" in out, out[-3000:]
    assert "No node has been touched" in out
    assert "NOT CHECKED: supply chain" not in out
    assert not pulled(out), out[-3000:]
    assert not (tmp_path / "lock.json").exists(), "the failed run's fleet lock was not released"


def test_no_trusted_key_is_a_failure_not_a_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no key anywhere nothing could pass, so the gate says that first (before it asks a registry)."""
    monkeypatch.delenv("VFLEET_TRUSTED_KEYS", raising=False)
    proc = rollout(_inventory(tmp_path))
    assert proc.returncode != 0
    assert f"NOT verified {NOWHERE}: signature: no trusted key given" in proc.stdout, proc.stdout[-3000:]
    assert "Sign it with a key whose public half is in vfleet_node_trusted_keys" in proc.stdout
    assert not pulled(proc.stdout)


def test_a_missing_trusted_key_file_is_named(tmp_path: Path) -> None:
    proc = rollout(_inventory(tmp_path), "--trusted-key", str(tmp_path / "nope.pub"))
    assert proc.returncode != 0
    assert f"--trusted-key {tmp_path / 'nope.pub'}: no such file" in proc.stdout, proc.stdout[-2000:]
