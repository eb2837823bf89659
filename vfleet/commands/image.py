"""`vfleet image ACTION`: build and inspect vfleet's images.

dockerd    make sure a Docker daemon runs (installs docker.io and starts dockerd when needed)
base       the Debian bookworm base: debootstrap --variant=minbase + docker import (pinned tag)
wheels     download the CPU image's pinned wheels into .cache/image-wheels
standin    a local stand-in for the pinned GPU base images (the pinned vLLM's Python tree, no GPU)
build      build images/Dockerfile.FAMILY with the OCI labels (cpu, cuda, rocm)
layers     print an image's layers and their sizes in bytes
step       a build step run inside the Dockerfiles (patch, verify)
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

ACTIONS = ("dockerd", "base", "wheels", "standin", "build", "layers", "step")


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help="build and inspect the images",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=ACTIONS)
    p.add_argument("name", nargs="?", help="layers: image reference; step: patch or verify")
    p.add_argument("--family", choices=("cpu", "cuda", "rocm"), default="cpu")
    p.add_argument("--base", help="build: base image (default: the pin; for GPU families in tests, the stand-in)")
    p.add_argument("--standin", action="store_true", help="build: use the local GPU stand-in base (builds it)")
    p.add_argument("--tag", help="build: image reference (default: the pinned vfleet image name)")
    p.add_argument("--force", action="store_true", help="base/standin: rebuild even if present")
    p.add_argument("--no-cache", action="store_true", help="build: do not use the build cache")
    p.add_argument(
        "--release", action="store_true", help="build: a release build; the GPU base must be pinned by digest"
    )
    p.add_argument(
        "--allow-empty-digest", action="store_true", help="build --release: accept a base pin without digest"
    )
    return p


def run(args: argparse.Namespace) -> int:
    from vfleet import images
    from vfleet.dockerd import ensure_dockerd

    if args.action == "step":
        if args.name == "patch":
            images.step_patch(args.family)
        elif args.name == "verify":
            images.step_verify(args.family)
        else:
            raise images.ImageError(f"unknown build step {args.name!r}; steps: patch, verify")
        return 0
    if args.action == "build" and args.release:
        if args.base or args.standin:
            raise images.ImageError("--release builds on the pinned base: drop --base/--standin")
        images.release_base_check(args.family, allow_empty_digest=args.allow_empty_digest)
    if args.action == "wheels":
        print(images.fetch_wheels())
        return 0
    print(f"dockerd: {ensure_dockerd()}", file=sys.stderr)
    if args.action == "dockerd":
        return 0
    if args.action == "base":
        print(images.build_base(force=args.force))
    elif args.action == "standin":
        print(images.build_standin(force=args.force))
    elif args.action == "build":
        base = args.base
        if args.standin:
            if args.family == "cpu":
                raise images.ImageError("--standin is for the cuda and rocm families; the cpu image has a real base")
            base = images.build_standin()
        res = images.build_image(args.family, base=base, tag=args.tag, no_cache=args.no_cache)
        print(res.output[-3000:], file=sys.stderr)
        print(f"built {res.ref} in {res.seconds:.0f} s", file=sys.stderr)
        print(images.layer_report(res.ref))
    elif args.action == "layers":
        if not args.name:
            raise images.ImageError("vfleet image layers IMAGE: name the image")
        print(images.layer_report(args.name))
    return 0
