"""The Ansible side without a fleet: lint at the production profile, syntax, the example inventory
against the profile catalog, the inventory guard, and the rollout lock with real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vfleet.cli import main
from vfleet.fleet import lock
from vfleet.fleet.ansible import PLAYBOOKS, ansible_dir, bin_dir, env
from vfleet.profiles import Catalog

EXAMPLE = ansible_dir() / "inventories" / "example"


def test_ansible_lint_production_profile_is_clean() -> None:
    proc = subprocess.run(
        [str(bin_dir() / "ansible-lint"), "--profile", "production", "--nocolor", "."],
        cwd=ansible_dir(),
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Profile 'production' was required, and it passed" in out


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_playbook_syntax(playbook: str) -> None:
    proc = subprocess.run(
        [str(bin_dir() / "ansible-playbook"), "--syntax-check", "-i", str(EXAMPLE), f"{playbook}.yml"],
        cwd=ansible_dir(),
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_example_inventory_names_real_profiles_per_platform_group() -> None:
    proc = subprocess.run(
        [str(bin_dir() / "ansible-inventory"), "-i", str(EXAMPLE), "--list"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    inv = json.loads(proc.stdout)
    catalog = {p.name: p for p in Catalog().load_all()}
    groups = inv["vfleet_nodes"]["children"]
    assert {"rocm_mi355x", "cuda_b200"} <= set(groups)
    hostvars = inv["_meta"]["hostvars"]
    for group in groups:
        family, platform = group.split("_", 1)
        for host in inv[group]["hosts"]:
            profile = hostvars[host]["vfleet_node_profile"]
            assert profile in catalog, f"{host}: unknown profile {profile}"
            assert catalog[profile].platform.platform == platform
            assert catalog[profile].family == family
            assert catalog[profile].production


def test_a_wrong_inventory_path_fails_instead_of_running_on_nothing(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(bin_dir() / "ansible-playbook"), "-i", str(tmp_path / "missing"), "status.yml"],
        cwd=ansible_dir(),
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0, proc.stdout


def test_cli_names_a_missing_inventory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["fleet", "rollout", "-i", str(tmp_path / "nope"), "--image", "r/x:1"])
    assert rc == 2
    assert "nope does not exist" in capsys.readouterr().err


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_lock_refuses_a_live_holder_and_takes_over_a_dead_one(tmp_path: Path) -> None:
    path = tmp_path / "fleet.lock"
    a, b = _sleeper(), _sleeper()
    try:
        me, stale = lock.acquire(path, "run-a", "rollout", pid=a.pid)
        assert stale is None and me.pid == a.pid
        with pytest.raises(lock.LockHeld, match="held by a running rollout"):
            lock.acquire(path, "run-b", "rollout", pid=b.pid)
        assert not lock.release(path, pid=b.pid), "a non-holder released the lock"
        a.kill()
        a.wait()
        me, stale = lock.acquire(path, "run-b", "rollback", pid=b.pid)
        assert stale is not None and stale.pid == a.pid and me.pid == b.pid
        assert lock.release(path, pid=b.pid)
        assert not path.exists()
    finally:
        for p in (a, b):
            p.kill()
            p.wait()
