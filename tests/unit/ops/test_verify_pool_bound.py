"""Which nodes fleet verify may take out of the balancer's pool
(ansible/roles/vfleet_node/filter_plugins/vfleet_pool.py, called by ansible/roles/vfleet_node/tasks/verify.yml): the
run's bound counts the nodes it failed and left out, and no drain empties the pool. The real path, a two-node fleet
under client traffic whose last node in the pool is not drained, is tests/e2e/ops/test_fleet_lifecycle.py's."""

from __future__ import annotations

from typing import Any

import pytest
from support.repo import load_file_module

POOL = load_file_module("ansible/roles/vfleet_node/filter_plugins/vfleet_pool.py", "vfleet_pool_under_test")


def servers(**status: str) -> dict[str, Any]:
    return {name: {"status": s, "scur": 0} for name, s in status.items()}


def refusal(batch: list[str], host: str, srv: dict[str, Any] | None, max_out: int = 1, **kw: Any) -> str:
    return str(POOL.pool_refusal(batch, host=host, servers=srv, max_out=max_out, left_out=kw.pop("left_out", []), **kw))


def test_a_node_leaves_the_pool_while_another_serves() -> None:
    assert refusal(["n1"], "n1", servers(n1="UP", n2="UP")) == ""


def test_the_nodes_failed_by_this_run_count_against_the_bound() -> None:
    """The CI run of 2026-12-07 on three nodes: n1 failed and stays out, so n2 may not leave with a bound of 1, though
    n3 would still serve; with a bound of 2 it may."""
    srv = servers(n1="MAINT", n2="UP", n3="UP")
    why = refusal(["n2"], "n2", srv, left_out=["n1"])
    assert "1 node(s) this run failed stay out of the pool (n1)" in why, why
    assert "vfleet_verify_max_out_of_pool (1; --max-out-of-pool N)" in why, why
    assert refusal(["n2"], "n2", srv, max_out=2, left_out=["n1"]) == ""


def test_no_drain_leaves_the_balancer_without_a_server() -> None:
    """Two nodes, one out of the pool since an earlier verify failed (not counted by this run): the other is the last
    one in the pool and stays in it, whatever the bound."""
    why = refusal(["n1"], "n1", servers(n1="UP", n2="MAINT"), max_out=5)
    assert why.startswith("it is the last node in the pool (out of it: n2)") and "503" in why, why
    # A server DOWN by its health checks serves nobody either.
    assert "last node in the pool" in refusal(["n1"], "n1", servers(n1="UP", n2="DOWN"), max_out=5)
    # A one-node fleet behind the balancer: fleet verify would be an outage.
    assert "last node in the pool (out of it: none)" in refusal(["n1"], "n1", servers(n1="UP"))


def test_within_a_batch_the_first_nodes_take_the_room_and_the_last_server_stays() -> None:
    srv = servers(n1="UP", n2="UP", n3="UP")
    assert [refusal(["n1", "n2", "n3"], h, srv, max_out=3) == "" for h in ("n1", "n2", "n3")] == [True, True, False]
    assert [refusal(["n1", "n2"], h, srv, max_out=2, left_out=["n0"]) == "" for h in ("n1", "n2")] == [True, False]


@pytest.mark.parametrize("status", ["MAINT", "DRAIN", "DOWN"])
def test_a_node_already_out_of_the_pool_is_always_verified(status: str) -> None:
    """Held by an earlier verify or by hand: verifying it takes nothing more out, even with the others out too."""
    assert refusal(["n1"], "n1", servers(n1=status, n2="MAINT"), left_out=["n2"]) == ""


def test_a_node_that_does_not_move_takes_no_share() -> None:
    srv = servers(n1="UP", n2="UP", n3="UP")
    assert refusal(["n1", "n2"], "n2", srv, not_moving=["n1"]) == ""
    assert refusal(["n1", "n2"], "n2", srv) != ""


def test_without_a_balancer_of_ours_only_the_bound_applies() -> None:
    assert refusal(["n1"], "n1", None) == ""
    assert "stay out of the pool (n2)" in refusal(["n1"], "n1", None, left_out=["n2"])
