"""`vfleet stage REF [REF ...] --profile P`: boot-verify images on this machine's dockerd, as a
staging node does, and promote each one that passes (by its registry digest). Each image is started
from the profile's rendered `docker run` with the model directory mounted, verified with the real
boot-verify suite (log read after the traffic, the digest read from the container), and removed.
Promotion needs each run's verification summary signed: give the controller's ed25519 key as
--sign-key PRIV or VFLEET_SIGN_KEY (docs/boot-verify.md). Exit 0 only if every image passed (and was
promoted, unless --no-promote)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vfleet import tinymodel
from vfleet.errors import VfleetError
from vfleet.staging import Candidate, stage
from vfleet.verify.record import attestation


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="boot-verify images on this machine and promote those that pass", description=__doc__
    )
    p.add_argument(
        "images",
        nargs="+",
        metavar="REF",
        help="image to stage (a tag docker knows a registry digest for, or REPO@sha256:D)",
    )
    p.add_argument("--profile", required=True, help="serve profile (MODEL/PLATFORM)")
    p.add_argument(
        "--model-dir",
        type=Path,
        help="host directory with the model (default for tiny/cpu: the locally built tiny model)",
    )
    p.add_argument("--out", type=Path, help="report root, one directory per image (default REPORTS/stage-<time>)")
    p.add_argument("--registry", type=Path, help="promotions file (default: the reports root's, VFLEET_PROMOTIONS)")
    p.add_argument("--no-promote", action="store_true", help="verify only")
    p.add_argument(
        "--sign-key",
        type=Path,
        metavar="PRIV",
        help="ed25519 private key (PEM) that signs each verification summary (default VFLEET_SIGN_KEY); "
        "promotion needs it",
    )
    p.add_argument(
        "--health-timeout", type=float, default=600.0, metavar="S", help="bound on each boot (default 600 s)"
    )
    return p


def run(args: argparse.Namespace) -> int:
    model_dir = args.model_dir
    if model_dir is None:
        if args.profile != "tiny/cpu":
            raise VfleetError(f"--model-dir is required for {args.profile} (the host directory with its weights)")
        model_dir = tinymodel.build()
    results = stage(
        [Candidate(ref) for ref in args.images],
        args.profile,
        model_dir,
        out_root=args.out,
        registry=args.registry,
        promote=not args.no_promote,
        health_timeout_s=args.health_timeout,
        sign_key=attestation.sign_key_path(args.sign_key),
    )
    return 0 if all(r.passed for r in results) else 1
