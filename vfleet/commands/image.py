"""`vfleet image ACTION`: build and inspect vfleet's images.

dockerd    make sure a Docker daemon runs (installs docker.io and starts dockerd when needed)
base       the Debian bookworm base: debootstrap --variant=minbase + docker import (pinned tag)
wheels     download the CPU image's pinned wheels into .cache/image-wheels
standin    a local stand-in for a base's GPU images (that vLLM's Python tree from its pinned wheel, no GPU)
build      build images/Dockerfile.FAMILY (cpu, cuda, rocm) on a vLLM base (--base, default the default base;
           tag and labels carry it) with the OCI labels, then write its SBOM,
           vulnerability report and provenance to the supply store (signed with --sign-key)
sign       sign the provenance of REF (its registry manifest digest, or a local image's ID) with --key PRIV
verify     check REF: signature by a key of the provenance role (--key), subject = REF's digest, SBOM and
           materials (exit 0/1)
resolve    ask REF's registry for its manifest digest and print REGISTRY/REPO@sha256:D (exit 0/1); a
           rollout's plan runs it once, and every later step of the run uses the digest
layers     print an image's layers and their sizes in bytes
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vfleet import images
from vfleet.dockerd import ensure_dockerd
from vfleet.images.refs import ImageError
from vfleet.paths import home, release_dir
from vfleet.profile_schema import FAMILIES
from vfleet.profiles import Catalog
from vfleet.supply import default_store
from vfleet.supply import policy as vpolicy
from vfleet.supply.identity import registry_manifest_digest, split_ref
from vfleet.supply.policy import Rules
from vfleet.supply.store import SupplyError

ACTIONS = ("dockerd", "base", "wheels", "standin", "build", "layers", "sign", "verify", "resolve")


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help="build and inspect the images",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=ACTIONS)
    p.add_argument("name", nargs="?", help="layers, sign, verify: image reference")
    p.add_argument("--family", choices=FAMILIES, default="cpu")
    p.add_argument(
        "--base",
        metavar="VERSION",
        help="build, standin: the vLLM base, one of versions.json's bases (default: the default base); the cpu "
        "image has the default base only",
    )
    p.add_argument(
        "--from-image", metavar="REF", help="build: the image to build FROM (default: the base's pinned upstream image)"
    )
    p.add_argument("--standin", action="store_true", help="build: FROM the local GPU stand-in of the base (builds it)")
    p.add_argument("--tag", help="build: image reference (default: the pinned vfleet image name)")
    p.add_argument("--force", action="store_true", help="base/standin: rebuild even if present")
    p.add_argument("--no-cache", action="store_true", help="build: do not use the build cache")
    p.add_argument(
        "--release", action="store_true", help="build: a release build; the GPU base must be pinned by digest"
    )
    p.add_argument(
        "--allow-empty-digest", action="store_true", help="build --release: accept a base pin without digest"
    )
    sup = p.add_argument_group("supply chain (docs/supply-chain.md)")
    sup.add_argument("--store", type=Path, help="supply store (default: VFLEET_SUPPLY_STORE or REPORTS/supply)")
    sup.add_argument("--sign-key", type=Path, metavar="PRIV", help="build: sign the provenance with this ed25519 key")
    sup.add_argument("--no-audit", action="store_true", help="build: skip pip-audit (the report says 'not run')")
    sup.add_argument(
        "--key",
        action="append",
        default=[],
        help="sign: the private key (PEM); verify: a public key trusted for the provenance role, PUB or ROLE,...=PUB "
        "(repeatable; default VFLEET_TRUSTED_KEYS_PROVENANCE)",
    )
    sup.add_argument("--json", action="store_true", help="verify, resolve: print the result as JSON")
    sup.add_argument("--allow-standin", action="store_true", help="verify: accept the local GPU stand-in base")
    sup.add_argument(
        "--profile",
        action="append",
        default=[],
        help="verify: a serve profile that will run the image (repeatable): the vulnerability policy of its class "
        "(production or not) applies, the production one if any is; none given: the production one",
    )
    sup.add_argument(
        "--policy",
        type=Path,
        metavar="FILE",
        help="verify: the vulnerability policy file (default: vulnerability-policy.yaml of the checkout, if any)",
    )
    return p


def run(args: argparse.Namespace) -> int:
    if args.action == "build" and args.release:
        if args.from_image or args.standin:
            raise images.ImageError("--release builds on the pinned base image: drop --from-image/--standin")
        images.release_base_check(args.family, allow_empty_digest=args.allow_empty_digest, version=args.base)
    if args.action in ("sign", "verify"):
        return _supply(args)
    if args.action == "resolve":
        return _resolve(args)
    if args.action == "wheels":
        print(images.fetch_wheels())
        return 0
    print(f"dockerd: {ensure_dockerd()}", file=sys.stderr)
    if args.action == "dockerd":
        return 0
    if args.action == "base":
        print(images.build_base(force=args.force))
    elif args.action == "standin":
        print(images.build_standin(force=args.force, version=args.base))
    elif args.action == "build":
        base = args.from_image
        if args.standin:
            if args.family == "cpu":
                raise images.ImageError("--standin is for the cuda and rocm families; the cpu image has a real base")
            if base:
                raise images.ImageError("--standin and --from-image both name the image to build FROM: give one")
            base = images.build_standin(version=args.base)
        # The supply chain's libraries (securesystemslib, cryptography) are the controller's, not the images':
        # imported where used, so that `vfleet serve` in an image starts without them.
        from vfleet.supply.attest import attest_result  # noqa: PLC0415
        from vfleet.supply.statements import load_private_key  # noqa: PLC0415

        if args.sign_key:
            load_private_key(args.sign_key)  # a bad key fails before the build, not after it
        res = images.build_image(args.family, base=base, tag=args.tag, no_cache=args.no_cache, vllm_version=args.base)
        print(res.output[-3000:], file=sys.stderr)
        # After the build, the image command (not the build) writes its supply-chain record.
        record = attest_result(res, args.store or default_store(), sign_key=args.sign_key, audit=not args.no_audit)
        print(f"built {res.ref} in {res.seconds:.0f} s; supply record {record}", file=sys.stderr)
        print(images.layer_report(res.ref))
    elif args.action == "layers":
        if not args.name:
            raise images.ImageError("vfleet image layers IMAGE: name the image")
        print(images.layer_report(args.name))
    return 0


def _resolve(args: argparse.Namespace) -> int:
    """The one resolution of a run's image: REF's registry (with docker's login for it) names the digest."""
    if not args.name:
        raise ImageError("vfleet image resolve REF: name the image")
    out: dict[str, Any] = {"ref": args.name, "resolved": False, "digest": "", "image": ""}
    try:
        host, path, _, _ = split_ref(args.name)
        digest = registry_manifest_digest(args.name)
        out.update(resolved=True, digest=digest, image=f"{host}/{path}@{digest}")
        out["reason"] = f"{args.name} is {out['image']} at its registry"
    except SupplyError as exc:
        out["reason"] = f"cannot resolve {args.name} at its registry: {exc}"
    print(json.dumps(out, indent=1) if args.json else (out["image"] or out["reason"]))
    return 0 if out["resolved"] else 1


def _supply(args: argparse.Namespace) -> int:
    # cryptography and securesystemslib: see run().
    from vfleet.supply.attest import sign_image  # noqa: PLC0415
    from vfleet.supply.check import verify  # noqa: PLC0415
    from vfleet.supply.statements import PROVENANCE, keyring  # noqa: PLC0415

    if not args.name:
        raise ImageError(f"vfleet image {args.action} REF: name the image")
    store = args.store or default_store()
    if args.action == "sign":
        if len(args.key) != 1:
            raise ImageError("vfleet image sign REF --key PRIV: give exactly one private key file")
        print(sign_image(args.name, Path(args.key[0]).expanduser(), store))
        return 0
    keys = keyring(args.key, default=PROVENANCE)
    # The materials are compared with the release data (a rollback's snapshot, else the checkout); the
    # vulnerability policy is always today's, from the home.
    rules = vuln_rules(args.profile, args.policy, home(), release_dir())
    res = verify(args.name, keys, store, release_dir(), allow_standin=args.allow_standin, rules=rules)
    if args.json:
        print(json.dumps(res.to_dict(), indent=1))
    else:
        print(res.reason)
        for c in res.checks:
            print(f"  {'ok  ' if c.ok else 'FAIL'} {c.name}: {c.message}", file=sys.stderr)
        if res.vulnerabilities:
            print(f"  vulnerabilities: {res.vulnerabilities}", file=sys.stderr)
        if res.judgement and res.judgement.verdict == "warn":
            print(f"WARNING: {res.judgement.line}", file=sys.stderr)
    return 0 if res.ok else 1


def vuln_rules(profiles: list[str], policy: Path | None, root: Path, release: Path | None = None) -> Rules:
    """The vulnerability policy of ROOT for the profiles that will run the image: production's if any of
    them is production (or none is named); each name must be a profile of RELEASE (default ROOT)."""
    production = True
    if profiles:
        catalog = Catalog((release or root) / "serve_configs")
        production = any(catalog.load(p).production for p in profiles)
    return vpolicy.rules(root, production, policy)
