"""The Ansible side without a fleet: lint at the production profile, syntax, the example inventory
against the profile catalog, the inventory guard, and how the CLI keeps the controller plays in a --limit."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from vfleet.cli import main
from vfleet.errors import VfleetError
from vfleet.fleet.ansible import PLAYBOOKS, ansible_dir, bin_dir, env, with_controller
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


def test_limit_keeps_the_controller_plays_and_means_what_it_says() -> None:
    everyone = [
        "mi355x-01.example.internal",
        "mi355x-02.example.internal",
        "mi355x-03.example.internal",
        "mi350x-01.example.internal",
        "b200-01.example.internal",
        "b200-02.example.internal",
        "gb300-01.example.internal",
    ]
    one = with_controller(EXAMPLE, "b200-02.example.internal")
    assert one == "localhost,b200-02.example.internal"
    # An exclusion alone means "every host but": localhost is added without turning it into "only localhost".
    hosts = with_controller(EXAMPLE, "vfleet_nodes:!mi355x-01.example.internal").split(",")
    assert hosts[0] == "localhost" and set(hosts[1:]) == set(everyone) - {"mi355x-01.example.internal"}
    hosts = with_controller(EXAMPLE, "rocm_mi355x:&mi355x-0[12].example.internal").split(",")
    assert set(hosts) == {"localhost", "mi355x-01.example.internal", "mi355x-02.example.internal"}
    with pytest.raises(VfleetError, match="selects no host"):
        with_controller(EXAMPLE, "no-such-host")


def test_forks_follow_the_run_so_a_batch_never_waits_in_rounds() -> None:
    """ansible.cfg's 32 forks would run a batch of 250 nodes (a 1,000-node fleet at 25%) in 8 rounds of
    drain, boot and boot-verify; the CLI asks for one fork per node of the run, within 32..256."""
    from vfleet.fleet.ansible import MAX_FORKS, MIN_FORKS, forks_for

    cfg = (ansible_dir() / "ansible.cfg").read_text()
    assert f"forks = {MIN_FORKS}" in cfg
    assert [forks_for(n) for n in (1, 32, 33, 250, 1000)] == [MIN_FORKS, 32, 33, 250, MAX_FORKS]


def test_every_command_works_without_an_ansible_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Inside an image there is no ansible/ tree: building the CLI (any vfleet command, the entrypoint
    included) must not read it, and a fleet run there names what is missing."""
    import vfleet.fleet.ansible as ansible_mod
    from vfleet.cli import main

    monkeypatch.setattr(ansible_mod, "ansible_dir", lambda: tmp_path / "no-ansible")
    assert main(["profiles"]) == 0
    capsys.readouterr()
    inv = tmp_path / "hosts.yml"
    inv.write_text("all: {}\n")
    assert main(["fleet", "status", "-i", str(inv)]) != 0
    err = capsys.readouterr().err
    assert "no-ansible/status.yml does not exist: run vfleet fleet from a vfleet checkout" in err, err
    with pytest.raises(VfleetError, match=r"no-ansible/roles/vfleet/defaults/main\.yml: cannot read the role defaults"):
        ansible_mod.role_defaults("vfleet")
