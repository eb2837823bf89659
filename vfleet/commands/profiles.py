"""`vfleet profiles`: list every profile with its model, platform and GPUs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from vfleet.profiles import Catalog


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help="list the serve profiles", description=__doc__)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p


def run(args: argparse.Namespace) -> int:
    rows = []
    for prof in Catalog().load_all():
        rows.append(
            {
                "profile": prof.name,
                "model": prof.model,
                "platform": prof.platform.platform,
                "arch": prof.platform.arch,
                "gpus": prof.gpus_needed(),
                "family": prof.family,
                "production": prof.production,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'PROFILE':<26} {'MODEL':<15} {'PLATFORM':<9} {'ARCH':<8} {'GPUS':>4}  IMAGE")
    for r in rows:
        note = "" if r["production"] else "  (not production)"
        print(
            f"{r['profile']:<26} {r['model']:<15} {r['platform']:<9} {r['arch']:<8} {r['gpus']:>4}  {r['family']}{note}"
        )
    return 0
