"""2.6: metrics sanity after the traffic, and /health still 200."""

from __future__ import annotations

from typing import Any

from vfleet.verify.metrics import finishes
from vfleet.verify.target import Target


def test_no_error_or_abort_finishes(target: Target, figures: dict[str, Any]) -> None:
    now = finishes(target.client.metrics())
    before = finishes(target.start_metrics) if target.start_metrics else {}
    figures["finished_reasons"] = now
    errors, aborts = now.get("error", 0.0), now.get("abort", 0.0)
    # The suite causes neither (every request it sends runs to its stop or length limit), and
    # boot-verify runs before the server takes traffic: any error or abort finish is a fault.
    assert errors == 0 and aborts == 0, (
        f"expected no error and no abort finishes (the suite causes none); saw {errors:.0f} error and "
        f"{aborts:.0f} abort finishes ({before.get('error', 0.0):.0f} and {before.get('abort', 0.0):.0f} "
        f"before the suite); all finishes: {now}"
    )


def test_health_after_load(target: Target) -> None:
    status, body = target.client.get("/health", timeout_s=10)
    assert status == 200, f"expected /health 200 after the load; saw {status} {body[:200]!r}"
