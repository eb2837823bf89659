"""`vfleet model build [--out DIR] [--variant random|confident]`: build the tiny random-weight model used
by the demo and the tests (`confident`: the same weights with every logit scaled, for the integrity
probe's corruption test)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from vfleet import tinymodel


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help="build the tiny local model", description=__doc__)
    msub = p.add_subparsers(dest="model_command", required=True, metavar="ACTION")
    b = msub.add_parser("build", help="build the tiny model (idempotent; prints where)")
    b.add_argument("--out", type=Path, default=None, help="output directory (default .cache/models/tiny)")
    b.add_argument("--force", action="store_true", help="rebuild even if a finished build is there")
    b.add_argument(
        "--variant",
        choices=("random", "confident"),
        default="random",
        help="random (default; greedy answers on a knife edge) or confident (wide top-token margins)",
    )
    return p


def run(args: argparse.Namespace) -> int:
    out = (args.out or tinymodel.default_dir(args.variant)).resolve()
    if tinymodel.is_built(out, args.variant) and not args.force:
        print(f"tiny model already built: {out}")
        return 0
    t0 = time.monotonic()
    path = tinymodel.build(out, force=args.force, variant=args.variant)
    print(f"tiny model built in {time.monotonic() - t0:.1f} s: {path}")
    return 0
