"""A fleet run: one playbook (rollout, rollback, verify, status, lb) on an inventory, through its gates.

`vfleet fleet ACTION` parses its arguments into a FleetRequest, once, and hands it to `run`: what the inventory
and `-e` may set is checked against the allow-list, the run id is this process's own, the gates' keys and
supply store reach the playbooks through the environment (never `-e`), and a failed run releases its own lock
and shows where the nodes stand (docs/fleet.md).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vfleet.errors import VfleetError
from vfleet.fleet.ansible import check_paths, forks_for, limit_hosts, role_defaults, run_playbook, with_controller

if TYPE_CHECKING:
    from vfleet.fleet import inventory as fleet_inventory

# The rest is imported where it is used: the playbooks start the controller's vfleet once per gate and node,
# and its start-up is every run's cost (vfleet/cli.py).

#: The playbooks that change or check what nodes run: a failed one releases its lock and shows the nodes.
CHANGING = ("rollout", "rollback", "verify")


@dataclass(frozen=True)
class FleetRequest:
    """What one `vfleet fleet ACTION` asks for, as parsed from its command line."""

    action: str
    inventory: Path
    extra_vars: tuple[str, ...] = ()
    vault_password_file: Path | None = None
    image: str | None = None
    batch_size: str | None = None
    max_out_of_pool: int | None = None
    max_fail_percentage: int | None = None
    max_failed_nodes: int | None = None
    trusted_keys: tuple[str, ...] = ()
    supply_store: Path | None = None
    allow_unsigned: bool = False
    break_lock: bool = False
    targets: str | None = None
    limit: str | None = None
    ansible_verbosity: int | None = None
    status_json: Path | None = None
    status_html: Path | None = None

    @classmethod
    def from_args(cls, args: Any) -> FleetRequest:
        """The request of a parsed `vfleet fleet ACTION` command line (each action has its own options)."""

        def opt(name: str, default: Any = None) -> Any:
            return getattr(args, name, default)

        return cls(
            action=args.fleet_command,
            inventory=args.inventory.resolve(),
            extra_vars=tuple(opt("extra_var", ()) or ()),
            vault_password_file=opt("vault_password_file"),
            image=opt("image"),
            batch_size=opt("batch_size"),
            max_out_of_pool=opt("max_out_of_pool"),
            max_fail_percentage=opt("max_fail_percentage"),
            max_failed_nodes=opt("max_failed_nodes"),
            trusted_keys=tuple(opt("trusted_key", ()) or ()),
            supply_store=opt("supply_store"),
            allow_unsigned=bool(opt("allow_unsigned", False)),
            break_lock=bool(opt("break_lock", False)),
            targets=opt("targets"),
            limit=opt("limit"),
            ansible_verbosity=opt("ansible_verbosity"),
            status_json=opt("json"),
            status_html=opt("html"),
        )

    @property
    def status_file(self) -> Path | None:
        """Where the status playbook writes its JSON: --json, else beside the --html page."""
        if self.status_json is not None:
            return self.status_json.resolve()
        if self.status_html is not None:
            return self.status_html.with_suffix(".status.json").resolve()
        return None


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def parse_extra(pairs: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """`-e KEY=VALUE` pairs (VALUE may be JSON) as a dict."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise VfleetError(f"--extra-var {pair!r}: write KEY=VALUE (VALUE may be JSON)")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def extra_vars(req: FleetRequest, user: dict[str, Any]) -> dict[str, Any]:
    """The run's extra vars: the user's `-e` (already checked against the allow-list) and the options'."""
    extra = dict(user)
    if req.max_out_of_pool is not None and req.max_out_of_pool < 1:
        raise VfleetError(f"--max-out-of-pool {req.max_out_of_pool}: give 1 or more nodes")
    named: dict[str, Any] = {
        "vfleet_image": req.image or None,
        "vfleet_batch_size": req.batch_size or None,
        "vfleet_verify_max_out_of_pool": req.max_out_of_pool,
        "vfleet_max_fail_percentage": req.max_fail_percentage,
        "vfleet_max_failed_nodes": req.max_failed_nodes,
        "vfleet_node_allow_unsigned": True if req.allow_unsigned else None,
        "vfleet_lock_break": True if req.break_lock else None,
        "vfleet_targets": req.targets or None,
    }
    extra.update({k: v for k, v in named.items() if v is not None})
    if req.status_file is not None:
        extra["vfleet_status_file"] = str(req.status_file)
    return extra


def handed_env(req: FleetRequest) -> dict[str, str]:
    """What reaches the playbooks through the environment, which no `-e` reaches: the gates' trusted keys and
    supply store (always set, so that no value left in the operator's environment stands in for them), and
    Ansible's verbosity (ansible/roles/vfleet_node/vars/main.yml)."""
    from vfleet.supply.statements import normalized as trusted_specs  # noqa: PLC0415

    handed: dict[str, str] = {"VFLEET_FLEET_TRUSTED_KEYS": "[]", "VFLEET_FLEET_SUPPLY_STORE": ""}
    if req.trusted_keys:
        specs = trusted_specs(list(req.trusted_keys))  # a malformed ROLE=PUB fails here, for every action
        if req.action in ("rollout", "rollback", "verify"):  # the gates and verify's promotion look-up (weights)
            handed["VFLEET_FLEET_TRUSTED_KEYS"] = json.dumps(specs)
    if req.supply_store is not None and req.action in ("rollout", "rollback"):
        handed["VFLEET_FLEET_SUPPLY_STORE"] = str(req.supply_store.resolve())
    if req.ansible_verbosity is not None:
        handed["ANSIBLE_VERBOSITY"] = str(req.ansible_verbosity)
    return handed


def run(req: FleetRequest) -> int:
    """Run the request's playbook; returns its exit status."""
    from vfleet.fleet import inventory as fleet_inventory  # noqa: PLC0415

    if req.action == "lb":
        return run_playbook("lb", req.inventory, {}, None, req.vault_password_file).returncode
    user = parse_extra(req.extra_vars)
    inv = None
    if req.action in fleet_inventory.CHECKED:
        # What the inventory and -e may set (the allow-list), the test-fleet switches on a fleet that is not
        # one (checked through docker) and non-production profiles, refused here (the playbooks refuse them
        # again: docs/fleet.md).
        check_paths(req.action, req.inventory)
        inv = fleet_inventory.read(req.inventory, req.vault_password_file)
        fleet_inventory.check(inv, user, req.allow_unsigned)
    extra = extra_vars(req, user)
    # The run id is this command's own, never a user's (-e vfleet_run_id is refused above).
    run_id = extra["vfleet_run_id"] = new_run_id()
    handed = handed_env(req)
    limit = with_controller(req.inventory, req.limit) if req.limit else None
    forks = forks_of(req, inv)
    # The lock records the controller process that holds it.
    os.environ["VFLEET_CONTROLLER_PID"] = str(os.getpid())
    if req.status_html is not None and req.status_file is not None:
        req.status_file.unlink(missing_ok=True)  # the page must never show an earlier run's status
    proc = run_playbook(req.action, req.inventory, extra, limit, req.vault_password_file, forks=forks, env_vars=handed)
    if inv is not None:
        say_not_checked(req, inv, extra, run_id)
    _status_outputs(req)
    if proc.returncode != 0 and req.action in CHANGING:
        # A failed run leaves the fleet lock (Ansible runs no later play); release it if this run holds it,
        # then show where every node stands.
        print(f"vfleet: {req.action} run {run_id} failed (exit {proc.returncode}); releasing its lock")
        common = {k: v for k, v in extra.items() if k in ("vfleet_targets",)}
        run_playbook("unlock", req.inventory, {**common, "vfleet_run_id": run_id}, None, req.vault_password_file)
        print("vfleet: where the nodes stand now:")
        run_playbook("status", req.inventory, common, limit, req.vault_password_file)
    return proc.returncode


def _status_outputs(req: FleetRequest) -> None:
    """After a status run: the provenance of what each node runs into its JSON, and the fleet page."""
    if req.action != "status" or req.status_file is None:
        return
    add_provenance(req.status_file, list(req.trusted_keys), req.supply_store)
    if req.status_html is not None:
        from vfleet.pages import fleet_html  # jinja2 is not in the images: only when a page is written  # noqa: PLC0415

        written = fleet_html.write(req.status_file, req.status_html.resolve(), recheck(list(req.trusted_keys)))
        print(f"vfleet: fleet page {written}")


def forks_of(req: FleetRequest, inv: fleet_inventory.Inventory | None) -> int | None:
    """Forks for the run (forks_for: one per node of the run), None where ANSIBLE_FORKS is set or the
    run has no nodes to count. Without --limit, the group of the run is counted in the inventory already
    read; a --limit (or a target that is a pattern, not a group) is resolved by Ansible itself."""
    if req.action not in CHANGING or "ANSIBLE_FORKS" in os.environ:
        return None
    try:
        targets = req.targets or role_defaults("vfleet")["vfleet_targets"]
        if inv is not None and not req.limit and targets in inv.groups:
            return forks_for(len(inv.group(targets)))
        return forks_for(len(limit_hosts(req.inventory, req.limit or targets)))
    except VfleetError:
        return None  # the playbook names the bad group or limit itself


def say_not_checked(req: FleetRequest, inv: fleet_inventory.Inventory, extra: dict[str, Any], run_id: str) -> None:
    """The run's summary of the gates it did not check (the lines the playbook printed as it went)."""
    from vfleet.fleet import inventory as fleet_inventory  # noqa: PLC0415

    targets = req.targets or extra.get("vfleet_targets") or fleet_inventory.NODES
    lines = fleet_inventory.not_checked(inv, extra, req.action, str(targets))
    if lines:
        print(f"vfleet: {req.action} run {run_id} on the test fleet inventory {inv.path} did not check:")
        for line in lines:
            print(f"NOT CHECKED: {line}")


def recheck(key_specs: list[str]) -> Callable[[Path], tuple[list[str], list[str], bool]]:
    """The fleet page's recheck of a boot-verify report: its checks and its summary signed by a verify key."""
    from vfleet.supply.statements import keyring  # cryptography: see add_provenance  # noqa: PLC0415
    from vfleet.verify.record.standing import recheck as recheck_report  # noqa: PLC0415

    keys = keyring(key_specs or [])
    return lambda d: recheck_report(d, keys)


def add_provenance(status_file: Path, key_specs: list[str], store: Path | None) -> None:
    """The provenance of what each node runs, checked as the rollout's gate checks it, written into the
    status JSON (which the fleet page reads). A status file the playbook did not write is left alone:
    the page says why it has no rows."""
    # cryptography and securesystemslib (supply.check, supply.provenance) are the controller's, not the
    # images': imported where used, so that the CLI starts in an image without them.
    from vfleet.paths import home  # noqa: PLC0415
    from vfleet.supply import default_store  # noqa: PLC0415
    from vfleet.supply.check import fleet_provenance  # noqa: PLC0415
    from vfleet.supply.statements import keyring  # noqa: PLC0415

    try:
        rows = json.loads(status_file.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(rows, list):
        return
    keys = keyring(key_specs)
    fleet_provenance([r for r in rows if isinstance(r, dict)], keys, store or default_store(), home())
    tmp = status_file.with_name(f".{status_file.name}.tmp")
    tmp.write_text(json.dumps(rows, indent=1))
    os.replace(tmp, status_file)
