"""`vfleet image step patch|verify`, kept for vfleet/commands/image.py: the Dockerfiles now call
`vfleet patches apply --platform FAMILY` and `vfleet patches verify --import-check` themselves (one vfleet
call per step); these two run exactly those."""

from __future__ import annotations

from vfleet.commands.patches import run_apply, run_verify
from vfleet.images.refs import ImageError
from vfleet.patchset.apply import vllm_site


def notice(msg: str) -> None:
    print(f"vfleet-build: NOTICE: {msg}", flush=True)


def step_patch(family: str) -> None:
    run_apply(None, family)


def step_verify(family: str) -> None:
    if run_verify(None, import_check=True) != 0:
        raise ImageError(f"`vfleet patches verify --import-check` failed for the {family} image (see above)")


__all__ = ["notice", "step_patch", "step_verify", "vllm_site"]
