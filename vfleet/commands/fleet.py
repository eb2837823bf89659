"""`vfleet fleet`: roll a fleet with Ansible (rollout, rollback, verify, status, lb) through its gates.

A test fleet of Docker-in-Docker nodes on one machine is the lab's (`make fleet-up`, `python -m lab
fleet ...` in the checkout): it is rolled by these same commands, given its inventory."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from vfleet.fleet.mark import judge_json
from vfleet.fleet.run import FleetRequest
from vfleet.fleet.run import run as run_fleet

# The command only parses: the run is vfleet.fleet.run's, which imports the rest where it is used (the
# playbooks run `vfleet fleet mark` once per run, and the CLI's start-up is every run's cost: vfleet/cli.py).


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
                "vfleet_verify_max_out_of_pool of ansible/roles/vfleet/defaults/main.yml, 1); a node that failed "
                "stays out and counts against it, and the last node in the pool is never taken out",
            )
            q.add_argument(
                "--break-lock",
                action="store_true",
                help="take the fleet lock over from another run (its holder is printed); only when that run is gone",
            )
        if pb in ("rollout", "rollback", "status", "verify"):
            gate = q.add_argument_group("supply chain (docs/supply-chain.md)")
            gate.add_argument(
                "--trusted-key",
                action="append",
                default=[],
                metavar="ROLE=PUB",
                help="public key trusted for ROLE: provenance (the supply-chain gate; status: the page's provenance "
                "column), verify and ab (the promotion check: a rollout's preflight, and fleet verify's look-up of "
                "the weights each node's image was promoted with); several: provenance,verify=PUB "
                "(repeatable; default VFLEET_TRUSTED_KEYS_<ROLE>)",
            )
        if pb in ("rollout", "rollback", "status"):
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


def run(args: argparse.Namespace) -> int:
    cmd = args.fleet_command
    if cmd == "mark":
        print(judge_json(args.claimed, json.loads(args.hosts)).as_json())
        return 0
    return run_fleet(FleetRequest.from_args(args))
