"""2.6: metrics sanity after the traffic, and /health still 200."""

from __future__ import annotations

from typing import Any

from vfleet.verify.metrics import finishes, unexpected_finishes
from vfleet.verify.target import Target


def test_no_error_or_abort_finishes(target: Target, figures: dict[str, Any]) -> None:
    now = target.client.metrics()
    figures["finished_reasons"] = finishes(now)
    problem = unexpected_finishes(now, target.start_metrics)
    assert problem is None, problem


def test_health_after_load(target: Target) -> None:
    status, body = target.client.get("/health", timeout_s=10)
    assert status == 200, f"expected /health 200 after the load; saw {status} {body[:200]!r}"
