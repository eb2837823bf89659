"""Release snapshots: the release data an image was promoted with, kept beside the promotions registry,
so that a rollback to that image is checked against its own release and not against today's checkout.

A rollback goes to an image of an earlier release. Every gate compares the image with release data:
`promote --check` with the serve-profiles digest of its signed boot-verify summary, the supply-chain
gate with the materials of its signed build Statement (serve_configs/, versions.json, the patch series,
requirements/), the rollout with its org.vfleet.profiles.digest label, and boot-verify with the
profile's expectations. Against a checkout that has moved on, each of them would refuse every rollback
across a profile change, and an operator in an emergency would reach for a switch.

So `vfleet promote` copies the release data it promoted under (vfleet.paths.release_dir()) to
RELEASES/sha256-HEX/R, HEX the image's registry digest, R a digest of the data, RELEASES the folder
`releases` beside the registry, and names it in the registry entry. A rollback looks up the snapshot of
the newest promotion of the target's digest (`vfleet promote --release-of REF`) and runs every gate
with VFLEET_RELEASE_DIR pointing at it. The snapshot is no record the gates trust:
a copy edited after the promotion changes the digests the gates compare, and the signed Statement, the
signed summary and the image's label then refuse it. Where there is no snapshot (an image promoted
before snapshots existed, or in another registry) the run says so and the gates compare with the
checkout, failing closed if its release differs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from vfleet.digests import tree_digest
from vfleet.errors import VfleetError
from vfleet.paths import release_dir, serve_configs_dir

#: What a snapshot holds: everything the gates compare an image with (vfleet.supply.check.material_
#: problems, the profiles label, the profile catalog).
PARTS = ("serve_configs", "versions.json", "patches", "requirements")
MANIFEST = "release.json"


def store(registry: Path) -> Path:
    """The snapshots' folder of a promotions registry: `releases/` beside it."""
    return registry.parent / "releases"


def _image_dir(registry: Path, digest: str) -> Path:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64 or not all(c in "0123456789abcdef" for c in hexpart):
        raise VfleetError(f"{digest!r} is no registry digest (sha256:<64 hex>)")
    return store(registry) / f"sha256-{hexpart}"


def _digests(root: Path) -> dict[str, str]:
    return {part: tree_digest([root / part], root) for part in PARTS if (root / part).exists()}


def _sources(source: Path | None) -> dict[str, Path]:
    """Where each part is read from: all of SOURCE, or this process's release data (serve_configs/ where
    vfleet.paths.serve_configs_dir() says, the rest from vfleet.paths.release_dir())."""
    if source is not None:
        return {part: source / part for part in PARTS}
    root = release_dir()
    return {part: serve_configs_dir() if part == "serve_configs" else root / part for part in PARTS}


def save(registry: Path, digest: str, source: Path | None = None) -> Path:
    """Copy the release data of SOURCE (default: this process's, see _sources) to a snapshot under DIGEST
        and return its path, RELEASES/sha256-HEX/R where R is a digest of the data itself: a snapshot is never
        overwritten by other data (the same data promoted twice is one snapshot, other data is another one),
    and one whose content no longer matches its name (edited by hand) is replaced. Copied to a
        temporary folder and renamed, so a snapshot is whole or absent."""
    srcs = _sources(source)
    missing = [str(p) for p in srcs.values() if not p.exists()]
    if missing:
        raise VfleetError(f"the release data lacks {', '.join(missing)}: cannot keep a snapshot of it")
    base = _image_dir(registry, digest)
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / f".tmp.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        for part, path in srcs.items():
            if path.is_dir():
                shutil.copytree(path, tmp / part, ignore=shutil.ignore_patterns(".*", "__pycache__"))
            else:
                shutil.copy2(path, tmp / part)
        parts = _digests(tmp)
        name = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
        dest = base / name
        if dest.is_dir() and _digests(dest) != parts:
            shutil.rmtree(dest)  # edited since it was kept: its name says what it must hold
        if not dest.is_dir():
            (tmp / MANIFEST).write_text(json.dumps({"digest": digest, "parts": parts}, indent=1, sort_keys=True) + "\n")
            os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def find(registry: Path, digest: str) -> Path | None:
    """The snapshot the newest promotion of DIGEST in REGISTRY kept (its entry's `release`), or None when
    no entry names one that exists under this registry's releases/."""
    base = _image_dir(registry, digest).resolve()
    try:
        lines = registry.read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("digest") != digest or not isinstance(entry.get("release"), str):
            continue
        path = Path(entry["release"]).resolve()
        if path.parent == base and (path / "serve_configs").is_dir():
            return path
    return None
