"""The unit tier's guard: a test under tests/unit starts no process and opens no connection.

The tiers are split by what a test uses, so that `make test-unit` is fast and needs nothing but the
venv. While a unit test runs (its setup, fixtures of every scope included, its call and its teardown)
and while a unit test module is imported, starting a process (subprocess.Popen, and so run, call,
check_output and os.popen; os.system; os.fork and os.forkpty; os.posix_spawn and os.posix_spawnp;
multiprocessing's spawn) and connecting a socket (socket.socket.connect and connect_ex, and so
socket.create_connection, urllib, http.client, httpx, a docker client) raise UnitTierError, which names
the fix. Code under test may catch that error (a probe that turns any failure into "unreachable"), so
every attempt is also recorded, and a test that made one fails at teardown even if the error was
swallowed: a test cannot stay in this tier by accident. Binding or listening is not refused: nothing
reaches a server without a connect.

These are hooks of this conftest, so they apply to the tests under tests/unit only, also when one
pytest run collects every tier.
"""

from __future__ import annotations

import _posixsubprocess
import os
import socket
import subprocess
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from support.repo import REPO, ConfigTree

__all__ = ["MESSAGE", "REPO", "ConfigTree", "Guard", "UnitTierError", "unit_guard"]

MESSAGE = "unit tests run no subprocess/network: move this test to tests/integration"


class UnitTierError(RuntimeError):
    """A unit test tried to start a process or open a connection (not an OSError, so that code which
    handles a failed connection or a missing program does not mistake it for one)."""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


class Guard:
    """The refusing stand-ins, and the attempts they saw during one test (or one module's import)."""

    def __init__(self) -> None:
        self.attempts: list[str] = []

    def refuse(self, what: str, shown: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """A stand-in for ``what`` that records the attempt (with ``shown(*args)``: the command or the
        address) and raises UnitTierError."""

        def refused(*args: Any, **kwargs: Any) -> Any:
            attempt = what if shown is None else f"{what} {_short(shown(*args, **kwargs))}"
            self.attempts.append(attempt)
            raise UnitTierError(f"{MESSAGE} (it tried {attempt})")

        return refused

    @contextmanager
    def installed(self) -> Iterator[Guard]:
        with pytest.MonkeyPatch.context() as mp:
            # Popen._execute_child is where every subprocess function ends (run, call, check_output,
            # os.popen, asyncio's subprocesses), however Popen was imported.
            mp.setattr(
                subprocess.Popen, "_execute_child", self.refuse("subprocess.Popen", lambda _s, args, *_, **__: args)
            )
            mp.setattr(_posixsubprocess, "fork_exec", self.refuse("_posixsubprocess.fork_exec"))
            mp.setattr(os, "system", self.refuse("os.system", lambda command: command))
            for name in ("fork", "forkpty"):
                mp.setattr(os, name, self.refuse(f"os.{name}"))
            for name in ("posix_spawn", "posix_spawnp"):
                mp.setattr(os, name, self.refuse(f"os.{name}", lambda path, argv, *_, **__: argv))
            for name in ("connect", "connect_ex"):
                mp.setattr(socket.socket, name, self.refuse(f"socket.{name} to", lambda _s, address: address))
            yield self

    def verdict(self) -> str:
        """The failure message for what was attempted ("" when nothing was)."""
        return f"{MESSAGE}; it tried: " + "; ".join(self.attempts) if self.attempts else ""


GUARD = pytest.StashKey[Guard]()


def _guard(item: pytest.Item) -> Guard:
    if GUARD not in item.stash:
        item.stash[GUARD] = Guard()
    return item.stash[GUARD]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with _guard(item).installed():
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with _guard(item).installed():
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    guard = _guard(item)
    with guard.installed():
        yield
    if guard.attempts:
        pytest.fail(guard.verdict(), pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """A unit test module's import is guarded too (a command run at import time)."""
    guard = Guard()
    with guard.installed():
        report = yield
    if guard.attempts and report.passed:
        report.outcome = "failed"
        report.longrepr = f"{collector.nodeid}: {guard.verdict()}"
    return report


@pytest.fixture
def unit_guard(request: pytest.FixtureRequest) -> Guard:
    """This test's guard: a test of the guard itself checks ``attempts`` and then clears them."""
    return _guard(request.node)
