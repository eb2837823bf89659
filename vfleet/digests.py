"""Content digests, on the ground floor: every floor that names a tree or a file by its content (the image
labels, `vfleet.paths.profiles_digest`, the supply-chain materials, the release snapshots) computes it here."""

from __future__ import annotations

import hashlib
from pathlib import Path


def tree_digest(paths: list[Path], root: Path) -> str:
    """sha256 over (relative path, content) of every file under ``paths``, in sorted order."""
    h = hashlib.sha256()
    files: list[Path] = []
    for p in paths:
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            files.extend(
                f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts and not f.name.startswith(".")
            )
    for f in sorted(files):
        h.update(str(f.relative_to(root)).encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return "sha256:" + h.hexdigest()


def sha256_file(path: Path) -> str:
    """The hex sha256 of one file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
