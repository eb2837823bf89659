"""`vfleet serve [-- VLLM_ARGS...]`: the image entrypoint. Select the profile, check the node, exec vLLM.

1. Profile: VFLEET_PROFILE=MODEL/PLATFORM, or VFLEET_MODEL plus the detected GPUs (VFLEET_PLATFORM
   overrides the detection).
2. Secrets: VLLM_API_KEY and HF_TOKEN from the environment (docker run --env-file) or from a secret file
   (/run/secrets/vllm_api_key, /run/secrets/hf_token). An API key is required unless
   VFLEET_ALLOW_NO_API_KEY=1.
3. Preflight, before any GPU work: the model directory is present and complete (every shard that
   model.safetensors.index.json names is there, and no other), /dev/shm is large enough, the GPUs are
   visible and of the profile's architecture.
4. A one-screen banner (image, base, patches, profile, arguments), then exec of `vllm serve --config`
   with the rendered profile, so that vLLM becomes this process and gets the container's signals.
   Arguments after `--` (the extra `docker run` arguments) are passed to vLLM last, so they win.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

from vfleet.preflight import PreflightError, prepare


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help="image entrypoint: preflight, banner, exec vLLM",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--dry-run", action="store_true", help="print the banner and the command; do not exec")
    p.add_argument("vllm_args", nargs=argparse.REMAINDER, help="after --: extra arguments for vllm serve")
    return p


def run(args: argparse.Namespace) -> int:
    extra = list(args.vllm_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    env = dict(os.environ)
    argv, out_env, text = prepare(extra, env)
    print(text, file=sys.stderr, flush=True)
    if args.dry_run:
        print(shlex.join(argv))
        return 0
    try:
        os.execvpe(argv[0], argv, out_env)
    except OSError as exc:
        raise PreflightError(f"cannot start {argv[0]}: {exc.strerror}; is vLLM installed in this image?") from exc
    return 1  # not reached
