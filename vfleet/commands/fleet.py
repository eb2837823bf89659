"""`vfleet fleet`: roll a fleet with Ansible (rollout, rollback, verify, status), and run a test
fleet of Docker-in-Docker nodes with a local registry on this machine (up, down, push)."""

from __future__ import annotations

import argparse
import json
import uuid
from pathlib import Path
from typing import Any

from vfleet.errors import VfleetError
from vfleet.fleet import lock, testfleet
from vfleet.fleet.ansible import run_playbook


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
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="fleet rollout with Ansible; test fleet", description=__doc__
    )
    fs = p.add_subparsers(dest="fleet_command", required=True, metavar="ACTION")

    for pb, text in (
        ("rollout", "canary then batches onto --image"),
        ("rollback", "back to each node's previous image, or --image"),
        ("verify", "boot-verify the running nodes"),
        ("status", "what runs where: image, digest, profile, health"),
    ):
        q = fs.add_parser(pb, help=text, description=text)
        where = q.add_mutually_exclusive_group(required=True)
        where.add_argument("--inventory", "-i", type=Path, help="inventory (e.g. ansible/inventories/example)")
        where.add_argument("--name", help="a test fleet started with `vfleet fleet up`")
        if pb in ("rollout", "rollback"):
            q.add_argument("--image", required=pb == "rollout", help="image to deploy (tag or repo@sha256:digest)")
            q.add_argument("--batch-size", help="nodes per batch after the canary (number or percent)")
            q.add_argument("--max-fail-percentage", type=int, help="failed nodes per batch that stop the rollout")
        q.add_argument("--targets", help="inventory group to act on (default vfleet_nodes)")
        q.add_argument("--limit", help="ansible --limit pattern")
        q.add_argument("--extra-var", "-e", action="append", default=[], metavar="KEY=VALUE")
        q.add_argument("--vault-password-file", type=Path)
        if pb == "status":
            q.add_argument("--json", type=Path, metavar="FILE", help="also write the status as JSON")

    up = fs.add_parser("up", help="start a test fleet (registry + Docker-in-Docker nodes)")
    up.add_argument("--name", default="dev")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--profile", default="tiny/cpu")
    down = fs.add_parser("down", help="remove a test fleet (by label) and its state")
    down.add_argument("--name", default="dev")
    push = fs.add_parser("push", help="push a local image to a test fleet's registry")
    push.add_argument("--name", default="dev")
    push.add_argument("image")
    show = fs.add_parser("show", help="print a test fleet: nodes, addresses, registry, inventory")
    show.add_argument("--name", default="dev")

    lk = fs.add_parser("lock", help="the rollout lock (the playbooks call this)")
    lk.add_argument("action", choices=("acquire", "release", "show"))
    lk.add_argument("--path", type=Path, required=True)
    lk.add_argument("--playbook", default="rollout")
    return p


def _playbook(args: argparse.Namespace) -> int:
    inventory = args.inventory if args.inventory else testfleet.load(args.name).inventory
    extra = _extra(args.extra_var)
    if getattr(args, "image", None):
        extra["vfleet_image"] = args.image
    if getattr(args, "batch_size", None):
        extra["vfleet_batch_size"] = args.batch_size
    if getattr(args, "max_fail_percentage", None) is not None:
        extra["vfleet_max_fail_percentage"] = args.max_fail_percentage
    if args.targets:
        extra["vfleet_targets"] = args.targets
    if getattr(args, "json", None):
        extra["vfleet_status_file"] = str(args.json.resolve())
    proc = run_playbook(args.fleet_command, inventory.resolve(), extra, args.limit, args.vault_password_file)
    return proc.returncode


def run(args: argparse.Namespace) -> int:
    cmd = args.fleet_command
    if cmd in ("rollout", "rollback", "verify", "status"):
        return _playbook(args)
    if cmd == "up":
        fleet = testfleet.up(args.name, args.nodes, args.profile)
        print(
            f"fleet {fleet.name}: {len(fleet.nodes)} nodes, registry {fleet.registry_addr} "
            f"(push via {fleet.registry_local}); inventory {fleet.inventory}"
        )
        return 0
    if cmd == "down":
        removed = testfleet.down(args.name)
        print(f"fleet {args.name}: removed {len(removed)} containers")
        return 0
    if cmd == "push":
        print(testfleet.load(args.name).push(args.image))
        return 0
    if cmd == "show":
        fleet = testfleet.load(args.name)
        print(f"registry {fleet.registry} {fleet.registry_addr} (controller: {fleet.registry_local})")
        for n in fleet.nodes:
            print(f"{n.name} {n.ip} health={fleet.health(n.name)}")
        print(f"inventory {fleet.inventory}")
        return 0
    if args.action == "acquire":
        me, stale = lock.acquire(args.path, run_id=uuid.uuid4().hex[:12], playbook=args.playbook)
        if stale is not None:
            print(f"took over a stale lock of pid {stale.pid} ({stale.playbook}, run {stale.run_id})")
        print(f"fleet lock {args.path} held by pid {me.pid} for {me.playbook}")
        return 0
    if args.action == "release":
        print("released" if lock.release(args.path) else "not held by this run; left alone")
        return 0
    holder = lock.read(args.path)
    print(json.dumps(holder.__dict__ if holder else None))
    return 0
