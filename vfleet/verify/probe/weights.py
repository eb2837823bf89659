"""The weights the server loaded, named by their model manifest (vfleet.models.manifest).

Boot-verify judges an image serving some weights; the report, its signed summary and the promotion record
name those weights by their manifest digest, beside the image digest, so that a rollout can tell a node
whose weights are not the promoted ones (docs/supply-chain.md, "The model in the chain of trust"). The
manifest is computed where the server reads the weights: inside the verified container (`docker exec
CONTAINER vfleet model manifest ROOT --json`, the image's own vfleet, on the docker host of the run), or on
this machine for a server without a container. What cannot be computed fails the check: a run that cannot
name its weights cannot promote them.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from vfleet.models import manifest as mm

__all__ = ["WeightsError", "WeightsFigure", "measure", "problem"]


class WeightsError(Exception):
    """The manifest of the served weights could not be computed."""


@dataclass(frozen=True)
class WeightsFigure:
    root: str  # the model directory the server loaded (/v1/models `root`)
    where: str  # "container NAME" or "this machine"
    digest: str  # sha256:HEX, the manifest digest
    files: int
    bytes: int
    #: every file as [path, size, sha256]: what a rollout compares a node's weights with, to name the file that
    #: differs (vfleet.models.manifest.compare)
    entries: list[list[str | int]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _in_container(container: str, root: str, timeout_s: float) -> mm.Manifest:
    argv = ["docker", "exec", container, "vfleet", "model", "manifest", root, "--no-cache", "--json"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise WeightsError(f"`{' '.join(argv)}` did not finish in {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise WeightsError(f"`{' '.join(argv)}` failed (exit {proc.returncode}): {tail}")
    try:
        return mm.from_statement(json.loads(proc.stdout))
    except (ValueError, mm.ManifestError) as exc:
        raise WeightsError(f"`{' '.join(argv)}` printed no manifest statement: {exc}") from None


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def measure(root: str | None, container: str | None, url: str = "", timeout_s: float = 1800.0) -> WeightsFigure:
    """The manifest of ROOT where the server reads it: in CONTAINER when given, else on this machine, which only a
    server on this machine (URL on the loopback) reads from: elsewhere a directory of the same name here would be
    named in its stead."""
    if not root:
        raise WeightsError("/v1/models names no model root, so the weights the server loaded are unknown")
    host = (urlsplit(url).hostname or "") if url else "localhost"
    if not container and host not in LOOPBACK:
        raise WeightsError(
            f"the server at {url} is not on this machine and no --container was given: its weights ({root}) can "
            "be read only where it runs; verify with --container NAME [--docker-host URL]"
        )
    if container:
        m, where = _in_container(container, root, timeout_s), f"container {container}"
    else:
        try:
            m, where = mm.compute(Path(root)), "this machine"
        except (OSError, mm.ManifestError) as exc:
            raise WeightsError(f"{root}: {exc}") from None
    return WeightsFigure(root, where, m.digest, len(m.files), m.size, [[f.name, f.size, f.sha256] for f in m.files])


def problem(fig: WeightsFigure, accepted: list[str]) -> str | None:
    """None when the profile accepts these weights (it accepts any when it lists none); else why not."""
    if not accepted or fig.digest in accepted:
        return None
    return (
        f"the weights at {fig.root} ({fig.where}) have manifest {fig.digest}; the profile accepts only "
        f"{', '.join(accepted)} (verify.weights_accept): another model revision, or files changed"
    )
