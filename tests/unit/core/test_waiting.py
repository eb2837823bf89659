"""vfleet.waiting.wait_until: returns the predicate's value as soon as it is true, and on timeout raises
an error that names what was awaited and the last state."""

from __future__ import annotations

import itertools
import time

import pytest

from vfleet.errors import VfleetError
from vfleet.waiting import WaitTimeout, wait_until


def test_returns_the_first_true_value_without_waiting_out_the_timeout() -> None:
    calls: list[float] = []

    def third_time() -> str:
        calls.append(time.monotonic())
        return "ready" if len(calls) == 3 else ""

    t0 = time.monotonic()
    assert wait_until(third_time, timeout_s=30, interval_s=0.05, what="the third call") == "ready"
    assert len(calls) == 3
    assert time.monotonic() - t0 < 5, "it waited for the timeout although the predicate was true"
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert all(g >= 0.04 for g in gaps), f"it did not sleep between polls: {gaps}"


def test_a_true_first_answer_returns_at_once() -> None:
    t0 = time.monotonic()
    assert wait_until(lambda: 7, timeout_s=30, interval_s=10, what="seven") == 7
    assert time.monotonic() - t0 < 1


def test_times_out_with_what_and_the_last_value() -> None:
    seen: list[int] = []

    def never() -> int:
        seen.append(len(seen))
        return 0

    t0 = time.monotonic()
    with pytest.raises(WaitTimeout) as info:
        wait_until(never, timeout_s=0.3, interval_s=0.05, what="the moon to turn blue")
    took = time.monotonic() - t0
    msg = str(info.value)
    assert "waiting for the moon to turn blue" in msg and "after 0.3 s" in msg, msg
    assert msg.endswith("last state: 0"), msg
    assert 0.3 <= took < 3, took
    assert len(seen) >= 3, "it did not poll until the deadline"
    assert isinstance(info.value, VfleetError)


def test_timeout_reports_the_state_callback_and_raises_the_callers_error() -> None:
    class NodeError(VfleetError):
        pass

    expected = r"timed out after 0.1 s waiting for node1 to boot; last state: dockerd: no socket"
    with pytest.raises(NodeError, match=expected):
        wait_until(
            lambda: False,
            timeout_s=0.1,
            interval_s=0.02,
            what="node1 to boot",
            state=lambda: "dockerd: no socket",
            error=NodeError,
        )


def test_since_counts_the_deadline_from_an_earlier_start() -> None:
    # Started "2 s ago" with a 1 s budget: one call, then the error, without sleeping.
    calls: list[int] = []
    t0 = time.monotonic()
    with pytest.raises(WaitTimeout):
        wait_until(lambda: calls.append(1), timeout_s=1, interval_s=5, what="x", since=time.monotonic() - 2)
    assert calls == [1]
    assert time.monotonic() - t0 < 1


def test_an_exception_of_the_predicate_ends_the_wait() -> None:
    def exited() -> bool:
        raise VfleetError("the server exited with code 1")

    t0 = time.monotonic()
    with pytest.raises(VfleetError, match="exited with code 1"):
        wait_until(exited, timeout_s=30, interval_s=1, what="health")
    assert time.monotonic() - t0 < 1
