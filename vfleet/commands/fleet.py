"""`vfleet fleet`: roll a fleet with Ansible (rollout, rollback, verify, status, lb) through its gates.

A test fleet of Docker-in-Docker nodes on one machine is the lab's (`make fleet-up`, `python -m lab
fleet ...` in the checkout): it is rolled by these same commands, given its inventory."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vfleet.errors import VfleetError
from vfleet.fleet.ansible import check_paths, forks_for, limit_hosts, role_defaults, run_playbook, with_controller
from vfleet.fleet.mark import judge_json

if TYPE_CHECKING:
    from vfleet.fleet import inventory as fleet_inventory

# The rest is imported where it is used: the playbooks run `vfleet fleet mark` once per run, and the
# CLI's start-up is every run's cost (vfleet/cli.py).


def _extra(pairs: list[str]) -> dict[str, Any]:
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


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help="fleet rollout with Ansible", description=__doc__)
    fs = p.add_subparsers(dest="fleet_command", required=True, metavar="ACTION")
    # The defaults are named, not read: every vfleet command builds this parser, also inside an image,
    # which holds no ansible/ tree. They are read where a run needs them.

    for pb, text in (
        ("rollout", "canary then batches onto --image"),
        ("rollback", "back to each node's previous image, or --image"),
        ("verify", "boot-verify the running nodes"),
        ("status", "what runs where: image, digest, profile, health"),
    ):
        q = fs.add_parser(pb, help=text, description=text)
        q.add_argument(
            "--inventory", "-i", type=Path, required=True, help="inventory (e.g. ansible/inventories/example)"
        )
        if pb in ("rollout", "rollback"):
            q.add_argument("--image", required=pb == "rollout", help="image to deploy (tag or repo@sha256:digest)")
            q.add_argument("--batch-size", help="nodes per batch after the canary (number or percent)")
            q.add_argument("--max-fail-percentage", type=int, help="failed nodes per batch that stop the rollout")
            q.add_argument(
                "--max-failed-nodes",
                type=int,
                help="failed nodes over the whole run after which no further batch starts "
                "(-1: no cap; default: vfleet_max_failed_nodes of ansible/roles/vfleet/defaults/main.yml)",
            )
            q.add_argument(
                "--break-lock",
                action="store_true",
                help="take the fleet lock over from another run (its holder is printed); only when that run is gone",
            )
        if pb == "verify":
            q.add_argument(
                "--max-out-of-pool",
                type=int,
                metavar="N",
                help="nodes out of the balancer's pool at once, each drained, verified and put back (default: "
                "vfleet_verify_max_out_of_pool of ansible/roles/vfleet/defaults/main.yml, 1)",
            )
            q.add_argument(
                "--break-lock",
                action="store_true",
                help="take the fleet lock over from another run (its holder is printed); only when that run is gone",
            )
        if pb in ("rollout", "rollback", "status"):
            gate = q.add_argument_group("supply chain (docs/supply-chain.md)")
            gate.add_argument(
                "--trusted-key",
                action="append",
                default=[],
                metavar="ROLE=PUB",
                help="public key trusted for ROLE: provenance (the supply-chain gate; status: the page's provenance "
                "column), verify and ab (the preflight's promotion check); several: provenance,verify=PUB "
                "(repeatable; default VFLEET_TRUSTED_KEYS_<ROLE>)",
            )
            gate.add_argument(
                "--supply-store", type=Path, help="supply store (default: VFLEET_SUPPLY_STORE or REPORTS/supply)"
            )
        if pb in ("rollout", "rollback"):
            gate.add_argument(
                "--allow-unsigned",
                action="store_true",
                help="test fleets only: roll out without verifying the image's signature, SBOM and provenance",
            )
        q.add_argument(
            "--targets",
            help="inventory group to act on (default: vfleet_targets of ansible/roles/vfleet/defaults/main.yml)",
        )
        q.add_argument(
            "--limit", help="ansible --limit pattern (localhost is added: the lock, gates and canary always run)"
        )
        q.add_argument("--extra-var", "-e", action="append", default=[], metavar="KEY=VALUE")
        q.add_argument("--vault-password-file", type=Path)
        q.add_argument(
            "--ansible-verbosity",
            type=int,
            choices=range(5),
            metavar="N",
            help="Ansible's verbosity, 0-4 (ANSIBLE_VERBOSITY; make ... VERBOSE=N); secrets stay hidden at every level",
        )
        if pb == "status":
            q.add_argument("--json", type=Path, metavar="FILE", help="also write the status as JSON")
            q.add_argument("--html", type=Path, metavar="FILE", help="also write the fleet page (docs/fleet.md)")

    mark = fs.add_parser(
        "mark",
        help="whether hosts are nodes of a test fleet (`make fleet-up`; the check the playbooks run before the lock)",
        description="Print {test_fleet, why} as JSON: whether every host named is a container of this "
        "controller's docker labelled for its fleet (vfleet_fleet_name) and reached through it. Always exits 0.",
    )
    mark.add_argument("--claimed", action="store_true", help="the inventory's group vfleet_test_fleet holds every host")
    mark.add_argument("--hosts", default="{}", metavar="JSON", help="{host: its variables} (connection and fleet)")

    lb = fs.add_parser("lb", help="set up the balancer (HAProxy on the vfleet_lb hosts, a server per node)")
    lb.add_argument("--inventory", "-i", type=Path, required=True)
    lb.add_argument("--vault-password-file", type=Path)
    return p


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def _playbook(args: argparse.Namespace) -> int:
    from vfleet.fleet import inventory as fleet_inventory  # noqa: PLC0415
    from vfleet.supply.statements import normalized as trusted_specs  # noqa: PLC0415

    inventory = args.inventory.resolve()
    if args.fleet_command == "lb":
        return run_playbook("lb", inventory, {}, None, args.vault_password_file).returncode
    extra = _extra(args.extra_var)
    inv = None
    if args.fleet_command in fleet_inventory.CHECKED:
        # Issues 21 and 31: what the inventory and -e may set (the allow-list), the test-fleet switches on a
        # fleet that is not one (checked through docker) and non-production profiles, refused here (the
        # playbooks refuse them again: docs/fleet.md).
        check_paths(args.fleet_command, inventory)
        inv = fleet_inventory.read(inventory, args.vault_password_file)
        fleet_inventory.check(inv, extra, getattr(args, "allow_unsigned", False))
    # The run id is this command's own, never a user's (-e vfleet_run_id is refused above).
    run_id = extra["vfleet_run_id"] = new_run_id()
    # The CLI's --trusted-key and --supply-store reach the playbooks here, never through -e; always set,
    # so that no value left in the operator's environment stands in for them.
    handed: dict[str, str] = {"VFLEET_FLEET_TRUSTED_KEYS": "[]", "VFLEET_FLEET_SUPPLY_STORE": ""}
    if getattr(args, "image", None):
        extra["vfleet_image"] = args.image
    if getattr(args, "batch_size", None):
        extra["vfleet_batch_size"] = args.batch_size
    if getattr(args, "max_out_of_pool", None) is not None:
        if args.max_out_of_pool < 1:
            raise VfleetError(f"--max-out-of-pool {args.max_out_of_pool}: give 1 or more nodes")
        extra["vfleet_verify_max_out_of_pool"] = args.max_out_of_pool
    if getattr(args, "max_fail_percentage", None) is not None:
        extra["vfleet_max_fail_percentage"] = args.max_fail_percentage
    if getattr(args, "max_failed_nodes", None) is not None:
        extra["vfleet_max_failed_nodes"] = args.max_failed_nodes
    if getattr(args, "trusted_key", None):
        specs = trusted_specs(args.trusted_key)
        if args.fleet_command in ("rollout", "rollback"):
            handed["VFLEET_FLEET_TRUSTED_KEYS"] = json.dumps(specs)
    if getattr(args, "supply_store", None) and args.fleet_command in ("rollout", "rollback"):
        handed["VFLEET_FLEET_SUPPLY_STORE"] = str(args.supply_store.resolve())
    if getattr(args, "ansible_verbosity", None) is not None:
        handed["ANSIBLE_VERBOSITY"] = str(args.ansible_verbosity)
    if getattr(args, "allow_unsigned", False):
        extra["vfleet_node_allow_unsigned"] = True
    if getattr(args, "break_lock", False):
        extra["vfleet_lock_break"] = True
    if args.targets:
        extra["vfleet_targets"] = args.targets
    if getattr(args, "json", None) or getattr(args, "html", None):
        extra["vfleet_status_file"] = str((args.json or args.html.with_suffix(".status.json")).resolve())
    limit = with_controller(inventory, args.limit) if args.limit else None
    forks = _forks(args, inventory, inv)
    # The lock records the controller process that holds it.
    os.environ["VFLEET_CONTROLLER_PID"] = str(os.getpid())
    if getattr(args, "html", None):  # the page must never show an earlier run's status
        Path(extra["vfleet_status_file"]).unlink(missing_ok=True)
    # The gates' keys and store go in the environment, which no -e reaches (ansible/roles/vfleet_node/vars/main.yml).
    proc = run_playbook(
        args.fleet_command, inventory, extra, limit, args.vault_password_file, forks=forks, env_vars=handed
    )
    if inv is not None:
        _say_not_checked(inv, extra, args, run_id)
    if args.fleet_command == "status" and "vfleet_status_file" in extra:
        _add_provenance(Path(extra["vfleet_status_file"]), args.trusted_key, args.supply_store)
    if getattr(args, "html", None):
        from vfleet.pages import fleet_html  # jinja2 is not in the images: only when a page is written  # noqa: PLC0415

        written = fleet_html.write(Path(extra["vfleet_status_file"]), args.html.resolve(), _recheck(args.trusted_key))
        print(f"vfleet: fleet page {written}")
    if proc.returncode != 0 and args.fleet_command in ("rollout", "rollback", "verify"):
        # A failed run leaves the fleet lock (Ansible runs no later play); release it if this run
        # holds it, then show where every node stands.
        print(f"vfleet: {args.fleet_command} run {run_id} failed (exit {proc.returncode}); releasing its lock")
        common = {k: v for k, v in extra.items() if k in ("vfleet_targets",)}
        run_playbook("unlock", inventory, {**common, "vfleet_run_id": run_id}, None, args.vault_password_file)
        print("vfleet: where the nodes stand now:")
        run_playbook("status", inventory, common, limit, args.vault_password_file)
    return proc.returncode


def _forks(args: argparse.Namespace, inventory: Path, inv: fleet_inventory.Inventory | None) -> int | None:
    """Forks for the run (forks_for: one per node of the run), None where ANSIBLE_FORKS is set or the
    run has no nodes to count. Without --limit, the group of the run is counted in the inventory already
    read above; a --limit (or a target that is a pattern, not a group) is resolved by Ansible itself."""
    if args.fleet_command not in ("rollout", "rollback", "verify") or "ANSIBLE_FORKS" in os.environ:
        return None
    try:
        targets = args.targets or role_defaults("vfleet")["vfleet_targets"]
        if inv is not None and not args.limit and targets in inv.groups:
            return forks_for(len(inv.group(targets)))
        return forks_for(len(limit_hosts(inventory, args.limit or targets)))
    except VfleetError:
        return None  # the playbook names the bad group or limit itself


def _say_not_checked(
    inv: fleet_inventory.Inventory, extra: dict[str, Any], args: argparse.Namespace, run_id: str
) -> None:
    """The run's summary of the gates it did not check (the lines the playbook printed as it went)."""
    from vfleet.fleet import inventory as fleet_inventory  # noqa: PLC0415

    targets = args.targets or extra.get("vfleet_targets") or fleet_inventory.NODES
    lines = fleet_inventory.not_checked(inv, extra, args.fleet_command, str(targets))
    if lines:
        print(f"vfleet: {args.fleet_command} run {run_id} on the test fleet inventory {inv.path} did not check:")
        for line in lines:
            print(f"NOT CHECKED: {line}")


def _recheck(key_specs: list[str]) -> Callable[[Path], tuple[list[str], list[str], bool]]:
    """The fleet page's recheck of a boot-verify report: its checks and its summary signed by a verify key."""
    from vfleet.supply.statements import keyring  # cryptography: see _add_provenance  # noqa: PLC0415
    from vfleet.verify.record.standing import recheck  # noqa: PLC0415

    keys = keyring(key_specs or [])
    return lambda d: recheck(d, keys)


def _add_provenance(status_file: Path, key_specs: list[str], store: Path | None) -> None:
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


def run(args: argparse.Namespace) -> int:
    cmd = args.fleet_command
    if cmd == "mark":
        print(judge_json(args.claimed, json.loads(args.hosts)).as_json())
        return 0
    return _playbook(args)
