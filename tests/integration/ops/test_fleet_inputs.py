"""Issue 31, item 1: role inputs by allow-list (vfleet_node__inputs, vfleet_node__switches and
vfleet_node__refused in ansible/roles/vfleet_node/vars/main.yml), on the real rollout.yml with one node
that is this machine (tests/support/fleet.py: a production inventory, no test fleet, no container).

The command behind every gate (vfleet_node_vfleet_cmd), the paths the gates read, the addresses the
checks talk to, the lock and the run id are no inputs: set with -e or in the inventory they are refused
before ansible-playbook starts (naming the variable and the inventory file) and, with ansible-playbook run
directly, before the plan and the lock. The CLI's own --trusted-key and --supply-store still reach the
gates (tests/integration/build/test_supply_gate.py runs them on this inventory). The tables cover every default of
the roles, and docs/fleet.md lists them as they are."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from conftest import REPO
from support.fleet import NOWHERE, fleet, local_inventory, playbook, pulled, rollout

from vfleet.fleet import inventory as fleet_inventory
from vfleet.fleet.ansible import ansible_dir

INPUTS = fleet_inventory.inputs()
SWITCHES = fleet_inventory.switches()
REFUSED = fleet_inventory.refused()
#: Variables of the playbooks themselves (no role default): the image, the status file, the fleet's name.
PLAYBOOK_INPUTS = {"vfleet_image", "vfleet_status_file", "vfleet_fleet_name"}
#: A stand-in for the command behind every gate: it passes anything.
STAND_IN = ["sh", "-c", 'echo \'{"verified": true, "image_id": "sha256:00"}\'']


def _defaults() -> set[str]:
    roles = ansible_dir() / "roles"
    return {k for p in roles.glob("*/defaults/main.yml") for k in yaml.safe_load(p.read_text()) or {}}


def test_every_default_of_the_roles_is_in_one_table() -> None:
    """Each role default is an input a fleet may set, a test fleet's switch or override, or refused, and
    only one of them; each table row names a variable that exists (or one refused because it is gone)."""
    tables = [set(INPUTS), set(SWITCHES), set(REFUSED)]
    for a, b in ((0, 1), (0, 2), (1, 2)):
        assert not tables[a] & tables[b], f"in two tables: {tables[a] & tables[b]}"
    defaults = _defaults()
    assert not defaults - set().union(*tables), f"role defaults in no table: {defaults - set().union(*tables)}"
    assert not (set(INPUTS) | set(SWITCHES)) - defaults - PLAYBOOK_INPUTS, "a row names no variable of the roles"
    for name, row in INPUTS.items():
        assert row.sources and set(row.sources) <= {"inventory", "command line", "vfleet fleet"}, name
        assert row.why, name
    for name in ("vfleet_node_hf_token", "vfleet_node_api_key"):
        assert INPUTS[name].sources == ("inventory",), f"{name}: a secret on a command line"


def test_the_refused_inputs_are_no_defaults_an_operator_could_think_settable() -> None:
    """The command, the keys, the store and the docker root are gone from the defaults (role vars or
    derived now); the lock path and the run ids stay defaults the roles read, refused as inputs."""
    defaults = _defaults()
    for name in ("vfleet_node_vfleet_cmd", "vfleet_node_trusted_keys", "vfleet_node_supply_store"):
        assert name not in defaults and name in REFUSED
    node_vars = yaml.safe_load((ansible_dir() / "roles" / "vfleet_node" / "vars" / "main.yml").read_text())
    # A role constant taken from the controller's own interpreter (its venv's vfleet), never from an input; the
    # value itself is written once, in the role's vars.
    cmd = node_vars["vfleet_node_vfleet_cmd"]
    assert isinstance(cmd, list) and cmd and "ansible_playbook_python" in cmd[0], cmd


def test_every_refused_input_on_the_command_line_is_refused_before_ansible_starts(tmp_path: Path) -> None:
    """All at once, each named: the refused names, a secret, a lock break standing in the command line's
    stead is fine, and a name that is no input. On main, vfleet_node_vfleet_cmd and the others went through."""
    inv = local_inventory(tmp_path)
    args: list[str] = []
    for name in REFUSED:
        args += ["-e", f"{name}={json.dumps(STAND_IN if name == 'vfleet_node_vfleet_cmd' else '/tmp/x')}"]
    args += ["-e", "vfleet_node_api_key=sk-test", "-e", "vfleet_node_hostport=8001", "-e", "vfleet_run_id=r1"]
    proc = rollout(inv, *args)
    assert proc.returncode == 2, proc.stdout[-3000:]
    out = proc.stdout
    for name, why in REFUSED.items():
        assert f"-e {name}: {' '.join(why.split())}" in out, (name, out[-3000:])
    assert "-e vfleet_node_api_key: may be set only from inventory (a secret, from the vault" in out
    assert "-e vfleet_run_id: may be set only from vfleet fleet" in out
    assert "-e vfleet_node_hostport: no input of the roles (a typo?)" in out
    assert "PLAY [" not in out


def test_every_refused_input_in_the_inventory_is_refused_naming_the_file(tmp_path: Path) -> None:
    """The same names in the inventory's group vars; each refusal names the inventory file that sets it,
    and the test-fleet overrides (the node's address, its docker host, the promotions file, the free disk)
    are refused as switches of a test fleet."""
    overrides = {
        "vfleet_node_address": "10.0.0.9",
        "vfleet_node_docker_host": "tcp://10.0.0.9:2375",
        "vfleet_node_promotions_file": str(tmp_path / "forged.jsonl"),
        "vfleet_node_min_free_gb": 1,
    }
    refused = {name: (STAND_IN if name == "vfleet_node_vfleet_cmd" else "/tmp/x") for name in REFUSED}
    inv = local_inventory(tmp_path, **refused, **overrides)
    proc = rollout(inv)
    assert proc.returncode == 2, proc.stdout[-3000:]
    out = proc.stdout
    for name, why in REFUSED.items():
        assert f"{name} in {inv}: {' '.join(why.split())}" in out, (name, out[-3000:])
    for name, value in overrides.items():
        assert f"{name}: {value!r} in {inv} turns off the {SWITCHES[name].gate} gate" in out, (name, out[-3000:])
    assert "PLAY [" not in out


def test_ansible_playbook_refuses_a_stand_in_gate_command_before_the_lock(tmp_path: Path) -> None:
    """The finding: a stand-in vfleet_node_vfleet_cmd in the inventory (or -e) made the preflight pass an
    unsigned, unpromoted image on an inventory without the test-fleet mark. Run directly, the playbook now
    stops before the plan and the lock, naming each variable; no gate ran the stand-in."""
    inv = local_inventory(tmp_path, vfleet_node_vfleet_cmd=STAND_IN)
    extra = {"vfleet_image": NOWHERE, "vfleet_lock_path": str(tmp_path / "other-lock.json"), "vfleet_node_image": "x"}
    proc = playbook(inv, "rollout", extra)
    assert proc.returncode != 0
    out = proc.stdout
    refusal = "vfleet_node_vfleet_cmd (on gate-node): the command behind every gate is the controller's own vfleet"
    assert refusal in out, out[-3000:]
    assert "vfleet_lock_path (on " in out and "another path would be another lock" in out, out[-3000:]
    assert "vfleet_node_image (on " in out
    assert "TASK [vfleet : Plan the run]" not in out and not (tmp_path / "other-lock.json").exists()
    assert "promote', '--check" not in out and not pulled(out)


def test_the_docs_list_every_input_switch_and_refused_name() -> None:
    """docs/fleet.md's tables are the role's tables: each row of vfleet_node__inputs, vfleet_node__switches
    and vfleet_node__refused has its line there, and the docs name no other variable in those tables."""
    text = (REPO / "docs" / "fleet.md").read_text()

    def rows(heading: str) -> set[str]:
        part = text.split(heading, 1)[1].split("\n\n", 2)[1]
        return set(re.findall(r"^\| `(vfleet_\w+)`", part, re.MULTILINE))

    assert rows("<!-- table: inputs -->") == set(INPUTS)
    assert rows("<!-- table: switches -->") == set(SWITCHES)
    assert rows("<!-- table: refused -->") == set(REFUSED)
    for name, sw in SWITCHES.items():
        assert f"| `{name}` |" in text and sw.gate in text, name


def test_the_ansible_verbosity_reaches_the_playbooks_and_the_make_targets(tmp_path: Path) -> None:
    """`--ansible-verbosity N` (make ... VERBOSE=N) sets Ansible's verbosity of the run; without it, Ansible's
    default (and the operator's ANSIBLE_VERBOSITY, which the CLI leaves alone)."""
    inv = local_inventory(tmp_path, vfleet_node_container_name="vfleet-verbosity-no-such-container")
    quiet = fleet(inv, "status")
    loud = fleet(inv, "status", "--ansible-verbosity", "3")
    assert quiet.returncode == 0 and loud.returncode == 0, (quiet.stdout[-2000:], loud.stdout[-2000:])
    assert "ESTABLISH LOCAL CONNECTION" not in quiet.stdout
    assert "ESTABLISH LOCAL CONNECTION" in loud.stdout
    bad = fleet(inv, "status", "--ansible-verbosity", "9")
    assert bad.returncode == 2 and "invalid choice: 9" in bad.stdout, bad.stdout[-500:]
    make = (REPO / "Makefile").read_text()
    for target in ("rollout", "rollback", "fleet-verify", "fleet-status"):
        recipe = make.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
        assert "$(ANSIBLE_V)" in recipe or "$(FLEET_OPTS)" in recipe, target
    assert "ANSIBLE_V = $(if $(VERBOSE),--ansible-verbosity $(VERBOSE))" in make
