"""Where the fleet lock lives, whose it is, and what a refusal says about its holder (ansible/roles/vfleet/
tasks/plan.yml, lock.yml, unlock.yml, ansible/unlock.yml), on real rollout.yml runs whose one node is this
machine (a local connection, no balancer: tests/support/fleet.py), through `vfleet fleet rollout` and
through ansible-playbook itself.

The lock never lives on a node, since a swapped or lost node would take the lock with it or block every
later run; with no balancer and no lock host the run is refused naming the fix. A lock held by another
run is refused: the refusal names the holder (host, pid, since, what it was doing), says whether it is
alive where this controller can tell, and never prints its run id. The lock belongs to the controller
process that took it (`vfleet fleet`, named in VFLEET_CONTROLLER_PID and checked to be an ancestor of the
play): the holder's run id, passed by any other process, neither takes nor releases it, and a run id
that does not come from the `vfleet fleet` that started the play is refused; the holder itself takes it
again and releases it. The balancer-hosted lock, a concurrent second rollout and --break-lock run on the
Docker fleet (tests/e2e/ops/test_ansible_fleet.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.fleet import LOCK, NOWHERE, flat, local_inventory, pulled, rollout

from vfleet.fleet.ansible import env as ansible_env
from vfleet.fleet.ansible import playbook_argv

pytestmark = pytest.mark.slow  # ansible-playbook runs, about 10 s each

OTHER_RUN = "20261201T000000Z-4711"
HERE = subprocess.run(["hostname"], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(autouse=True)
def _free_lock() -> Iterator[None]:
    """The lock is the role's one file on its host (here this machine): free before and after each test."""
    LOCK.unlink(missing_ok=True)
    yield
    LOCK.unlink(missing_ok=True)


def _held(record: dict[str, Any]) -> None:
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    LOCK.write_text(json.dumps(record))


def _holder() -> dict[str, Any]:
    return dict(json.loads(LOCK.read_text()))


def _refused_before_the_pull(inv: Path, *args: str) -> str:
    proc = rollout(inv, *args)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert not pulled(proc.stdout), proc.stdout[-3000:]
    return proc.stdout


def test_no_balancer_and_no_lock_host_is_refused_naming_the_fix(tmp_path: Path) -> None:
    out = _refused_before_the_pull(local_inventory(tmp_path, lock_vars={"vfleet_lock_host": ""}))
    assert "the fleet lock has no host" in out, out[-3000:]
    assert "as the group vfleet_lock (or vfleet_lock_host: HOST)" in out
    assert "vfleet_lock_host: localhost is safe only when every rollout and rollback of this fleet starts" in out
    assert "TASK [vfleet : Take the fleet lock]" not in out
    assert not LOCK.exists()


def test_a_lock_host_among_the_nodes_is_refused(tmp_path: Path) -> None:
    out = _refused_before_the_pull(local_inventory(tmp_path, lock_vars={"vfleet_lock_host": "gate-node"}))
    assert "the fleet lock host gate-node is a node this fleet swaps (in vfleet_nodes, and in this run)" in out, out[
        -3000:
    ]
    assert "TASK [vfleet : Take the fleet lock]" not in out
    assert not LOCK.exists()


def _with_lock_group(inv: Path) -> None:
    """Move the lock to the group vfleet_lock: a host of its own (a local connection here)."""
    doc = yaml.safe_load(inv.read_text())
    doc["all"]["vars"]["vfleet_lock_host"] = ""
    doc["all"]["children"]["vfleet_lock"] = {
        "hosts": {"lock-host": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}
    }
    inv.write_text(yaml.safe_dump(doc))


@pytest.mark.parametrize("holder", ["dead", "alive", "other-controller"])
def test_a_held_lock_is_refused_naming_the_holder_and_whether_it_is_alive(tmp_path: Path, holder: str) -> None:
    inv = local_inventory(tmp_path)
    _with_lock_group(inv)
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        if holder == "dead":
            sleeper.kill()
            sleeper.wait()
        controller = "ctl-b.example" if holder == "other-controller" else HERE
        record = {
            "run_id": OTHER_RUN,
            "playbook": "rollout of reg.example/x@sha256:feed",
            "user": "ops",
            "controller": controller,
            "pid": str(sleeper.pid),
            "since": "2026-12-01T10:15:00Z",
        }
        _held(record)
        out = _refused_before_the_pull(inv)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert "fleet lock on lock-host" in out, out[-3000:]
    assert (
        f"is held by rollout of reg.example/x@sha256:feed of ops on controller {controller} (pid {sleeper.pid}), "
        "since 2026-12-01T10:15:00Z" in out
    ), out[-3000:]
    assert "take it over with `vfleet fleet rollout|rollback|verify --break-lock` only when that run is gone" in out
    assert OTHER_RUN not in out, "a refusal printed the holder's run id"
    expect = {
        "dead": f"Its holder is dead: pid {sleeper.pid} no longer runs on this controller ({HERE}), so its run "
        "ended without releasing the lock",
        "alive": f"Its holder is alive: pid {sleeper.pid} (sleep) still runs on this controller ({HERE}); wait for it",
        "other-controller": "Whether its holder is alive cannot be told here: it ran on controller ctl-b.example",
    }[holder]
    assert expect in out, out[-3000:]
    assert _holder() == record, "a refused run touched the lock"


# -- whose lock it is: the controller process that took it, not whoever knows its run id ----------------


@pytest.fixture
def live_holder() -> Iterator[dict[str, Any]]:
    """A lock on localhost held by a live run of this controller (a sleeping process stands for its
    `vfleet fleet`), with the run id OTHER_RUN."""
    sleeper = subprocess.Popen(["sleep", "600"])
    record = {
        "run_id": OTHER_RUN,
        "playbook": "rollout of reg.example/x@sha256:feed",
        "user": "ops",
        "controller": HERE,
        "pid": str(sleeper.pid),
        "since": "2026-12-01T10:15:00Z",
    }
    _held(record)
    try:
        yield record
    finally:
        sleeper.kill()
        sleeper.wait()


def _ansible(inv: Path, book: str, extra: dict[str, Any], controller_pid: str | None) -> str:
    """ansible-playbook BOOK.yml run directly; CONTROLLER_PID is what it puts in VFLEET_CONTROLLER_PID
    (None: nothing, as a plain ansible-playbook run)."""
    run_env = ansible_env()
    run_env.pop("VFLEET_CONTROLLER_PID", None)
    if controller_pid is not None:
        run_env["VFLEET_CONTROLLER_PID"] = controller_pid
    proc = subprocess.run(
        playbook_argv(book, inv, extra), env=run_env, capture_output=True, text=True, timeout=300, check=False
    )
    return flat(proc.stdout + proc.stderr) + f" [rc {proc.returncode}]"


def _as_another_process(inv: Path, book: str, extra: dict[str, Any]) -> str:
    """BOOK.yml run under a shell of its own that names itself the controller process, a live ancestor of
    the play as `vfleet fleet` is of its runs: a process other than any holder."""
    argv = playbook_argv(book, inv, extra)
    wrapped = ["sh", "-c", 'VFLEET_CONTROLLER_PID=$$; export VFLEET_CONTROLLER_PID; "$@"; exit $?', "sh", *argv]
    proc = subprocess.run(wrapped, env=ansible_env(), capture_output=True, text=True, timeout=300, check=False)
    return flat(proc.stdout + proc.stderr) + f" [rc {proc.returncode}]"


def test_the_holders_run_id_on_the_cli_takes_no_held_lock(tmp_path: Path, live_holder: dict[str, Any]) -> None:
    """`vfleet fleet rollout -e vfleet_run_id=<the holder's id>`: refused, and the holder's lock stays
    (before issue 31 the run took the lock as its own, and the CLI's unlock after the failed run deleted it)."""
    proc = rollout(local_inventory(tmp_path), "-e", f"vfleet_run_id={OTHER_RUN}")
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert not pulled(proc.stdout), proc.stdout[-3000:]
    assert LOCK.is_file(), "the holder's lock was released by another run"
    assert _holder() == live_holder, "a refused run touched the lock"


@pytest.mark.parametrize("pid", ["the holder's", "none"])
def test_a_run_id_from_outside_vfleet_fleet_is_refused(tmp_path: Path, live_holder: dict[str, Any], pid: str) -> None:
    """ansible-playbook with -e vfleet_run_id, not started by `vfleet fleet` (VFLEET_CONTROLLER_PID naming the
    holder's process, which is no ancestor of this play, or not set): refused at the plan, naming the variable."""
    extra = {"vfleet_run_id": OTHER_RUN, "vfleet_image": NOWHERE}
    out = _ansible(local_inventory(tmp_path), "rollout", extra, live_holder["pid"] if pid != "none" else None)
    assert out.endswith("[rc 2]"), out[-3000:]
    assert "vfleet_run_id is not an input: `vfleet fleet` gives each run its id" in out, out[-3000:]
    assert "TASK [vfleet : Take the fleet lock]" not in out and not pulled(out)
    assert _holder() == live_holder, "a refused run touched the lock"


def test_the_holders_run_id_from_another_process_neither_takes_nor_releases_the_lock(
    tmp_path: Path, live_holder: dict[str, Any]
) -> None:
    """Another controller process with the holder's run id (as `vfleet fleet` passes one): the rollout is
    refused at the lock, and unlock.yml (what the CLI runs after a failed run) leaves the lock alone."""
    inv = local_inventory(tmp_path)
    out = _as_another_process(inv, "rollout", {"vfleet_run_id": OTHER_RUN, "vfleet_image": NOWHERE})
    assert out.endswith("[rc 2]") and not pulled(out), out[-3000:]
    assert f"is held by rollout of reg.example/x@sha256:feed of ops on controller {HERE}" in out, out[-3000:]
    assert "Its holder is alive" in out, out[-3000:]
    assert OTHER_RUN not in out.split("TASK [vfleet : Read the fleet lock]")[-1], "the refusal printed the run id"
    assert _holder() == live_holder, "a refused run touched the lock"

    out = _as_another_process(inv, "unlock", {"vfleet_run_id": OTHER_RUN})
    assert "left alone: a lock is released only by the controller process of the run that took it" in out, out[-3000:]
    assert _holder() == live_holder, "another process released the lock"


def test_the_run_that_holds_the_lock_takes_it_again_and_releases_it(tmp_path: Path) -> None:
    """This test's process stands for `vfleet fleet`: its runs take the lock (a raw ansible-playbook run
    that fails keeps it), take it again with the same run id, and release it; the lock records its pid."""
    inv = local_inventory(tmp_path)
    run = "20261201T101500Z-c0ffee"
    me = str(os.getpid())
    for attempt in ("takes", "takes again"):
        out = _ansible(inv, "rollout", {"vfleet_run_id": run, "vfleet_image": NOWHERE}, me)
        assert "Preflight every node of the run" in out, (attempt, out[-3000:])
        held = _holder()
        assert held["run_id"] == run and held["pid"] == me and held["controller"] == HERE, (attempt, held)
    out = _ansible(inv, "unlock", {"vfleet_run_id": run}, me)
    assert out.endswith("[rc 0]"), out[-3000:]
    assert not LOCK.exists(), out[-3000:]


def test_the_cli_releases_the_lock_of_its_own_failed_run(tmp_path: Path) -> None:
    proc = rollout(local_inventory(tmp_path))
    assert proc.returncode != 0 and "Preflight every node of the run" in proc.stdout, proc.stdout[-3000:]
    assert "releasing its lock" in proc.stdout and "left alone" not in proc.stdout, proc.stdout[-3000:]
    assert not LOCK.exists(), "the CLI did not release the lock of its own failed run"
