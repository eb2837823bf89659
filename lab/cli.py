"""`python -m lab fleet ACTION --name FLEET ...`: the test fleet's command line (`make fleet-up`,
`make fleet-stage`, `make fleet-down`, and `make rollout FLEET=...` and the other fleet targets).

- up, down, push, stage, show: start, remove, fill and print a Docker-in-Docker test fleet on this
  machine (lab.testfleet);
- rollout, rollback, verify, status, lb: the product's own `vfleet fleet ACTION --inventory INV ...`,
  with INV the named test fleet's inventory. Everything after `--name FLEET` is vfleet's to parse, and
  the run passes the same gates as on any fleet: the lab only names the inventory.

Every action starts this machine's dockerd first where none runs (the fleet's nodes, registry and
balancer are its containers, and Ansible reaches them through the docker CLI), so that a newcomer's
first `make fleet-up` works on a machine without a running daemon."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from lab import testfleet
from vfleet import tinymodel
from vfleet.cli import main as vfleet_main
from vfleet.dockerd import ensure_dockerd
from vfleet.errors import VfleetError
from vfleet.staging import Candidate, stage
from vfleet.verify.record import attestation

#: The product's fleet actions: run by vfleet itself on the test fleet's inventory.
PRODUCT_ACTIONS = ("rollout", "rollback", "verify", "status", "lb")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fleet = sub.add_parser("fleet", help="a test fleet of Docker-in-Docker nodes on this machine")
    fs = fleet.add_subparsers(dest="fleet_command", required=True, metavar="ACTION")
    up = fs.add_parser("up", help="start a test fleet (registry + Docker-in-Docker nodes)")
    up.add_argument("--name", default="dev")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--profile", default="tiny/cpu")
    up.add_argument(
        "--model-dir",
        type=Path,
        help="copied to every node's /srv/models (default for tiny/cpu: the locally built tiny model)",
    )
    up.add_argument("--no-model", action="store_true", help="copy no model onto the nodes")
    down = fs.add_parser("down", help="remove a test fleet (by label) and its state")
    down.add_argument("--name", default="dev")
    push = fs.add_parser("push", help="push a local image to a test fleet's registry")
    push.add_argument("--name", default="dev")
    push.add_argument("image")
    staged = fs.add_parser(
        "stage",
        help="push images to a test fleet's registry, boot-verify each on this machine and promote it",
        description="Push each IMAGE to the test fleet's registry, boot-verify it on this machine's dockerd "
        "as a staging node does (`vfleet stage`), and promote the registry digest the nodes pull. Prints the "
        "REPO@sha256 reference to roll out.",
    )
    staged.add_argument("--name", default="dev")
    staged.add_argument("--profile", help="serve profile (default: the fleet's)")
    staged.add_argument("images", nargs="+", metavar="IMAGE")
    # The pushed manifest digest is what the nodes pull and the rollout verifies: sign it.
    push.add_argument("--sign-key", type=Path, metavar="PRIV", help="sign the pushed manifest digest's provenance")
    staged.add_argument(
        "--sign-key",
        type=Path,
        metavar="PRIV",
        help="sign the pushed manifest digest's provenance, and each boot-verify summary (which promotion needs; "
        "VFLEET_SIGN_KEY signs the summaries only)",
    )
    for sp in (push, staged):
        sp.add_argument("--store", type=Path, help="supply store (default: VFLEET_SUPPLY_STORE or REPORTS/supply)")
    show = fs.add_parser("show", help="print a test fleet: nodes, addresses, registry, inventory")
    show.add_argument("--name", default="dev")
    for action in PRODUCT_ACTIONS:
        q = fs.add_parser(
            action,
            help=f"`vfleet fleet {action}` on the test fleet's inventory",
            description=f"`vfleet fleet {action} --inventory INV ARGS`, INV the test fleet's inventory.",
        )
        q.add_argument("--name", required=True, help="a test fleet started with `make fleet-up`")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, rest = build_parser().parse_known_args(argv)
    try:
        state = ensure_dockerd()
        if state != "running":
            print(f"dockerd: {state}", file=sys.stderr)
        if args.fleet_command in PRODUCT_ACTIONS:
            inventory = testfleet.load(args.name).inventory
            return vfleet_main(["fleet", args.fleet_command, "--inventory", str(inventory), *rest])
        if rest:
            build_parser().parse_args(argv)  # prints argparse's own error for the arguments it does not know
        return _lab_action(args)
    except VfleetError as exc:
        print(f"lab fleet {args.fleet_command}: error: {exc}", file=sys.stderr)
        return 2


def _lab_action(args: argparse.Namespace) -> int:
    if args.fleet_command == "up":
        return _up(args)
    if args.fleet_command == "down":
        removed = testfleet.down(args.name)
        print(f"fleet {args.name}: removed {len(removed)} containers")
        return 0
    if args.fleet_command in ("push", "stage") and args.sign_key:
        from vfleet.supply.statements import load_private_key  # cryptography: the controller's  # noqa: PLC0415

        load_private_key(args.sign_key)  # a bad key fails before the push
    if args.fleet_command == "push":
        fleet = testfleet.load(args.name)
        print(fleet.push(args.image))
        print(fleet.digest_ref(args.image))
        _sign_pushed(args, fleet.digest_ref(args.image))
        return 0
    if args.fleet_command == "stage":
        return _stage(args)
    return _show(args.name)


def _up(args: argparse.Namespace) -> int:
    model_dir = args.model_dir
    if model_dir is None and not args.no_model and args.profile == "tiny/cpu":
        model_dir = tinymodel.build()
    fleet = testfleet.up(args.name, args.nodes, args.profile, model_dir=model_dir, api_key=True)
    print(
        f"fleet {fleet.name}: {len(fleet.nodes)} nodes behind the balancer {fleet.lb_url}, registry "
        f"{fleet.registry_addr} (push via {fleet.registry_local}); inventory {fleet.inventory}"
        + (f"; model {model_dir} copied to each node's /srv/models" if model_dir else "")
        + f"; API key in {fleet.api_key_file}"
    )
    return 0


def _show(name: str) -> int:
    fleet = testfleet.load(name)
    print(f"registry {fleet.registry} {fleet.registry_addr} (controller: {fleet.registry_local})")
    print(f"balancer {fleet.lb.name} http://{fleet.lb.ip}:{testfleet.LB_PORT}")
    for n in fleet.nodes:
        print(f"{n.name} {n.ip} health={fleet.health(n.name)}")
    print(f"inventory {fleet.inventory}")
    return 0


def _stage(args: argparse.Namespace) -> int:
    """Push, sign the pushed digests with --sign-key, then stage: each boot-verify summary is signed with
    --sign-key, else VFLEET_SIGN_KEY (the image provenance is signed only with --sign-key: a build that has
    no record in the store, a `docker build` layer, can still be staged). No key is refused before the push."""
    fleet = testfleet.load(args.name)
    profile = args.profile or fleet.profile
    if profile != "tiny/cpu":
        raise VfleetError(f"make fleet-stage runs tiny/cpu on this machine; stage {profile} with `vfleet stage`")
    summary_key = attestation.sign_key_path(args.sign_key)
    if summary_key is None:
        raise VfleetError(f"make fleet-stage promotes only a signed boot-verify result: {attestation.NO_SIGN_KEY}")
    attestation.load_signer(summary_key)  # a bad key fails before the push
    candidates = []
    for image in args.images:
        print(f"push {image} -> {fleet.push(image)}")
        candidates.append(Candidate(fleet.alias(image), fleet.digest_ref(image)))
        _sign_pushed(args, fleet.digest_ref(image))
    results = stage(candidates, profile, tinymodel.build(), sign_key=summary_key)
    for r in results:
        print(f"{'promoted' if r.promoted else 'NOT promoted'}: {r.candidate.promote_as}")
    return 0 if all(r.promoted for r in results) else 1


def _sign_pushed(args: argparse.Namespace, digest_ref: str) -> None:
    """With --sign-key: sign the build record of the pushed image for its manifest digest (the image's
    record is found by its image ID, the manifest's config digest; docs/supply-chain.md)."""
    if not args.sign_key:
        return
    from vfleet.supply import default_store  # noqa: PLC0415
    from vfleet.supply.attest import sign_image  # cryptography: the controller's  # noqa: PLC0415

    print(f"signed {digest_ref}: {sign_image(digest_ref, args.sign_key, args.store or default_store())}")
