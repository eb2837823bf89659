"""The unit tier's guard (tests/unit/conftest.py): a process or a connection is refused with the error
that names the fix, a test that swallowed that error still fails, so does a module that made one at
import, and a test that does neither passes."""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import urllib.request

import pytest
from conftest import MESSAGE, REPO, Guard, UnitTierError


def _noop() -> None:
    pass


def test_every_way_to_start_a_process_is_refused(unit_guard: Guard) -> None:
    attempts = {
        "subprocess.run": lambda: subprocess.run(["true"], check=False),
        "subprocess.check_output": lambda: subprocess.check_output(["echo", "x"]),
        "os.popen": lambda: os.popen("true"),
        "os.system": lambda: os.system("true"),
        "os.fork": os.fork,
        "os.posix_spawn": lambda: os.posix_spawn("/bin/true", ["true"], dict(os.environ)),
        "multiprocessing spawn": lambda: multiprocessing.get_context("spawn").Process(target=_noop).start(),
    }
    for what, attempt in attempts.items():
        with pytest.raises(UnitTierError, match="move this test to tests/integration") as info:
            attempt()
        assert not isinstance(info.value, OSError), f"{what}: an OSError would pass for a missing program"
    assert len(unit_guard.attempts) == len(attempts), unit_guard.attempts
    assert unit_guard.attempts[0] == "subprocess.Popen ['true']"
    assert "os.system 'true'" in unit_guard.attempts
    unit_guard.attempts.clear()  # seen and checked: this test passes


def test_every_way_to_connect_is_refused(unit_guard: Guard) -> None:
    attempts = [
        lambda: socket.create_connection(("127.0.0.1", 9), timeout=1),
        lambda: urllib.request.urlopen("http://127.0.0.1:9/", timeout=1),
        lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).connect_ex(("127.0.0.1", 9)),
        lambda: socket.socket(socket.AF_UNIX).connect("/var/run/docker.sock"),
    ]
    for attempt in attempts:
        with pytest.raises(UnitTierError, match="unit tests run no subprocess/network"):
            attempt()
    assert unit_guard.attempts[0] == "socket.connect to ('127.0.0.1', 9)"
    assert unit_guard.attempts[-1] == "socket.connect to '/var/run/docker.sock'"
    assert len(unit_guard.attempts) == len(attempts)
    unit_guard.attempts.clear()


def test_a_socket_that_only_listens_is_allowed(unit_guard: Guard) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert s.getsockname()[1] > 0
    assert unit_guard.attempts == []


def test_a_swallowed_attempt_still_fails_its_test(pytester: pytest.Pytester) -> None:
    """The guard itself, in a pytest session of its own: a test and a module that catch the refusal
    fail anyway, with the message; a test that starts nothing passes."""
    pytester.makeconftest((REPO / "tests" / "unit" / "conftest.py").read_text())
    pytester.makepyfile(
        test_inner="""
        import subprocess

        def test_pure():
            assert sum([1, 2]) == 3

        def test_swallowed():
            try:
                subprocess.run(["true"], check=False)
            except Exception:
                pass
        """,
        test_at_import="""
        import socket

        try:
            socket.create_connection(("127.0.0.1", 9), timeout=1)
        except Exception:
            pass

        def test_never_collected():
            pass
        """,
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--continue-on-collection-errors")
    result.assert_outcomes(passed=2, errors=2)
    out = result.stdout.str()
    assert f"{MESSAGE}; it tried: subprocess.Popen ['true']" in out, out
    assert f"test_at_import.py: {MESSAGE}; it tried: socket.connect to ('127.0.0.1', 9)" in out, out
    assert "ERROR at teardown of test_swallowed" in out, out
