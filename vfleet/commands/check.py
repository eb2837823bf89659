"""`vfleet check`: load every profile and enforce every rule; exit non-zero on any violation, or on a layer
file under serve_configs/models/ that no profile reads (a misspelt family, arch or platform)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from vfleet.errors import ProfileError
from vfleet.profiles import Catalog
from vfleet.rules import RULES, evaluate


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help="validate every serve profile", description=__doc__)
    p.add_argument("profiles", nargs="*", help="profiles to check (default: all)")
    p.add_argument("--rules", action="store_true", help="list the rules with their reasons and sources")
    return p


def run(args: argparse.Namespace) -> int:
    if args.rules:
        for r in RULES:
            print(f"{r.id}\n  why:    {r.reason}\n  source: {r.source}\n  fix:    {r.fix}")
        return 0
    catalog = Catalog()
    names = args.profiles or catalog.profile_names()
    failed = 0
    for name in names:
        try:
            result = evaluate(catalog.load(name))
        except ProfileError as exc:
            print(f"FAIL {name}\n  {exc}", file=sys.stderr)
            failed += 1
            continue
        if result.violations:
            failed += 1
            print(f"FAIL {name}", file=sys.stderr)
            for v in result.violations:
                print(f"  {v}", file=sys.stderr)
            continue
        waived = "".join(f" [waived: {v.rule.id}]" for v in result.waived)
        print(f"ok   {name}{waived}")
    print(f"{len(names) - failed} of {len(names)} profiles pass {len(RULES)} rules")
    try:
        stray = [] if args.profiles else catalog.stray_layers()
    except ProfileError as exc:
        stray = [str(exc)]
    for line in stray:
        print(f"FAIL layer {line}; rename it or remove it", file=sys.stderr)
    return 1 if failed or stray else 0
