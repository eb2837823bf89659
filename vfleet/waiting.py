"""Waiting for something to become true, bounded: the one poll loop of vfleet."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from vfleet.errors import VfleetError

T = TypeVar("T")


class WaitTimeout(VfleetError):
    """What was awaited did not happen in time."""


def wait_until(
    predicate: Callable[[], T],
    timeout_s: float,
    interval_s: float = 1.0,
    what: str = "the condition",
    *,
    state: Callable[[], str] | None = None,
    since: float | None = None,
    error: Callable[[str], Exception] = WaitTimeout,
) -> T:
    """Call PREDICATE every INTERVAL_S seconds until it returns a true value, and return that value.

    It is called at least once, and once more at the deadline (TIMEOUT_S after SINCE, a time.monotonic()
    value; by default now). An exception it raises ends the wait (a process that exited is not worth
    waiting for). On timeout it raises ERROR (WaitTimeout by default) with a message that names WHAT
    was awaited and the last state: STATE() if given (e.g. the end of a log), else the predicate's last
    value.
    """
    start = time.monotonic() if since is None else since
    deadline = start + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(interval_s, left))
    last = state() if state is not None else repr(result)
    raise error(f"timed out after {timeout_s:g} s waiting for {what}; last state: {last}")
