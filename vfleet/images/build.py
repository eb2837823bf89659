"""The image build: OCI label values (revision, tree digests) and `docker build` of images/Dockerfile.FAMILY."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from vfleet import __version__
from vfleet.digests import tree_digest
from vfleet.images.base import build_base, fetch_wheels
from vfleet.images.dockerrun import _docker_build
from vfleet.images.refs import FAMILIES, LABEL, ROOT, ImageError, base_ref, gpu_base_ref, image_ref, vllm_base

# -- labels and the image build -------------------------------------------------------------------


#: What an image is built from: a change under these makes the checkout's revision "-dirty".
BUILD_INPUTS = ("vfleet", "patches", "serve_configs", "images", "versions.json", "pyproject.toml")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False).stdout.strip()


def git_revision(root: Path) -> str:
    try:
        rev = _git(root, "rev-parse", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--", *BUILD_INPUTS)
    except OSError:
        return "unknown"
    return (rev or "unknown") + ("-dirty" if dirty else "")


def build_time(root: Path) -> dt.datetime:
    """The image's `created` time: SOURCE_DATE_EPOCH when set (reproducible-builds.org), else the commit time
    of the checkout's HEAD when its build inputs are unchanged, else now. A rebuild of one clean checkout
    then gets the same labels, and with every layer cached the same image ID, instead of a new image that
    differs from the last only in this label."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if epoch:
        try:
            return dt.datetime.fromtimestamp(int(epoch), dt.UTC)
        except (ValueError, OverflowError, OSError) as exc:
            raise ImageError(f"SOURCE_DATE_EPOCH={epoch!r} is not a Unix time in seconds: unset it or fix it") from exc
    rev = git_revision(root)
    if rev != "unknown" and not rev.endswith("-dirty"):
        try:
            return dt.datetime.fromtimestamp(int(_git(root, "log", "-1", "--format=%ct", "HEAD")), dt.UTC)
        except (OSError, ValueError):
            pass
    return dt.datetime.now(dt.UTC)


def source_url(root: Path) -> str:
    try:
        url = subprocess.run(
            ["git", "-C", str(root), "remote", "get-url", "origin"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        url = ""
    return url or "vfleet (local checkout)"


def build_labels(context: Path, version: str | None = None) -> dict[str, str]:
    """Label values: revision and source from the checkout, digests from the build context, the vLLM base
    VERSION (default: the default base; the Dockerfiles apply that base's series)."""
    return {
        "SOURCE_URL": source_url(ROOT),
        "VCS_REF": git_revision(ROOT),
        "CREATED": build_time(ROOT).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "VFLEET_VERSION": __version__,
        "VLLM_VERSION": vllm_base("cuda", version).version,
        "PATCHES_DIGEST": tree_digest([context / "patches"], context),
        "PROFILES_DIGEST": tree_digest([context / "serve_configs"], context),
    }


@dataclass
class BuildResult:
    """A built image, and what went into it: what the supply chain's record of the build names
    (vfleet.supply.attest.attest_build, which `vfleet image build` calls after the build)."""

    ref: str
    seconds: float
    output: str
    family: str
    context: Path
    base: str
    labels: dict[str, str]
    wheels: Path | None  # the wheels the CPU image installs from; None for the GPU families


def build_image(
    family: str,
    base: str | None = None,
    tag: str | None = None,
    context: Path | None = None,
    no_cache: bool = False,
    vllm_version: str | None = None,
) -> BuildResult:
    """Build images/Dockerfile.<family> on the vLLM base VLLM_VERSION (default: the default base of
    versions.json) with ``context`` (default: the checkout) and return its output. BASE overrides the base
    image (a stand-in); by default it is the base's pinned upstream image."""
    if family not in FAMILIES:
        raise ImageError(f"unknown image family {family!r}; choose one of {', '.join(FAMILIES)}")
    version = vllm_base(family, vllm_version).version  # an unknown base, or cpu on 0.34, stops here
    ctx = context or ROOT
    ref = tag or image_ref(family, version)
    args = [
        "--tag",
        ref,
        "--file",
        str(ctx / "images" / f"Dockerfile.{family}"),
        "--label",
        f"{LABEL}.managed=true",
        "--label",
        f"{LABEL}.family={family}",
    ]
    if family == "cpu":
        build_base()
        fetch_wheels()
        base = base or base_ref()
    else:
        base = base or gpu_base_ref(family, version)
    args += ["--build-arg", f"BASE_IMAGE={base}", "--build-arg", f"VFLEET_IMAGE={ref}"]
    labels = build_labels(ctx, version)
    for key, value in labels.items():
        args += ["--build-arg", f"{key}={value}"]
    if no_cache:
        args.append("--no-cache")
    args.append(str(ctx))
    check_profiles(ctx / "serve_configs")
    t0 = time.monotonic()
    out = _docker_build(args)
    wheels = ctx / ".cache" / "image-wheels" if family == "cpu" else None
    return BuildResult(ref, time.monotonic() - t0, out, family, ctx, base, labels, wheels)


def check_profiles(serve_configs: Path) -> None:
    """`vfleet check` on the profiles about to be baked in: a broken profile fails before the build."""
    env = dict(os.environ, VFLEET_SERVE_CONFIGS=str(serve_configs))
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet", "check"], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        raise ImageError(
            f"the profiles in {serve_configs} fail `vfleet check`; nothing was built:\n"
            f"{(proc.stdout + proc.stderr).strip()[-2000:]}"
        )
