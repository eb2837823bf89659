"""`vfleet promote IMAGE --profile P`: record that an image digest may serve a profile. Refuses unless
a passing, complete boot-verify report exists for that digest and profile. With --check, exit 0 only
if the image is already promoted for the profile (the Ansible preflight uses this)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vfleet.errors import VfleetError
from vfleet.verify import promotion


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="promote an image that passed boot-verify", description=__doc__
    )
    p.add_argument("image", help="image reference: NAME:TAG (docker looks up the digest) or NAME@sha256:...")
    p.add_argument("--profile", required=True, help="serve profile (MODEL/PLATFORM)")
    p.add_argument("--report", type=Path, help="report directory or report.json (default: search reports/)")
    p.add_argument(
        "--registry",
        type=Path,
        default=promotion.DEFAULT_REGISTRY,
        help=f"promotions file, JSON lines, append-only (default {promotion.DEFAULT_REGISTRY})",
    )
    p.add_argument("--check", action="store_true", help="exit 0 only if IMAGE is promoted for the profile")
    return p


def run(args: argparse.Namespace) -> int:
    if args.check:
        try:
            entry = promotion.is_promoted(args.image, args.profile, args.registry)
        except VfleetError as exc:
            print(f"not promoted: {exc}")
            return 1
        if entry is None:
            print(f"not promoted: {args.image} for {args.profile} (registry {args.registry})")
            return 1
        print(f"promoted: {entry['digest']} for {args.profile} at {entry['promoted_at']} (report {entry['report']})")
        return 0
    entry = promotion.promote(args.image, args.profile, args.report, args.registry)
    print(f"promoted {args.image} ({entry['digest']}) for {args.profile}; recorded in {args.registry}")
    return 0
