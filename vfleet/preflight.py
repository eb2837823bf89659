"""The node preflight of the image entrypoint (`vfleet serve`): what is checked before vLLM is started.

The profile is selected, the secrets read, the node and its mounts checked (the model directory complete, /dev/shm
large enough, the GPUs visible and of the profile's architecture, the patch set and base of this image, the serve
profiles the run line was rendered from), and the banner and the `vllm serve` command line written. A failed check
raises PreflightError (exit 3) naming what to fix. The command (vfleet/commands/serve.py) only parses and execs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import struct
from pathlib import Path
from typing import Any

from vfleet import settings
from vfleet.detect import select
from vfleet.errors import VfleetError
from vfleet.gpus import detect_host
from vfleet.paths import profiles_digest
from vfleet.profiles import Catalog, Profile
from vfleet.render import PROFILES_DIGEST_ENV
from vfleet.rules import enforce
from vfleet.verify.log.templates import BANNER_RULER
from vfleet.vllm_args import serve_argv, write_config

SECRET_NAMES = ("VLLM_API_KEY", "HF_TOKEN")
MANIFEST = "vfleet_patch_manifest.json"


class PreflightError(VfleetError):
    """The node or the mounts are not ready to serve this profile."""

    exit_code = 3


# -- secrets --------------------------------------------------------------------------------------


def load_secrets(env: dict[str, str]) -> dict[str, str]:
    """Fill VLLM_API_KEY / HF_TOKEN from secret files where the environment lacks them; returns sources."""
    secrets_dir = settings.load(env).secrets_dir
    sources: dict[str, str] = {}
    for name in SECRET_NAMES:
        if env.get(name):
            sources[name] = "environment"
            continue
        f = secrets_dir / name.lower()
        if f.is_file():
            value = f.read_text().strip()
            if value:
                env[name] = value
                sources[name] = f"secret file {f}"
    return sources


# -- preflight ------------------------------------------------------------------------------------


def _safetensors_ok(path: Path) -> bool:
    """The file holds at least the header its first 8 bytes announce (catches truncated downloads)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(8)
    except OSError:
        return False
    if len(head) < 8:
        return False
    (hlen,) = struct.unpack("<Q", head)
    return bool(size >= 8 + hlen)


def check_model(model: str) -> str:
    """The model directory is there and complete. Returns a one-line summary."""
    path = Path(model)
    mount = f"mount the weights there: docker run --volume HOST_DIR:{model}:ro (vfleet render shows the line)"
    if not path.exists():
        raise PreflightError(f"model path {model} does not exist in the container; {mount}")
    if not path.is_dir():
        raise PreflightError(f"model path {model} is not a directory; {mount}")
    if not (path / "config.json").is_file():
        raise PreflightError(f"model path {model} has no config.json: not a model directory, or an incomplete copy")
    on_disk = sorted(p.name for p in path.glob("*.safetensors"))
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            wanted = sorted(set(weight_map.values()))
        except (ValueError, KeyError, TypeError) as exc:
            raise PreflightError(f"{index}: not a safetensors index ({exc}); re-download the model") from exc
        missing = [s for s in wanted if s not in on_disk]
        extra = [s for s in on_disk if s not in wanted]
        if missing or extra:
            detail = []
            if missing:
                detail.append(f"missing {len(missing)}: {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}")
            if extra:
                detail.append(f"not in the index {len(extra)}: {', '.join(extra[:4])}")
            raise PreflightError(
                f"model {model} is incomplete: the index names {len(wanted)} shards, the directory has "
                f"{len(on_disk)} ({'; '.join(detail)}); finish or redo the download"
            )
        shards = wanted
    else:
        if not on_disk:
            raise PreflightError(f"model path {model} has no *.safetensors weights and no index; {mount}")
        shards = on_disk
    bad = [s for s in shards if not _safetensors_ok(path / s)]
    if bad:
        raise PreflightError(f"model {model}: truncated safetensors shard(s): {', '.join(bad[:4])}; re-download them")
    return f"model {model}: {len(shards)} shard(s) complete"


def check_shm(profile: Profile, shm: Path = Path("/dev/shm")) -> str:
    need = profile.platform.runtime.min_shm_bytes
    try:
        st = os.statvfs(shm)
    except OSError as exc:
        raise PreflightError(f"{shm} is not available ({exc.strerror}); run with --ipc=host or --shm-size") from exc
    have = st.f_blocks * st.f_frsize
    if have < need:
        hint = profile.platform.runtime.shm_size or f"{-(-need // 2**30)}g"
        raise PreflightError(
            f"/dev/shm is {have / 2**20:.0f} MiB, profile {profile.name} needs at least "
            f"{need / 2**20:.0f} MiB: "
            f"run with --ipc=host or --shm-size {hint}"
        )
    return f"shm {have / 2**20:.0f} MiB >= {need / 2**20:.0f} MiB"


def check_gpus(profile: Profile) -> str:
    plat = profile.platform
    if plat.gpus == 0:
        return "GPUs: none needed"
    if plat.vendor == "amd" and not Path("/dev/kfd").exists():
        raise PreflightError(
            f"no /dev/kfd in the container: profile {profile.name} needs AMD GPUs; run with "
            "--device /dev/kfd --device /dev/dri --group-add video"
        )
    host = detect_host()
    fix = "--gpus all" if plat.vendor == "nvidia" else "--device /dev/kfd --device /dev/dri --group-add video"
    if host.vendor != plat.vendor:
        raise PreflightError(
            f"profile {profile.name} needs {plat.vendor} {plat.arch} GPUs, but the container sees "
            f"{host.describe()}; "
            f"run with {fix}, or pick the profile of this node (VFLEET_PROFILE)"
        )
    if host.arch != plat.arch:
        raise PreflightError(
            f"profile {profile.name} is for {plat.arch}, but the GPUs here are {host.arch} "
            f"({host.describe()}); "
            "set VFLEET_PROFILE to this node's profile"
        )
    need = profile.gpus_needed()
    if host.count < need:
        raise PreflightError(f"profile {profile.name} needs {need} GPUs; the container sees {host.count}")
    return f"GPUs: {host.describe()}"


# -- banner ---------------------------------------------------------------------------------------


def patch_manifest() -> tuple[Path | None, dict[str, Any] | None]:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None, None
    path = Path(next(iter(spec.submodule_search_locations))) / MANIFEST
    if not path.is_file():
        return path, None
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except ValueError:
        return path, None
    return path, data


def check_base(vllm_base: str | None) -> None:
    """The profiles are loaded with the layer of the base VFLEET_VLLM_BASE names (the image's build sets
    it); the vLLM of this image is patched for the base its patch manifest names. They must agree: an
    environment that names another base would load that base's layer for this vLLM. Without a manifest
    (an unpatched vLLM, the demo's venv) there is nothing to compare."""
    path, manifest = patch_manifest()
    patched = (manifest or {}).get("base_version")
    if not patched:
        return
    want = Catalog(base=vllm_base).base
    if patched != want:
        raise PreflightError(
            f"this image's vLLM is patched for base {patched} ({path}), but the profiles would load for base {want} "
            f"(VFLEET_VLLM_BASE={vllm_base or 'unset: the default base'}); remove VFLEET_VLLM_BASE from the "
            "container's environment, the image sets it"
        )


def patch_names(manifest: dict[str, Any]) -> list[str]:
    items = manifest.get("patches", [])
    names: list[str] = []
    if isinstance(items, dict):
        return sorted(str(k) for k in items)
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            names.append(str(item.get("name") or item.get("file") or item.get("patch") or item))
        else:
            names.append(str(item))
    return names


def banner(
    profile: Profile,
    argv: list[str],
    checks: list[str],
    secrets: dict[str, str],
    how: str,
    env_over: list[str],
) -> str:
    baked = settings.load()  # the image's own labels, from its environment
    path, manifest = patch_manifest()
    if manifest is None:
        patches = f"NONE: no manifest at {path} (this vLLM is not patched by vfleet)"
    else:
        names = patch_names(manifest)
        patches = f"{len(names)} applied on vLLM {manifest.get('base_version', manifest.get('base', '?'))}: " + (
            ", ".join(names) or "(none)"
        )
    api = secrets.get("VLLM_API_KEY")
    auth = f"required (VLLM_API_KEY from {api})" if api else "NOT required (VFLEET_ALLOW_NO_API_KEY=1)"
    lines = [
        BANNER_RULER,
        f"vfleet serve  image {baked.image or '(not in an image)'}  revision {baked.revision or '?'}",
        f"  base      {baked.base_image or '?'}",
        f"  patches   {patches}",
        f"  profile   {profile.name} ({how}); {', '.join(profile.sources)}",
        f"  preflight {'; '.join(checks)}",
        f"  auth      {auth}; HF token {'set' if 'HF_TOKEN' in secrets else 'not set'}",
        f"  env       {' '.join(f'{k}={v}' for k, v in sorted(profile.env.items()))}",
    ]
    if env_over:
        lines.append(f"  env kept  {' '.join(env_over)} (set by docker run, wins over the profile)")
    lines.append(f"  exec      {shlex.join(argv)}")
    lines.append(BANNER_RULER)
    return "\n".join(lines)


# -- run ------------------------------------------------------------------------------------------


def check_profiles_digest(env: dict[str, str]) -> None:
    """A `docker run` line from `vfleet render` (and so every fleet node) names the serve profiles it
    was rendered from; this copy must be the same, or the node would serve another profile than the
    one the controller checked, rendered and will boot-verify. A line without it is not checked."""
    want = settings.load(env).profiles_digest or ""
    if not want:
        return
    have = profiles_digest()
    if have != want:
        raise PreflightError(
            f"the serve profiles in this image ({have}) are not the ones this container was rendered from "
            f"({want}, {PROFILES_DIGEST_ENV}): the image and the vfleet checkout that rendered the line are "
            "of different releases. Render with the checkout the image was built from (its label "
            "org.vfleet.revision), or build and roll out an image from this checkout"
        )


def prepare(extra: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str], str]:
    """Everything up to the exec: returns (argv, environment, banner). Raises on any failed check."""
    check_profiles_digest(env)
    secrets = load_secrets(env)
    s = settings.load(env)
    check_base(s.vllm_base)
    if not s.profile and not s.model:
        raise PreflightError(
            "no profile chosen: set VFLEET_PROFILE=MODEL/PLATFORM (the `vfleet render` docker run line does), "
            "or VFLEET_MODEL=MODEL to pick the platform from the detected GPUs"
        )
    profile = select(Catalog(), s.model or "", host=detect_host, env=env)
    how = "VFLEET_PROFILE" if s.profile else ("VFLEET_PLATFORM" if s.platform else "detected")
    enforce(profile)
    if "VLLM_API_KEY" not in secrets and "--api-key" not in extra and not s.allow_no_api_key:
        raise PreflightError(
            "no API key: the endpoint requires one by default. Put VLLM_API_KEY=... in the env file "
            "(docker run --env-file /etc/vfleet/secrets.env) or mount it as /run/secrets/vllm_api_key; "
            "set VFLEET_ALLOW_NO_API_KEY=1 only for a closed test network"
        )
    # Model first: a missing model must stop the container before anything touches a GPU.
    checks = [check_model(str(profile.vllm["model"])), check_shm(profile), check_gpus(profile)]
    run_dir = s.run_dir
    config = write_config(profile, run_dir / "vllm-config.yaml")
    argv = serve_argv(config, profile, extra)
    env_over = [k for k in profile.env if k in env and env[k] != profile.env[k]]
    out_env = {**env, **{k: v for k, v in profile.env.items() if k not in env_over}}
    text = banner(profile, argv, checks, secrets, how, env_over)
    return argv, out_env, text
