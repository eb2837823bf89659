"""`vfleet fleet rollout|rollback|verify` runs one fork per node of the run (vfleet.fleet.run.forks_of, with
vfleet.fleet.ansible.forks_for).
Without --limit it counts the target group in the inventory it has already read, starting no Ansible
process for that (this tier refuses any process); a --limit is left to Ansible to resolve."""

from __future__ import annotations

from pathlib import Path

import pytest

from vfleet.fleet.ansible import MIN_FORKS
from vfleet.fleet.inventory import Inventory
from vfleet.fleet.run import FleetRequest, forks_of

NODES = [f"n{i}" for i in range(40)]
INV = Inventory(
    Path("inv"),
    {"all": frozenset([*NODES, "lb"]), "vfleet_nodes": frozenset(NODES), "zone": frozenset(NODES[:3])},
    {},
)


def req(command: str = "rollout", targets: str | None = None, limit: str | None = None) -> FleetRequest:
    return FleetRequest(action=command, inventory=INV.path, targets=targets, limit=limit)


@pytest.fixture(autouse=True)
def _no_forks_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANSIBLE_FORKS", raising=False)


@pytest.mark.parametrize("command", ["rollout", "rollback", "verify"])
def test_the_target_group_is_counted_in_the_inventory_read(command: str) -> None:
    assert forks_of(req(command), INV) == len(NODES)
    assert forks_of(req(command, targets="zone"), INV) == MIN_FORKS


def test_no_count_for_status_or_where_ansible_forks_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    assert forks_of(req("status"), INV) is None
    monkeypatch.setenv("ANSIBLE_FORKS", "7")
    assert forks_of(req(), INV) is None
