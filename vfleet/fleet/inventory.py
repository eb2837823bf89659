"""What `vfleet fleet rollout|rollback|verify` reads from the inventory before ansible-playbook starts
(docs/fleet.md, "Test-fleet switches"): whether it is a test fleet's, the switches that turn a gate off,
and the serve profiles of its nodes.

A switch (vfleet_node_allow_unsigned, vfleet_node_check_supply, ..., the table vfleet_node__switches in
ansible/roles/vfleet_node/vars/main.yml, read from there) turns a gate of the rollout off. It is
honoured only on a test fleet's inventory, one whose group vfleet_test_fleet holds every host: the mark
`vfleet fleet up` writes. Every profile of any other inventory must be a production one. The CLI reads
the inventory through `ansible-inventory --list`, so it sees the groups and variables ansible-playbook
will see (YAML, INI, a directory with group_vars), and refuses here, naming the inventory and the
variable; a switch on the command line (-e, --allow-unsigned) is refused on any other inventory even
with the gate's own default value: the switches belong to the inventory. The playbooks check the
same mark again from Ansible's `groups`, which no extra var overrides, so ansible-playbook run directly
cannot be talked around it either (ansible/roles/vfleet_node/tasks/switches.yml, vfleet/tasks/guard.yml).
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfleet.errors import ProfileError, VfleetError
from vfleet.fleet.ansible import ansible_dir, bin_dir, env, role_file
from vfleet.profiles import Catalog

#: The test-fleet mark: an inventory group that holds every host of the inventory.
TEST_FLEET_GROUP = "vfleet_test_fleet"
#: The variable that was the mark before issue 21; any -e could set it, so it is refused on the command line.
OLD_MARK = "vfleet_node_test_fleet"
#: Names the roles compute or pass between them (set_fact, register, the playbooks' and task files' own
#: vars): an extra var of one would stand in for a gate's input or result. ansible/roles/vfleet/tasks/
#: guard.yml has the same pattern; tests/integration/test_fleet_switches.py checks that it covers every such name.
INTERNAL_PARTS = (
    r"^(vfleet(_node|_lb)?__|vfleet_(plan|rows|ok_fact|ok_what|lock_for)$|vfleet_node_status$",
    r"|vfleet_lb_(in_pool|status|drain|servers?|address|port)$)",
)
INTERNAL_RE = re.compile("".join(INTERNAL_PARTS))
#: The playbooks whose runs read the inventory first, and the group a run targets by default.
CHECKED = ("rollout", "rollback", "verify")
NODES = "vfleet_nodes"


@dataclass(frozen=True)
class Switch:
    """One row of vfleet_node__switches: VALUE == skips_when ("nonempty": any non-empty list) turns GATE off."""

    name: str
    gate: str
    skips_when: bool | str
    why: str
    playbooks: tuple[str, ...]

    def line(self) -> str:
        return f"{self.gate}: {self.why}"

    def skips(self, value: Any) -> bool:
        """Whether VALUE turns the gate off; a template (which only Ansible can evaluate) counts as off."""
        if _templated(value):
            return True
        if self.skips_when == "nonempty":
            return bool(value)
        return _truthy(value) is self.skips_when


def _templated(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _truthy(value: Any) -> bool:
    """Ansible's `bool` filter, as far as a switch needs it."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    return bool(value)


def switches() -> dict[str, Switch]:
    """The switch table of the node role (its vars/main.yml), the one place it is written."""
    table = role_file("vfleet_node", "vars").get("vfleet_node__switches")
    if not isinstance(table, dict) or not table:
        raise VfleetError("ansible/roles/vfleet_node/vars/main.yml: vfleet_node__switches is missing or empty")
    return {
        name: Switch(name, str(s["gate"]), s["skips_when"], str(s["why"]), tuple(s["playbooks"]))
        for name, s in table.items()
    }


@dataclass(frozen=True)
class Inventory:
    """An inventory as ansible-inventory resolves it: every group's hosts (child groups included) and
    every host's variables."""

    path: Path
    groups: dict[str, frozenset[str]]
    hostvars: dict[str, dict[str, Any]]

    @property
    def hosts(self) -> frozenset[str]:
        return self.groups.get("all", frozenset())

    @property
    def is_test_fleet(self) -> bool:
        marked = self.groups.get(TEST_FLEET_GROUP, frozenset())
        return bool(marked) and self.hosts <= marked

    def group(self, name: str) -> list[str]:
        return sorted(self.groups.get(name, frozenset()))


def parse(path: Path, listing: dict[str, Any]) -> Inventory:
    """An Inventory from the JSON of `ansible-inventory --list`."""
    flat: dict[str, frozenset[str]] = {}

    def hosts_of(name: str, seen: frozenset[str]) -> frozenset[str]:
        if name in flat:
            return flat[name]
        entry = listing.get(name) or {}
        out = set(entry.get("hosts") or [])
        for child in entry.get("children") or []:
            if child not in seen:
                out |= hosts_of(child, seen | {name})
        flat[name] = frozenset(out)
        return flat[name]

    for name in listing:
        if name != "_meta":
            hosts_of(name, frozenset())
    hostvars = (listing.get("_meta") or {}).get("hostvars") or {}
    return Inventory(path, flat, {h: dict(hostvars.get(h) or {}) for h in flat.get("all", frozenset())})


def read(path: Path, vault_password_file: Path | None = None) -> Inventory:
    """Read PATH as ansible-playbook will (`ansible-inventory --list`, with the same settings). The listing
    is written to a file of its own (--output): at ANSIBLE_VERBOSITY >= 1 ansible-inventory prints its
    banner and config lines on stdout before the JSON."""
    with tempfile.TemporaryDirectory(prefix="vfleet-inventory-") as tmp:
        out = Path(tmp) / "listing.json"
        argv = [str(bin_dir() / "ansible-inventory"), "-i", str(path), "--list", "--output", str(out)]
        if vault_password_file:
            argv += ["--vault-password-file", str(vault_password_file)]
        proc = subprocess.run(
            argv, env=env(), cwd=str(ansible_dir()), capture_output=True, text=True, timeout=300, check=False
        )
        if proc.returncode != 0:
            detail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise VfleetError(
                f"inventory {path}: ansible-inventory cannot read it ({detail}); fix the inventory "
                "(or pass --vault-password-file for its vault)"
            )
        try:
            listing = json.loads(out.read_text())
        except (OSError, ValueError) as exc:
            raise VfleetError(f"inventory {path}: ansible-inventory --list wrote no JSON ({exc})") from exc
    return parse(path, listing)


def _hosts(names: list[str], of: list[str]) -> str:
    return "" if sorted(names) == sorted(of) else f" (on {', '.join(sorted(names))})"


def refusals(inv: Inventory, user_extra: dict[str, Any], allow_unsigned: bool = False) -> list[str]:
    """What the command line and the inventory ask that this inventory may not have: test-fleet switches,
    role-internal extra vars and the old mark on the command line; gates turned off in the inventory
    of a fleet that is not a test fleet. Each names the variable and what to do."""
    table = switches()
    out: list[str] = []
    if OLD_MARK in user_extra:
        out.append(
            f"-e {OLD_MARK}: the test-fleet mark is no variable (any -e could set one): it is the inventory "
            f"group {TEST_FLEET_GROUP} holding every host, which `vfleet fleet up` writes; remove the -e"
        )
    if inv.is_test_fleet:
        return out
    for name in sorted(user_extra):
        if name in table:
            out.append(
                f"-e {name}: a test-fleet switch ({table[name].gate} gate), refused on the command line for "
                "an inventory that is not a test fleet's, whatever its value; remove it"
            )
        elif INTERNAL_RE.match(name):
            out.append(f"-e {name}: a name the roles compute (a gate's input or result); remove it")
    if allow_unsigned:
        out.append(
            "--allow-unsigned (vfleet_node_allow_unsigned): test fleets only; sign the image (`vfleet image sign "
            "REF --key PRIV`, or `vfleet image build --sign-key`) and name its public key with --trusted-key PUB"
        )
    nodes = sorted(inv.hosts)
    for name, sw in table.items():
        on = [h for h in nodes if name in inv.hostvars[h] and sw.skips(inv.hostvars[h][name])]
        if on:
            out.append(
                f"{name}: {inv.hostvars[on[0]][name]!r}{_hosts(on, nodes)} turns off the {sw.gate} gate "
                f"({sw.why}); remove it from the inventory"
            )
    for name in sorted({k for h in nodes for k in inv.hostvars[h] if INTERNAL_RE.match(k)}):
        out.append(f"{name}: set in the inventory, a name the roles compute (a gate's input or result); remove it")
    return out


def production_problems(inv: Inventory, user_extra: dict[str, Any]) -> list[str]:
    """Every serve profile of the inventory's nodes must be a production one unless the inventory is a
    test fleet's (issue 21): a profile that is not may excuse the log checks and GPU health."""
    by_profile: dict[str, list[str]] = {}
    for host in sorted(inv.hosts):
        profile = user_extra.get("vfleet_node_profile", inv.hostvars[host].get("vfleet_node_profile"))
        if profile:
            by_profile.setdefault(str(profile), []).append(host)
    if not by_profile:
        return []
    catalog = Catalog()
    out: list[str] = []
    for name, hosts in sorted(by_profile.items()):
        where = f"profile {name} ({', '.join(hosts)})"
        if _templated(name):
            out.append(f"{where}: a template, which the CLI cannot check; write the profile name")
            continue
        try:
            prof = catalog.load(name)
        except ProfileError as exc:
            out.append(f"{where}: {exc}")
            continue
        if not prof.production and not inv.is_test_fleet:
            out.append(
                f"{where}: not a production profile (production: false in serve_configs/models/{prof.model}/"
                "model.yaml), and only a test fleet's inventory may serve one; serve a production profile on "
                "these hosts, or run on a test fleet (`vfleet fleet up`)"
            )
    return out


def check(inv: Inventory, user_extra: dict[str, Any], allow_unsigned: bool = False) -> None:
    """Refuse the run, naming the inventory and every variable at fault, before ansible-playbook starts."""
    problems = refusals(inv, user_extra, allow_unsigned) + production_problems(inv, user_extra)
    if problems:
        mark = "it is a test fleet's"
        if not inv.is_test_fleet:
            mark = f"it is not a test fleet's: no group {TEST_FLEET_GROUP} holds every host, the mark "
            mark += "`vfleet fleet up` writes"
        raise VfleetError(
            f"inventory {inv.path} ({mark}): refused before ansible-playbook starts:\n  " + "\n  ".join(problems)
        )


def not_checked(inv: Inventory, extra: dict[str, Any], playbook: str, targets: str = NODES) -> list[str]:
    """The gates a run of PLAYBOOK does not check, as `GATE: WHY`, naming the hosts where not all of
    TARGETS have it (the lines switches.yml prints and the deployment records keep)."""
    nodes = inv.group(targets) or sorted(inv.hosts)
    out: list[str] = []
    for name, sw in switches().items():
        if playbook not in sw.playbooks:
            continue
        if name in extra:
            on = nodes if sw.skips(extra[name]) else []
        else:
            on = [h for h in nodes if name in inv.hostvars.get(h, {}) and sw.skips(inv.hostvars[h][name])]
        if on:
            out.append(sw.line() + _hosts(on, nodes))
    return out
