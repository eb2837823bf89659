"""What `vfleet fleet rollout|rollback|verify` reads from the inventory before ansible-playbook starts
(docs/fleet.md, "What a fleet may set" and "Test-fleet switches"): whether it is a test fleet's (every
host a node `make fleet-up` started: vfleet/fleet/mark.py), the role inputs it and the command line
set, and the serve profiles of its nodes.

The roles' tables, in ansible/roles/vfleet_node/vars/main.yml and read from there: vfleet_node__inputs,
the allow-list of what a fleet may set (from the inventory, and where it says so from the command line);
vfleet_node__switches, what only a test fleet may set (a switch turns a gate off, an override changes what
it checks); vfleet_node__refused, names no inventory and no -e may set, each with why. Any other vfleet_
variable is refused too, as a name the roles compute or as no input at all. The CLI reads the inventory
through `ansible-inventory --list`, so it sees the groups and variables ansible-playbook will see (YAML,
INI, a directory with group_vars), and refuses here, naming the variable and the inventory files that set
it. The playbooks refuse the same again (ansible/roles/vfleet_node/tasks/inputs.yml, mark.yml and
switches.yml, vfleet/tasks/guard.yml), so ansible-playbook run directly cannot be talked around it either.
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
from vfleet.fleet.mark import TEST_FLEET_GROUP, HostSpec, Mark, judge
from vfleet.profiles import Catalog

__all__ = ["TEST_FLEET_GROUP", "Inventory", "Mark", "check", "mark_of", "not_checked", "read", "refusals", "switches"]

#: Where a role input comes from, as vfleet_node__inputs writes it.
INVENTORY = "inventory"
COMMAND_LINE = "command line"
#: Names the roles compute or pass between them (set_fact, register, the playbooks' and task files' own
#: vars): an extra var of one would stand in for a gate's input or result. ansible/roles/vfleet/tasks/
#: guard.yml has the same pattern; tests/integration/ops/test_fleet_switches.py checks that it covers every such name.
INTERNAL_PARTS = (
    r"^(vfleet(_node|_lb)?__|vfleet_(plan|rows|ok_fact|ok_what|lock_for)$|vfleet_node_status$",
    r"|vfleet_lb_(in_pool|pool|status|drain|servers?|address|port)$)",
)
INTERNAL_RE = re.compile("".join(INTERNAL_PARTS))
#: The playbooks whose runs read the inventory first, and the group a run targets by default.
CHECKED = ("rollout", "rollback", "verify")
NODES = "vfleet_nodes"


@dataclass(frozen=True)
class Switch:
    """One row of vfleet_node__switches: VALUE == skips_when ("nonempty": any non-empty list; "set": any
    value at all, an override) turns GATE off or changes what it checks."""

    name: str
    gate: str
    skips_when: bool | str
    why: str
    playbooks: tuple[str, ...]

    def line(self) -> str:
        return f"{self.gate}: {self.why}"

    def skips(self, value: Any) -> bool:
        """Whether VALUE turns the gate off; a template (which only Ansible can evaluate) counts as off."""
        if _templated(value) or self.skips_when == "set":
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


def _table(name: str) -> dict[str, Any]:
    table = role_file("vfleet_node", "vars").get(name)
    if not isinstance(table, dict) or not table:
        raise VfleetError(f"ansible/roles/vfleet_node/vars/main.yml: {name} is missing or empty")
    return table


def switches() -> dict[str, Switch]:
    """The switch table of the node role (its vars/main.yml), the one place it is written."""
    return {
        name: Switch(name, str(s["gate"]), s["skips_when"], str(s["why"]), tuple(s["playbooks"]))
        for name, s in _table("vfleet_node__switches").items()
    }


@dataclass(frozen=True)
class Input:
    """One row of the allow-list vfleet_node__inputs: a variable a fleet may set, from where, and why."""

    name: str
    sources: tuple[str, ...]
    why: str


def inputs() -> dict[str, Input]:
    """The allow-list of role inputs (vfleet_node__inputs of the node role's vars/main.yml)."""
    return {n: Input(n, tuple(r["from"]), str(r["why"])) for n, r in _table("vfleet_node__inputs").items()}


def refused() -> dict[str, str]:
    """Names no inventory and no -e may set, each with why and the fix (vfleet_node__refused)."""
    return {n: str(why) for n, why in _table("vfleet_node__refused").items()}


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
    def claims_test_fleet(self) -> bool:
        """Its group vfleet_test_fleet holds every host: the claim `make fleet-up` writes, not yet the mark."""
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


def mark_of(inv: Inventory) -> Mark:
    """The test-fleet mark of INV as it is: the claim (the group) and every host a node of `make fleet-up`."""
    return judge(inv.claims_test_fleet, [HostSpec.of(h, inv.hostvars[h]) for h in sorted(inv.hosts)])


def _hosts(names: list[str], of: list[str]) -> str:
    return "" if sorted(names) == sorted(of) else f" (on {', '.join(sorted(names))})"


def sources(path: Path, name: str) -> list[str]:
    """The files of the inventory PATH (a file, or a directory with group_vars and host_vars) that write NAME;
    the inventory itself when none can be told (a plugin, a vault)."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    pattern = re.compile(rf"(^|[\s{{,'\"]){re.escape(name)}['\"]?\s*[:=]", re.MULTILINE)
    found = []
    for f in files:
        try:
            if pattern.search(f.read_text(errors="replace")):
                found.append(str(f))
        except OSError:
            continue
    return found or [str(path)]


def _why_refused(name: str, where: str, test_fleet: bool) -> str:
    """Why NAME may not be set from WHERE (INVENTORY, COMMAND_LINE) on this inventory ('' when it may)."""
    allowed = inputs()
    if name in allowed:
        if where in allowed[name].sources:
            return ""
        return f"may be set only from {' or '.join(allowed[name].sources)} ({allowed[name].why})"
    if name in refused():
        return refused()[name]
    if name in switches():
        return "" if test_fleet else "a test-fleet switch or override, refused on any other inventory; remove it"
    if INTERNAL_RE.match(name):
        # A test fleet may pass one to inject a fault the real thing cannot produce (tests/e2e).
        return "" if test_fleet else "a name the roles compute (a gate's input or result); remove it"
    if name.startswith("vfleet_"):
        return "no input of the roles (a typo?): docs/fleet.md, What a fleet may set, lists them; remove it"
    return ""


def refusals(
    inv: Inventory, user_extra: dict[str, Any], allow_unsigned: bool = False, mark: Mark | None = None
) -> list[str]:
    """What the command line and the inventory set that this inventory may not have, each naming the
    variable (and the inventory files that set it) and what to do: a switch or override of a test fleet
    on any other inventory, a refused name, a name the roles compute, a name that is no input, a value
    from a place its row does not allow."""
    mark = mark or mark_of(inv)
    table = switches()
    out: list[str] = []
    for name in sorted(user_extra):
        if name in table and not mark.test_fleet:
            out.append(
                f"-e {name}: a test-fleet switch ({table[name].gate} gate), refused on the command line for "
                "an inventory that is not a test fleet's, whatever its value; remove it"
            )
        elif why := _why_refused(name, COMMAND_LINE, mark.test_fleet):
            out.append(f"-e {name}: {why}")
    if allow_unsigned and not mark.test_fleet:
        out.append(
            "--allow-unsigned (vfleet_node_allow_unsigned): test fleets only; sign the image (`vfleet image sign "
            "REF --key PRIV`, or `vfleet image build --sign-key`) and name its public key with "
            "--trusted-key provenance=PUB"
        )
    nodes = sorted(inv.hosts)
    for name in sorted({k for h in nodes for k in inv.hostvars[h] if k.startswith("vfleet_")}):
        on = [h for h in nodes if name in inv.hostvars[h]]
        where = f"in {', '.join(sources(inv.path, name))}{_hosts(on, nodes)}"
        if name in table:
            skipping = [h for h in on if table[name].skips(inv.hostvars[h][name])]
            if skipping and not mark.test_fleet:
                sw = table[name]
                out.append(
                    f"{name}: {inv.hostvars[skipping[0]][name]!r} {where} turns off the {sw.gate} gate "
                    f"({sw.why}); remove it from the inventory"
                )
        elif why := _why_refused(name, INVENTORY, mark.test_fleet):
            out.append(f"{name} {where}: {why}")
    return out


def production_problems(inv: Inventory, user_extra: dict[str, Any], mark: Mark | None = None) -> list[str]:
    """Every serve profile of the inventory's nodes must be a production one unless the inventory is a
    test fleet's (issue 21): a profile that is not may excuse the log checks and GPU health."""
    test_fleet = (mark or mark_of(inv)).test_fleet
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
        if not prof.production and not test_fleet:
            out.append(
                f"{where}: not a production profile (production: false in serve_configs/models/{prof.model}/"
                "model.yaml), and only a test fleet's inventory may serve one; serve a production profile on "
                "these hosts, or run on a test fleet (`make fleet-up`)"
            )
    return out


def check(inv: Inventory, user_extra: dict[str, Any], allow_unsigned: bool = False, mark: Mark | None = None) -> Mark:
    """Refuse the run, naming the inventory, why it is or is not a test fleet's, and every variable at
    fault, before ansible-playbook starts. Returns the mark it judged."""
    mark = mark or mark_of(inv)
    problems = refusals(inv, user_extra, allow_unsigned, mark) + production_problems(inv, user_extra, mark)
    if problems:
        state = "it is a test fleet's" if mark.test_fleet else "it is not a test fleet's"
        raise VfleetError(
            f"inventory {inv.path} ({state}: {mark.why}): refused before ansible-playbook starts:\n  "
            + "\n  ".join(problems)
        )
    return mark


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
