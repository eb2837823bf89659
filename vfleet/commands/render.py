"""`vfleet render PROFILE`: the vLLM --config YAML, the environment and the full `docker run` line."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

from vfleet.paths import profiles_digest
from vfleet.profiles import Catalog
from vfleet.render import DOCKER_RUN_DEFAULTS, DockerRun, default_image, docker_run_argv, env_lines, render_text
from vfleet.rules import enforce
from vfleet.vllm_args import config_yaml, negative_flags, write_config

FORMATS = ("text", "json", "vllm-config", "env", "docker")


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help="render one profile", description=__doc__)
    p.add_argument("profile", help="MODEL/PLATFORM, e.g. glm-5.3-flash/mi355x (see `vfleet profiles`)")
    p.add_argument("--format", choices=FORMATS, default="text", help="what to print (default: all, as text)")
    p.add_argument("--image", help="image reference (default: the pinned vfleet image of the platform family)")
    # The defaults are DockerRun's (vfleet.render), written there once.
    d = DOCKER_RUN_DEFAULTS
    p.add_argument("--model-dir", default=d["model_dir"], help="host directory with the model weights")
    p.add_argument("--host-port", type=int, default=d["host_port"], help="host port to publish")
    p.add_argument(
        "--env-file",
        default=d["env_file"],
        help="env file with HF_TOKEN and VLLM_API_KEY on the node ('' for none)",
    )
    p.add_argument("--cache-volume", default=d["cache_volume"], help="volume for compile caches ('' for none)")
    p.add_argument("--name", help="container name (default: vfleet-MODEL-PLATFORM)")
    p.add_argument("--write-config", type=Path, metavar="FILE", help="also write the vLLM --config file here")
    return p


def run(args: argparse.Namespace) -> int:
    profile = Catalog().load(args.profile)
    result = enforce(profile)
    opts = DockerRun(
        image=args.image or default_image(profile),
        model_dir=args.model_dir,
        host_port=args.host_port,
        env_file=args.env_file or None,
        cache_volume=args.cache_volume or None,
        name=args.name,
    )
    if args.write_config:
        write_config(profile, args.write_config)
    if args.format == "text":
        print(render_text(profile, result.waived, opts), end="")
    elif args.format == "vllm-config":
        print(config_yaml(profile), end="")
    elif args.format == "env":
        print("\n".join(env_lines(profile)))
    elif args.format == "docker":
        print(shlex.join(docker_run_argv(profile, opts)))
    else:
        doc = {
            "profile": profile.name,
            "model": profile.model,
            "production": profile.production,
            "platform": profile.platform.model_dump(),
            "vllm": profile.vllm,
            "vllm_config_yaml": config_yaml(profile),
            "vllm_negative_flags": negative_flags(profile),
            "env": profile.env,
            "verify": profile.verify.model_dump(),
            "waived": [{"rule": v.rule.id, "key": v.finding.key} for v in result.waived],
            "served_model_name": profile.served_model_name(),
            "port": profile.port(),
            "image": opts.image,
            "profiles_digest": profiles_digest(),
            "docker_run": docker_run_argv(profile, opts),
        }
        print(json.dumps(doc, indent=2))
    return 0
