"""Running docker and other commands for an image build: output kept, failures raised as ImageError."""

from __future__ import annotations

import os
import subprocess
import sys

from vfleet.dockerd import docker, docker_bin
from vfleet.images.refs import ImageError


def image_exists(ref: str) -> bool:
    return docker("image", "inspect", ref, check=False).returncode == 0


def _log(msg: str) -> None:
    print(f"[vfleet image] {msg}", file=sys.stderr, flush=True)


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
