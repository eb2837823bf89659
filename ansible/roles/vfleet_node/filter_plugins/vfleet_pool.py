# Copyright: the vfleet authors. Apache-2.0.
"""Whether fleet verify may take a node out of the balancer's pool (ansible/roles/vfleet_node/tasks/verify.yml).

Two bounds, both about what the clients keep:
- the run's bound, `vfleet_verify_max_out_of_pool`: a node that failed its verify in this run stays out of the
  pool, so it still counts against the bound when the next batch starts;
- the pool is never emptied: a node whose drain would leave the balancer no server UP is not drained (its clients
  would get 503 for the whole verify).

A node already out of the pool (held by an earlier verify, or put in MAINT by hand) takes nothing more out: it is
always verified. A node the run does not move (its weights already failed) takes no share of the bound.
"""

from __future__ import annotations

from typing import Any


def _up(servers: dict[str, Any] | None, host: str) -> bool:
    """In the pool: HAProxy says UP; without a balancer of ours (servers None) a node counts as in it."""
    return servers is None or str((servers.get(host) or {}).get("status", "")) == "UP"


def pool_refusal(
    batch: list[str],
    host: str,
    servers: dict[str, Any] | None,
    max_out: int,
    left_out: list[str],
    not_moving: list[str] | None = None,
) -> str:
    """'' when HOST may leave the pool for its verify, else why it may not, in words for the run's message.

    batch: the nodes of this serial batch, in order (ansible_play_batch); servers: the backend's servers and their
    status as HAProxy reported them at the start of the batch (None for a balancer not ours: only the run's bound
    applies); max_out: the run's bound; left_out: the nodes this run failed and left out of the pool; not_moving:
    nodes of the batch that are not drained whatever happens (a problem found before the drain)."""
    if not _up(servers, host):
        return ""
    skip = set(not_moving or ())
    movers = [h for h in batch if h not in skip and _up(servers, h)]
    if host not in movers:
        return ""
    rank = movers.index(host)
    budget = int(max_out) - len(left_out)
    if rank < budget and servers is None:
        return ""
    up_outside = [] if servers is None else sorted(h for h, s in servers.items() if h not in batch and _up(servers, h))
    keep_one = len(up_outside) + len(movers) - 1
    if rank < budget and rank < keep_one:
        return ""
    if rank >= budget:
        # A batch holds at most max_out nodes (the play's serial), so only the nodes this run left out exhaust it.
        return (
            f"{len(left_out)} node(s) this run failed stay out of the pool ({', '.join(left_out)}), and taking "
            f"{host} out too would put more than vfleet_verify_max_out_of_pool ({int(max_out)}; --max-out-of-pool N) "
            "out at once"
        )
    out = [] if servers is None else sorted(h for h in servers if not _up(servers, h) and h != host)
    return (
        f"it is the last node in the pool (out of it: {', '.join(out) or 'none'}): taking it out would leave the "
        "balancer no server, and every client request would get 503 until it came back"
    )


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"vfleet_pool_refusal": pool_refusal}
