"""Issues 21 and 31: the test-fleet switches and overrides (vfleet_node__switches in
ansible/roles/vfleet_node/vars/main.yml), the allow-list of role inputs (vfleet_node__inputs, and
vfleet_node__refused) and the production rule, on the real rollout.yml, rollback.yml and verify.yml with
one node that is this machine (tests/support/fleet.py; no container is started).

That inventory is never a test fleet's: its node is no container `make fleet-up` started, and the group
vfleet_test_fleet added by hand is no mark (refused naming why). So every switch is refused before
ansible-playbook starts, naming the inventory file and the variable, from the command line and from the
inventory alike, and so is every input off the allow-list (the command behind the gates, the paths they
read, the lock, the run id); run with ansible-playbook directly, the playbooks refuse them themselves,
and neither the old mark variable, a forged `groups`, a forged mark nor a role-internal name passed with
-e talks them around it. Each switch honoured on a real test fleet, said NOT CHECKED in the run and the
CLI's summary, is tests/e2e/ops/test_ansible_fleet.py's; the record's list reaching the status JSON and the
fleet page is here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ConfigTree
from support.fleet import NOWHERE, fleet, local_inventory, playbook, pulled, rollout

from vfleet.errors import VfleetError
from vfleet.fleet import inventory as fleet_inventory
from vfleet.fleet.ansible import ansible_dir
from vfleet.pages import fleet_html

#: A value of each switch that turns its gate off, as -e writes it.
OFF = {
    "vfleet_node_allow_unsigned": "true",
    "vfleet_node_check_supply": "false",
    "vfleet_node_allow_standin": "true",
    "vfleet_node_check_promotion": "false",
    "vfleet_node_check_profiles": "false",
    "vfleet_node_boot_verify": "false",
    "vfleet_node_verify_argv": '["true"]',
    "vfleet_node_check_gpus": "false",
    "vfleet_node_min_free_gb": "1",
    "vfleet_node_promotions_file": '"/tmp/promotions.jsonl"',
    "vfleet_node_address": '"10.213.0.11"',
    "vfleet_node_docker_host": '"tcp://10.213.0.11:2375"',
}
SWITCHES = fleet_inventory.switches()
EXAMPLE = ansible_dir() / "inventories" / "example"


def test_every_switch_of_the_role_is_covered_here() -> None:
    assert set(OFF) == set(SWITCHES), "a switch was added to or removed from vfleet_node__switches: update OFF"
    for name, sw in SWITCHES.items():
        assert sw.skips(json.loads(OFF[name])), name
        assert "'" not in sw.why, f"{name}: Ansible's output would double the apostrophe in its NOT CHECKED line"


def test_the_cli_and_the_guard_share_one_pattern_of_internal_names() -> None:
    guard = (ansible_dir() / "roles" / "vfleet" / "tasks" / "guard.yml").read_text()
    inputs = (ansible_dir() / "roles" / "vfleet_node" / "tasks" / "inputs.yml").read_text()
    first, second = fleet_inventory.INTERNAL_PARTS
    assert guard.count(f"'{first}'\n") == 2 and guard.count(f"~ '{second}')") == 2, "guard.yml and INTERNAL_RE differ"
    assert inputs.count(f"'{first}'\n") == 1 and inputs.count(f"~ '{second}')") == 1, (
        "inputs.yml and INTERNAL_RE differ"
    )


def _set_by_the_playbooks() -> dict[str, set[str]]:
    """Every variable the run playbooks and the role task files set (set_fact, register, vars), with where."""
    found: dict[str, set[str]] = {}

    def walk(node: Any, where: str) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, where)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in ("ansible.builtin.set_fact", "vars") and isinstance(value, dict):
                    for name in value:
                        found.setdefault(name, set()).add(where)
                elif key == "register":
                    found.setdefault(str(value), set()).add(where)
                walk(value, where)

    books = [ansible_dir() / f"{b}.yml" for b in fleet_inventory.CHECKED]
    for path in [*books, *sorted((ansible_dir() / "roles").glob("*/tasks/*.yml"))]:
        walk(yaml.safe_load(path.read_text()), str(path.relative_to(ansible_dir())))
    return found


def test_the_guard_covers_every_name_the_playbooks_set() -> None:
    """A name the playbooks set for themselves (not an operator's knob of a role's defaults) that the
    guard does not cover could be passed with -e over the value a gate reads: each must match."""
    knobs = {k for p in (ansible_dir() / "roles").glob("*/defaults/main.yml") for k in yaml.safe_load(p.read_text())}
    found = _set_by_the_playbooks()
    assert {"vfleet_node__switched", "vfleet_node__supply", "vfleet_ok_fact", "vfleet_lb_servers"} <= set(found)
    loose = {n: sorted(w) for n, w in found.items() if n not in knobs and not fleet_inventory.INTERNAL_RE.match(n)}
    assert not loose, f"set by the playbooks, not covered by guard.yml's pattern (INTERNAL_PARTS): {loose}"


# -- refused on an inventory that is not a test fleet's ------------------------------------------------


@pytest.mark.parametrize(
    ("arg", "named"),
    [
        *((f"{k}={v}", f"-e {k}:") for k, v in OFF.items()),
        ("vfleet_node_check_supply=true", "-e vfleet_node_check_supply:"),  # the default value is refused too
        ("vfleet_node_test_fleet=true", "-e vfleet_node_test_fleet: the test-fleet mark is no variable"),
        ("vfleet_node__switched=[]", "-e vfleet_node__switched: a name the roles compute"),
        ("vfleet_node__verified_id=sha256:00", "-e vfleet_node__verified_id: a name the roles compute"),
    ],
)
def test_a_switch_on_the_command_line_is_refused_before_ansible_starts(tmp_path: Path, arg: str, named: str) -> None:
    inv = local_inventory(tmp_path)
    proc = rollout(inv, "-e", arg)
    assert proc.returncode == 2, proc.stdout[-3000:]
    out = proc.stdout
    assert f"inventory {inv} (it is not a test fleet's: no group vfleet_test_fleet holds every host" in out, out
    assert "refused before ansible-playbook starts" in out and named in out, out
    assert "PLAY [" not in out


def test_allow_unsigned_is_refused_outside_a_test_fleet(tmp_path: Path) -> None:
    inv = local_inventory(tmp_path)
    proc = rollout(inv, "--allow-unsigned")
    assert proc.returncode == 2
    out = proc.stdout
    assert f"inventory {inv} (it is not a test fleet's" in out, out
    assert "--allow-unsigned (vfleet_node_allow_unsigned): test fleets only; sign the image" in out
    assert "PLAY [" not in out and "NOT CHECKED" not in out


@pytest.mark.parametrize("action", ["rollout", "rollback", "verify"])
def test_a_switch_in_the_inventory_is_refused_for_every_run(tmp_path: Path, action: str) -> None:
    inv = local_inventory(tmp_path, vfleet_node_check_promotion=False, vfleet_node_verify_argv=["true"])
    proc = fleet(inv, action, *(["--image", NOWHERE] if action == "rollout" else []))
    assert proc.returncode == 2, proc.stdout[-3000:]
    out = proc.stdout
    assert f"inventory {inv} (it is not a test fleet's" in out
    assert f"vfleet_node_check_promotion: False in {inv} turns off the promotion gate" in out, out
    assert f"vfleet_node_verify_argv: ['true'] in {inv} turns off the boot-verify gate" in out
    assert "remove it from the inventory" in out and "PLAY [" not in out


def test_a_profile_that_is_not_production_is_refused_outside_a_test_fleet(tmp_path: Path) -> None:
    inv = local_inventory(tmp_path, profile="tiny/cpu")
    proc = fleet(inv, "verify")
    assert proc.returncode == 2
    assert (
        "profile tiny/cpu (gate-node): not a production profile (production: false in "
        "serve_configs/models/tiny/model.yaml), and only a test fleet's inventory may serve one" in proc.stdout
    ), proc.stdout
    assert "PLAY [" not in proc.stdout


# -- ansible-playbook run directly ---------------------------------------------------------------------


def _forged(**extra: Any) -> dict[str, Any]:
    """Extra vars that try to pass for a test fleet: Ansible's own `groups` holding the claim."""
    return {
        "vfleet_image": NOWHERE,
        "groups": {"all": ["gate-node"], "vfleet_nodes": ["gate-node"], "vfleet_test_fleet": ["gate-node"]},
        **extra,
    }


def test_ansible_playbook_with_the_switches_and_a_forged_mark_is_refused(tmp_path: Path) -> None:
    inv = local_inventory(tmp_path)
    proc = playbook(inv, "rollout", _forged(vfleet_node_allow_unsigned=True, vfleet_node_check_supply=False))
    assert proc.returncode != 0
    out = proc.stdout
    assert (
        "gate-node: vfleet_node_allow_unsigned, vfleet_node_check_supply would turn off the supply chain gate(s), "
        "which only a test fleet may do" in out
    ), out[-3000:]
    assert f"this inventory ({inv}) is not a test fleet's (no group vfleet_test_fleet holds every host)" in out
    assert "NOT CHECKED" not in out and "Render each distinct serve profile" not in out and not pulled(out)


@pytest.mark.parametrize(
    "extra",
    [
        {"vfleet_node_test_fleet": True},
        {"vfleet_node__mark": {"test_fleet": True, "why": "forged"}},
    ],
)
def test_ansible_playbook_with_a_variable_for_the_mark_is_refused_before_the_lock(
    tmp_path: Path, extra: dict[str, Any]
) -> None:
    """The old mark variable and the mark's own fact passed with -e: refused before the plan and the lock."""
    inv = local_inventory(tmp_path)
    proc = playbook(inv, "rollout", _forged(vfleet_node_allow_unsigned=True, **extra))
    assert proc.returncode != 0
    out = proc.stdout
    name = next(iter(extra))
    assert f"{name}" in out and ("the test-fleet mark is no variable" in out or "nothing may stand in for it" in out), (
        out[-3000:]
    )
    assert "TASK [vfleet : Plan the run]" not in out and "Take the fleet lock" not in out, out[-3000:]


@pytest.mark.parametrize(
    ("book", "switch"),
    [("verify", {"vfleet_node_verify_argv": ["true"]}), ("rollback", {"vfleet_node_boot_verify": False})],
)
def test_ansible_playbook_refuses_the_switches_of_rollback_and_verify(
    tmp_path: Path, book: str, switch: dict[str, Any]
) -> None:
    inv = local_inventory(tmp_path)
    proc = playbook(inv, book, _forged(**switch))
    assert proc.returncode != 0
    out = proc.stdout
    assert f"gate-node: {next(iter(switch))} would turn off the boot-verify gate(s)" in out, out[-3000:]
    assert "NOT CHECKED" not in out and "[vfleet_node : Choose the rollback image]" not in out
    assert "[vfleet_node : Read the node state]" not in out and "[vfleet_node : Boot-verify the node]" not in out


def test_ansible_playbook_with_a_role_internal_name_is_refused(tmp_path: Path) -> None:
    """The switch check's own result passed in with -e (it outranks set_fact): the guard refuses it first."""
    inv = local_inventory(tmp_path)
    proc = playbook(inv, "rollout", _forged(vfleet_node_allow_unsigned=True, vfleet_node__switched=[]))
    assert proc.returncode != 0
    out = proc.stdout
    assert "vfleet_node__switched: set from outside the roles (-e or the inventory" in out, out[-3000:]
    assert "Run the preflight checks" not in out and "NOT CHECKED" not in out and not pulled(out)


def test_ansible_playbook_refuses_a_profile_that_is_not_production(tmp_path: Path) -> None:
    inv = local_inventory(tmp_path, profile="tiny/cpu")
    proc = playbook(inv, "rollout", {"vfleet_image": NOWHERE})
    assert proc.returncode != 0
    out = proc.stdout
    assert "gate-node: profile tiny/cpu is not a production profile (production: false in" in out, out[-3000:]
    assert "Check that the target image is promoted" not in out and not pulled(out)


# -- the group alone is no mark -------------------------------------------------------------------------


def test_the_group_added_by_hand_is_no_mark_for_the_cli(tmp_path: Path) -> None:
    """A production inventory with the group vfleet_test_fleet holding every host (the claim `vfleet fleet
    up` writes), whose node is no test-fleet container: every switch refused, naming why it is no mark.
    Before issue 31 the group alone let --allow-unsigned and every switch through."""
    inv = local_inventory(tmp_path, claimed=True, vfleet_node_verify_argv=["true"])
    proc = rollout(inv, "--allow-unsigned", "-e", "vfleet_node_check_promotion=false")
    assert proc.returncode == 2, proc.stdout[-3000:]
    out = proc.stdout
    assert (
        f"inventory {inv} (it is not a test fleet's: its group vfleet_test_fleet is no mark: not every host is a "
        "node `make fleet-up` started (gate-node is reached over local, not as a container of this controller's "
        "docker))" in out
    ), out
    assert "--allow-unsigned (vfleet_node_allow_unsigned): test fleets only" in out
    assert "-e vfleet_node_check_promotion: a test-fleet switch" in out
    assert f"vfleet_node_verify_argv: ['true'] in {inv} turns off the boot-verify gate" in out
    assert "PLAY [" not in out and "NOT CHECKED" not in out


def test_the_group_added_by_hand_is_no_mark_for_ansible_playbook(tmp_path: Path) -> None:
    """The same inventory run with ansible-playbook directly: the mark is judged through docker before the plan
    (no test fleet), and the switch stops the node at preflight, naming why."""
    inv = local_inventory(tmp_path, claimed=True)
    proc = playbook(inv, "rollout", {"vfleet_image": NOWHERE, "vfleet_node_allow_unsigned": True})
    assert proc.returncode != 0
    out = proc.stdout
    assert "not a test fleet: its group vfleet_test_fleet is no mark" in out, out[-3000:]
    assert "gate-node: vfleet_node_allow_unsigned would turn off the supply chain gate(s)" in out, out[-3000:]
    assert "gate-node is reached over local, not as a container of this controller's docker" in out
    assert "NOT CHECKED" not in out and not pulled(out)


def _write_record(tmp: Path, record: dict[str, Any]) -> None:
    """The node's deployed.json as deploy.yml writes it: signed by the controller for gate-node."""
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet", "deploy-record", "sign", "--node", "gate-node"],
        input=json.dumps(record), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    (tmp / "state").mkdir(exist_ok=True)
    (tmp / "state" / "deployed.json").write_text(proc.stdout)


def test_the_record_of_gates_not_checked_reaches_status_and_the_fleet_page(tmp_path: Path) -> None:
    """The deployment record (as deploy.yml writes it) read by the real status.yml: its not_checked list is
    in the status row, and the fleet page's gates cell says NOT CHECKED, not green."""
    inv = local_inventory(tmp_path, vfleet_node_container_name="vfleet-switches-no-such-container")
    line = SWITCHES["vfleet_node_allow_unsigned"].line()
    record = {"state": "deployed", "image": "r/x@sha256:" + "1" * 64, "profile": "tiny/cpu", "not_checked": [line]}
    _write_record(tmp_path, record)
    status = tmp_path / "status.json"
    proc = fleet(inv, "status", "--json", str(status))
    assert proc.returncode == 0, proc.stdout[-3000:]
    (row,) = json.loads(status.read_text())
    assert row["not_checked"] == [line], row
    cell = fleet_html.node_cells(row)["gates"]
    assert cell.state == "unknown" and cell.text == f"NOT CHECKED: {line}"
    record["not_checked"] = []
    _write_record(tmp_path, record)
    assert fleet(inv, "status", "--json", str(status)).returncode == 0
    (row,) = json.loads(status.read_text())
    assert row["not_checked"] == [] and fleet_html.node_cells(row)["gates"].state == "ok"


# -- the mark and the production rule, as the CLI reads an inventory -----------------------------------


def _listing(mark: list[str], profile: str = "tiny/cpu") -> dict[str, Any]:
    """`ansible-inventory --list` of two nodes and a balancer, MARK the hosts of vfleet_test_fleet."""
    return {
        "_meta": {"hostvars": {n: {"vfleet_node_profile": profile} for n in ("n1", "n2")}},
        "all": {"children": ["ungrouped", "vfleet_lb", "vfleet_nodes", "vfleet_test_fleet"]},
        "vfleet_lb": {"hosts": ["lb"]},
        "vfleet_nodes": {"children": ["cpu_x86"]},
        "cpu_x86": {"hosts": ["n1", "n2"]},
        "vfleet_test_fleet": {"hosts": mark},
    }


def test_the_claim_holds_every_host_and_is_still_no_mark_without_the_nodes() -> None:
    """The group must hold every host to be a claim at all; and a claim whose hosts are reached over SSH
    (no container of this controller's docker) is no mark: the switches are refused, naming why."""
    whole = fleet_inventory.parse(Path("inv"), _listing(["lb", "n1", "n2"]))
    assert whole.claims_test_fleet
    mark = fleet_inventory.mark_of(whole)
    assert not mark.test_fleet and "lb is reached over ssh, not as a container of this controller's docker" in mark.why
    with pytest.raises(VfleetError, match="-e vfleet_node_check_supply: a test-fleet switch"):
        fleet_inventory.check(whole, {"vfleet_node_check_supply": False}, allow_unsigned=True)
    part = fleet_inventory.parse(Path("inv"), _listing(["n1", "n2"]))  # the balancer is left out
    assert not part.claims_test_fleet
    assert fleet_inventory.mark_of(part).why == "no group vfleet_test_fleet holds every host"
    assert not fleet_inventory.parse(Path("inv"), _listing([])).claims_test_fleet


def test_a_production_profile_serves_outside_a_test_fleet(config_tree: ConfigTree) -> None:
    """The healthy case of the rule, and its fault: tiny made production passes on an unmarked inventory;
    as it is (production: false in its model.yaml) it is refused, naming the profile and its hosts."""
    unmarked = fleet_inventory.parse(Path("inv"), _listing([]))
    with pytest.raises(VfleetError, match=r"profile tiny/cpu \(n1, n2\): not a production profile"):
        fleet_inventory.check(unmarked, {})

    def production(d: dict[str, Any]) -> None:
        d["production"] = True
        na = d["verify"].get("not_applicable") or {}
        for key in ("test_gpu_health", "test_log[graph_mode]", "test_log[attention_backend]", "test_probes",
                    "test_answers"):  # fmt: skip
            na.pop(key, None)
        d["verify"].pop("gpu_health", None)
        # The production floors (vfleet/profile_floors.py): a floor of 5 tok/s per stream at every load level,
        # a probe (test_probes runs in production), a waiver that names its source.
        d["verify"].setdefault("load", {})["min_output_tok_per_s"] = {1: 5.0, 32: 160.0}
        d["verify"]["probes"] = [{"prompt": "What is 17 times 23? Only the number.", "expect": "391"}]
        d["waivers"][0]["source"] = "docs/upstream.md"
        d["verify"]["ab_not_worse"] = True  # rule production-ab-gate
        d["verify"]["answers"] = {"questions": "basic-v1"}  # rule production-answers-gate

    config_tree.edit("models/tiny/model.yaml", production)
    fleet_inventory.check(unmarked, {})


def test_the_example_inventory_is_read_as_ansible_reads_it() -> None:
    """A directory inventory (hosts.yml and group_vars) through ansible-inventory: production profiles on
    every node, no mark; a run is let through until a switch asks for a gate to be turned off."""
    inv = fleet_inventory.read(EXAMPLE)
    assert not inv.claims_test_fleet
    assert "b200-01.example.internal" in inv.hosts and inv.hostvars["b200-01.example.internal"]["vfleet_node_profile"]
    fleet_inventory.check(inv, {"vfleet_batch_size": 2})
    with pytest.raises(VfleetError, match=f"(?s)inventory {EXAMPLE} .*-e vfleet_node_boot_verify: a test-fleet switch"):
        fleet_inventory.check(inv, {"vfleet_node_boot_verify": True})
    assert fleet_inventory.not_checked(inv, {}, "rollout") == []


def test_the_inventory_is_read_at_any_ansible_verbosity(monkeypatch: pytest.MonkeyPatch) -> None:
    """At ANSIBLE_VERBOSITY=4 (as an operator debugging a rollout sets it) ansible-inventory prints its
    banner on stdout before the JSON; the listing is read from its own file, so the inventory still reads
    the same as at verbosity 0."""
    quiet = fleet_inventory.read(EXAMPLE)
    monkeypatch.setenv("ANSIBLE_VERBOSITY", "4")
    loud = fleet_inventory.read(EXAMPLE)
    assert loud.groups == quiet.groups and loud.hostvars == quiet.hostvars
