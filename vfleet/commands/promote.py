"""`vfleet promote REF --profile P`: record that an image's registry digest may serve a profile.
Refuses unless a passing, complete boot-verify report exists for that digest and profile (for a
production profile: with the digest read from the verified container), with its verification summary
signed by a key of the verify role (--trusted-key verify=PUB, or VFLEET_TRUSTED_KEYS_VERIFY; the A/B summary:
a key of the ab role): `passed` is recomputed from the
checks, and the summary must name the digest, the profile and this checkout's serve-profiles digest,
carry report.json's sha256 and be younger than the profile's verify.report_max_age_days (default 30).
Against the image promoted last for the profile (the baseline; none: "no baseline: first promotion",
printed and recorded), a new warning template fails a production profile, and a profile that sets
verify.ab_not_worse (every production profile) needs a signed promotion A/B report (`vfleet ab
--promotion --container-a --container-b`, digests read from the serving containers) of the image
against the baseline, complete and showing every metric not worse within the margin (non-inferiority,
recomputed from its rounds; inconclusive is refused); the entry names the baseline and the A/B report.
With --check (the Ansible preflight), exit 0 only if a registry entry of the image for the profile
passes all of that again now: its report, signed summary, new warnings against the image promoted
before it in the registry, and the A/B report it names. An edited or hand-written entry changes nothing.

REF is REGISTRY/REPO@sha256:DIGEST (the digest is taken from it) or REGISTRY/REPO:TAG (the digest the
registry serves for the tag now, asked with docker's login for it, as the supply-chain gate asks); a
reference without a registry part is refused, naming the fix.
The reports root and the registry are absolute (vfleet.paths.reports_dir), whatever the cwd."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from vfleet import promotion
from vfleet.errors import VfleetError
from vfleet.verify.record import attestation, releases


def _default_registry_text() -> str:
    try:
        return str(promotion.default_registry())
    except VfleetError:
        return "REPORTS/promotions.jsonl"


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="promote an image that passed boot-verify", description=__doc__
    )
    p.add_argument(
        "image", metavar="REF", help="REGISTRY/REPO@sha256:DIGEST, or REGISTRY/REPO:TAG (its registry is asked)"
    )
    p.add_argument("--profile", help="serve profile (MODEL/PLATFORM); required unless --release-of")
    p.add_argument(
        "--report", type=Path, help="report directory or report.json (default: search the reports root, VFLEET_REPORTS)"
    )
    p.add_argument(
        "--registry",
        type=Path,
        default=None,
        help=f"promotions file, JSON lines, append-only (default {_default_registry_text()}; VFLEET_PROMOTIONS)",
    )
    p.add_argument(
        "--ab-report",
        type=Path,
        metavar="DIR",
        help="A/B report directory or ab.json, where the profile sets verify.ab_not_worse (default: search the "
        "reports root)",
    )
    p.add_argument(
        "--trusted-key",
        action="append",
        default=[],
        metavar="ROLE=PUB",
        help="public key (PEM) trusted for ROLE (verify: boot-verify summaries, ab: A/B summaries; several: "
        "verify,ab=PUB; repeatable; default VFLEET_TRUSTED_KEYS_VERIFY / _AB); none for verify: nothing is promoted",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 0 only if an entry of REF for the profile passes every judgement of a promotion again now",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="with --check: print the entry that passes, its baseline note and the weights its report names (every "
        "file's path, size and sha256: what the rollout compares each node's weights with) as one JSON object; a "
        "refusal is printed as text, as without it",
    )
    p.add_argument(
        "--release-of",
        action="store_true",
        help="print the release snapshot `vfleet promote` kept for REF's digest beside the registry (a rollback "
        "runs its gates with VFLEET_RELEASE_DIR set to it), or nothing when there is none; --profile is not read",
    )
    return p


def run(args: argparse.Namespace) -> int:
    registry: Path = args.registry or promotion.default_registry()
    if args.release_of:
        found = releases.find(registry, promotion.resolve_digest(args.image))
        print(found or "")
        return 0
    if not args.profile:
        raise VfleetError("vfleet promote REF: --profile MODEL/PLATFORM is required (vfleet profiles lists them)")
    if args.check:
        try:
            keys = attestation.load_trusted(args.trusted_key)
            checked = promotion.checked_entry(args.image, args.profile, registry, keys=keys)
        except VfleetError as exc:
            print(f"not promoted: {exc}")
            return 1
        entry = checked.entry
        if args.json:
            print(json.dumps({"entry": entry, "note": checked.note, "weights": checked.weights}))
            return 0
        print(f"promoted: {entry['digest']} for {args.profile} at {entry['promoted_at']} (report {entry['report']})")
        print(f"  {checked.note}")
        return 0
    keys = attestation.load_trusted(args.trusted_key)
    entry = promotion.promote(args.image, args.profile, args.report, registry, args.ab_report, keys=keys)
    print(f"promoted {args.image} ({entry['digest']}) for {args.profile}; recorded in {registry}")
    print(f"  {entry['baseline_note']}")
    if entry.get("ab_report"):
        print(f"  not worse than {entry['ab_baseline']}: A/B report {entry['ab_report']}")
    return 0
