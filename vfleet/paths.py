"""Where vfleet finds its data: a checkout, or the copy baked into an image."""

from pathlib import Path
from typing import Any

from vfleet import PACKAGE_DIR, pins, settings
from vfleet.digests import tree_digest
from vfleet.errors import VfleetError


def home() -> Path:
    """The directory that holds serve_configs/, patches/ and versions.json.

    VFLEET_HOME wins (images set it to /opt/vfleet); otherwise the checkout this package lives in.
    """
    env = settings.load().home
    root = env if env else PACKAGE_DIR.parent
    if not (root / "serve_configs").is_dir():
        raise VfleetError(
            f"no serve_configs/ under {root}: set VFLEET_HOME to the vfleet checkout or image data directory"
        )
    return root


#: A release's data, read from elsewhere than the vfleet home: a rollback to an image of an earlier
#: release points it at that release's snapshot (vfleet.verify.record.releases), so the serve profiles,
#: versions.json, patches/ and requirements/ the gates compare with are the image's own.
RELEASE_ENV = "VFLEET_RELEASE_DIR"


def suite_dir() -> Path:
    """The boot-verify suite, smoke_tests/ (of the checkout, or of an image's /opt/vfleet)."""
    path = home() / "smoke_tests"
    if not (path / "conftest.py").is_file():
        raise VfleetError(f"{path}: the boot-verify suite is missing; run from a vfleet checkout or image")
    return path


def release_dir() -> Path:
    """Where the release data lives (serve_configs/, versions.json, patches/, requirements/): VFLEET_RELEASE_DIR
    (a promoted release snapshot) when set, else the vfleet home. Reports, caches and smoke_tests/ stay in
    the home."""
    env = settings.load().release_dir
    if not env:
        return home()
    root = env
    if not (root / "serve_configs").is_dir():
        raise VfleetError(f"{RELEASE_ENV}={env} holds no serve_configs/: point it at a release snapshot or unset it")
    return root


def serve_configs_dir() -> Path:
    """The serve profiles: those of the release dir when VFLEET_RELEASE_DIR is set (a rollback's snapshot is
    one release, whole), else VFLEET_SERVE_CONFIGS when set, else the home's serve_configs/."""
    s = settings.load()
    if s.serve_configs and not s.release_dir:
        return s.serve_configs
    return release_dir() / "serve_configs"


def profiles_digest() -> str:
    """Digest of the serve profiles this process reads (serve_configs/), computed as `vfleet image
    build` computes the image label org.vfleet.profiles.digest: a checkout and an image built from it
    give the same value."""
    root = serve_configs_dir()
    return tree_digest([root], root.parent)


def versions() -> dict[str, Any]:
    """versions.json of the vfleet home (the checkout, or the copy an image carries)."""
    return pins.read(release_dir() / "versions.json")


def reports_dir() -> Path:
    """The one reports root: boot-verify reports (`vfleet verify`, `vfleet demo`) go under it,
    `vfleet promote` searches it, and the promotions registry is its promotions.jsonl.

    VFLEET_REPORTS wins; otherwise reports/ of the vfleet home (the checkout, or VFLEET_HOME in an
    image). Always absolute, so every working directory (ansible-playbook runs in ansible/) sees the
    same files.
    """
    env = settings.load().reports
    root = env.expanduser() if env else home() / "reports"
    return root.resolve()
