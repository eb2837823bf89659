"""Turn a resolved profile into what a node runs: vLLM's --config YAML, the environment, `docker run`."""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vfleet import __version__
from vfleet.paths import profiles_digest, versions
from vfleet.profiles import Profile
from vfleet.vllm_args import config_yaml, serve_argv

#: Where images keep the compile caches (Triton, AITER JIT, torch.compile); mount a volume here.
CACHE_DIR = "/root/.cache"
LABEL_PREFIX = "org.vfleet"
#: The serve-profiles digest a `docker run` line was rendered from; the entrypoint checks its copy.
PROFILES_DIGEST_ENV = "VFLEET_PROFILES_DIGEST"


def env_lines(profile: Profile) -> list[str]:
    return [f"{k}={v}" for k, v in sorted(profile.env.items())]


def default_image(profile: Profile) -> str:
    pins = versions()
    repo = pins["images"][profile.family]
    return f"{repo}:{pins['vllm']['version']}-vfleet{__version__}"


def container_name(profile: Profile) -> str:
    return "vfleet-" + profile.name.replace("/", "-")


@dataclass
class DockerRun:
    """Options of one `docker run` for a profile. Device options come from the platform file only."""

    image: str
    model_dir: str = "/srv/models"
    host_port: int = 8000
    env_file: str | None = "/etc/vfleet/secrets.env"
    cache_volume: str | None = "vfleet-cache"
    name: str | None = None
    detach: bool = True
    extra_labels: dict[str, str] = field(default_factory=dict)
    extra_vllm_args: list[str] = field(default_factory=list)
    #: Tell the entrypoint which serve profiles this line was rendered from (VFLEET_PROFILES_DIGEST):
    #: it refuses to start when its own copy differs, so the container serves what was rendered.
    pin_profiles: bool = True


#: DockerRun's defaults by field name: `vfleet render` takes its option defaults from here, and a test
#: ties the node role's defaults (ansible/roles/vfleet_node/defaults/main.yml) to them.
DOCKER_RUN_DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in dataclasses.fields(DockerRun) if f.default is not dataclasses.MISSING
}


def docker_run_argv(profile: Profile, opts: DockerRun) -> list[str]:
    rt = profile.platform.runtime
    argv = ["docker", "run"]
    if opts.detach:
        argv.append("--detach")
    argv += ["--name", opts.name or container_name(profile)]
    labels = {
        f"{LABEL_PREFIX}.managed": "true",
        f"{LABEL_PREFIX}.profile": profile.name,
        **opts.extra_labels,
    }
    for key, value in labels.items():
        argv += ["--label", f"{key}={value}"]
    for dev in rt.devices:
        argv += ["--device", dev]
    for group in rt.group_add:
        argv += ["--group-add", group]
    if rt.gpus:
        argv += ["--gpus", rt.gpus]
    if rt.ipc:
        argv.append(f"--ipc={rt.ipc}")
    if rt.shm_size:
        argv += ["--shm-size", rt.shm_size]
    argv += ["--stop-timeout", str(rt.stop_timeout)]
    model_path = str(profile.vllm["model"])
    argv += ["--volume", f"{opts.model_dir}:{model_path}:ro"]
    spec = profile.vllm.get("speculative-config")
    if isinstance(spec, dict) and isinstance(spec.get("model"), str) and spec["model"].startswith("/"):
        draft = spec["model"]
        argv += ["--volume", f"{opts.model_dir.rstrip('/')}-draft:{draft}:ro"]
    if opts.cache_volume:
        argv += ["--volume", f"{opts.cache_volume}:{CACHE_DIR}"]
    argv += ["--publish", f"{opts.host_port}:{profile.port()}"]
    if opts.env_file:
        argv += ["--env-file", opts.env_file]
    # The image applies the profile's environment itself; only the selection travels here.
    argv += ["--env", f"VFLEET_PROFILE={profile.name}"]
    if opts.pin_profiles:
        argv += ["--env", f"{PROFILES_DIGEST_ENV}={profiles_digest()}"]
    argv.append(opts.image)
    argv += opts.extra_vllm_args
    return argv


def render_text(profile: Profile, waived: list[Any], opts: DockerRun) -> str:
    out = [f"# profile {profile.name}: {profile.description}"]
    out.append(f"# layers: {', '.join(profile.sources)}")
    out.append(
        f"# platform {profile.platform.platform}: {profile.platform.vendor} {profile.platform.arch}, "
        f"{profile.platform.gpus} GPUs; image family {profile.family}"
    )
    for v in waived:
        reason = next(w.reason for w in profile.waivers if w.rule == v.rule.id)
        out.append(f"# WAIVED rule {v.rule.id} ({v.finding.key}): {reason}")
    out.append("")
    out.append("## vLLM config (vllm serve --config FILE)")
    out.append(config_yaml(profile).rstrip())
    out.append("")
    out.append("## vLLM command (run by the image entrypoint, `vfleet serve`)")
    out.append(shlex.join(serve_argv(Path("FILE"), profile)))
    out.append("")
    out.append("## environment")
    out.extend(env_lines(profile) or ["(none)"])
    out.append("")
    out.append("## docker run")
    out.append(shlex.join(docker_run_argv(profile, opts)))
    return "\n".join(out) + "\n"
