"""The swap's `docker stop` (ansible/roles/vfleet_node/library/vfleet_node_state.py, `stop`) when dockerd answers
that the container's main process is a zombie: the swap waits for the container to finish exiting instead of failing
on a state that ends by itself, and still fails, saying why, when it does not end.

A fake `subprocess.run` stands in for docker here: a zombie main process is a kernel state under load (seen once on
the 2-core test fleet, in a rollout's canary) that no test can make on demand. The real stop runs in every swap of
the e2e fleet tests (tests/e2e/ops/test_fleet_lifecycle.py, tests/e2e/ops/test_ansible_fleet.py)."""

from __future__ import annotations

import subprocess
from types import ModuleType
from typing import Any

import pytest
from support.repo import load_file_module

LIBRARY = "ansible/roles/vfleet_node/library/vfleet_node_state.py"
ZOMBIE_ERR = (
    "Error response from daemon: cannot stop container: vfleet-serve: container 595dd4ede703 PID 428 is zombie and "
    "can not be killed. Use the --init option when creating containers to run an init inside the container that "
    "forwards signals and reaps processes"
)


class Failed(Exception):
    pass


class Module:
    def fail_json(self, msg: str) -> None:
        raise Failed(msg)


def _load() -> ModuleType:
    return load_file_module(LIBRARY, "vfleet_node_state_under_test")


def _docker(stop_err: str, statuses: list[str]) -> tuple[list[list[str]], Any]:
    calls: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if argv[1] == "stop":
            return subprocess.CompletedProcess(argv, 1 if stop_err else 0, "", stop_err)
        if argv[1] == "inspect":
            return subprocess.CompletedProcess(argv, 0, statuses.pop(0) if statuses else "exited", "")
        raise AssertionError(f"unexpected docker call {argv}")

    return calls, run


def test_a_zombie_main_process_is_waited_for_until_the_container_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _load()
    calls, run = _docker(ZOMBIE_ERR, ["running", "running", "exited"])
    monkeypatch.setattr(mod.subprocess, "run", run)
    monkeypatch.setattr(mod.time, "sleep", lambda s: None)
    mod.stop(Module(), "vfleet-serve", 10)
    assert [c[1] for c in calls] == ["stop", "inspect", "inspect", "inspect"]


def test_a_container_that_never_exits_fails_the_stop_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _load()
    _, run = _docker(ZOMBIE_ERR, ["running"] * 1000)
    monkeypatch.setattr(mod.subprocess, "run", run)
    monkeypatch.setattr(mod.time, "sleep", lambda s: None)
    with pytest.raises(Failed, match=r"its main process is a zombie .* still running after 0 s"):
        mod.stop(Module(), "vfleet-serve", 10, wait_s=0.0)


def test_any_other_stop_error_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _load()
    calls, run = _docker("Error response from daemon: permission denied", [])
    monkeypatch.setattr(mod.subprocess, "run", run)
    with pytest.raises(Failed, match="docker stop vfleet-serve failed: Error response from daemon: permission denied"):
        mod.stop(Module(), "vfleet-serve", 10)
    assert [c[1] for c in calls] == ["stop"]


def test_a_clean_stop_or_no_container_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _load()
    for err in ("", "Error response from daemon: No such container: vfleet-serve"):
        calls, run = _docker(err, [])
        monkeypatch.setattr(mod.subprocess, "run", run)
        mod.stop(Module(), "vfleet-serve", 10)
        assert [c[1] for c in calls] == ["stop"]
