"""Where vfleet finds its data: a checkout, or the copy baked into an image."""

import os
from pathlib import Path
from typing import Any

from vfleet import PACKAGE_DIR, pins
from vfleet.errors import VfleetError


def home() -> Path:
    """The directory that holds serve_configs/, patches/ and versions.json.

    VFLEET_HOME wins (images set it to /opt/vfleet); otherwise the checkout this package lives in.
    """
    env = os.environ.get("VFLEET_HOME")
    root = Path(env) if env else PACKAGE_DIR.parent
    if not (root / "serve_configs").is_dir():
        raise VfleetError(
            f"no serve_configs/ under {root}: set VFLEET_HOME to the vfleet checkout or image data directory"
        )
    return root


def serve_configs_dir() -> Path:
    override = os.environ.get("VFLEET_SERVE_CONFIGS")
    return Path(override) if override else home() / "serve_configs"


def profiles_digest() -> str:
    """Digest of the serve profiles this process reads (serve_configs/), computed as `vfleet image
    build` computes the image label org.vfleet.profiles.digest: a checkout and an image built from it
    give the same value."""
    from vfleet.images import tree_digest

    root = serve_configs_dir()
    return tree_digest([root], root.parent)


def versions() -> dict[str, Any]:
    """versions.json of the vfleet home (the checkout, or the copy an image carries)."""
    return pins.read(home() / "versions.json")


def reports_dir() -> Path:
    """The one reports root: boot-verify reports (`vfleet verify`, `vfleet demo`) go under it,
    `vfleet promote` searches it, and the promotions registry is its promotions.jsonl.

    VFLEET_REPORTS wins; otherwise reports/ of the vfleet home (the checkout, or VFLEET_HOME in an
    image). Always absolute, so every working directory (ansible-playbook runs in ansible/) sees the
    same files.
    """
    env = os.environ.get("VFLEET_REPORTS")
    root = Path(env).expanduser() if env else home() / "reports"
    return root.resolve()
