"""The model manifest: every file of a model directory with its size and sha256, and one digest over them.

What a node serves is its image and the weights it mounts; the manifest names the weights the way an image
digest names the image. Its statement has the form of OpenSSF model signing (the `model-signing` package,
sigstore/model-transparency, predicate `https://model_signing/signature/v1.0`, serialization `files`): the
resources are the files by relative path, in name order, each with its sha256, and the subject's digest
is the sha256 over the files' raw digests in that order, so `model_signing` computes the same digest for the
same directory. vfleet writes it itself rather than through the package because the package signs with
sigstore bundles (Fulcio or elliptic-curve keys) where vfleet's chain of trust is DSSE envelopes signed by
role with ed25519 keys (docs/supply-chain.md), and because a fleet check needs what the package has not: a
cache by (path, size, mtime, inode), so that a second look at an unchanged directory costs seconds, with
block digests that let such a look still read samples of every file.

Every file counts, whatever its name, except the few in ``IGNORED`` (version-control files the server
never reads). A symbolic link is refused: what it points at may change without the directory changing.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BLOCK",
    "IGNORED",
    "PREDICATE",
    "FileEntry",
    "Manifest",
    "ManifestError",
    "compare",
    "compute",
    "from_statement",
    "listing",
    "sample_check",
]

PREDICATE = "https://model_signing/signature/v1.0"
STATEMENT = "https://in-toto.io/Statement/v1"
#: Block size of the cached block digests that a sampled check reads again.
BLOCK = 8 << 20
#: Names that are not part of a model (as model_signing's default ignore list has them).
IGNORED = frozenset({".git", ".gitattributes", ".github", ".gitignore", "model.sig"})
SERIALIZATION = {"method": "files", "hash_type": "sha256", "allow_symlinks": False, "ignore_paths": sorted(IGNORED)}


class ManifestError(Exception):
    """A directory cannot be listed, or a manifest cannot be read."""


@dataclass(frozen=True)
class FileEntry:
    name: str  # the path relative to the model directory, with "/"
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    model: str
    files: tuple[FileEntry, ...]

    @property
    def digest(self) -> str:
        """sha256:HEX over the files' raw digests in name order (model_signing's subject digest)."""
        h = hashlib.sha256()
        for f in self.files:
            h.update(bytes.fromhex(f.sha256))
        return "sha256:" + h.hexdigest()

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def statement(self) -> dict[str, Any]:
        """The in-toto Statement of the manifest, in model signing's v1.0 form (sizes added beside)."""
        return {
            "_type": STATEMENT,
            "subject": [{"name": self.model, "digest": {"sha256": self.digest.removeprefix("sha256:")}}],
            "predicateType": PREDICATE,
            "predicate": {
                "serialization": SERIALIZATION,
                "resources": [
                    {"name": f.name, "algorithm": "sha256", "digest": f.sha256, "size": f.size} for f in self.files
                ],
            },
        }


def from_statement(data: dict[str, Any]) -> Manifest:
    """The manifest a statement holds; an error when its subject's digest is not that of its resources."""
    try:
        if data["predicateType"] != PREDICATE:
            raise ManifestError(f"predicateType {data['predicateType']!r}: expected {PREDICATE}")
        files = tuple(
            FileEntry(str(r["name"]), int(r["size"]), str(r["digest"]))
            for r in sorted(data["predicate"]["resources"], key=lambda r: str(r["name"]))
        )
        (subject,) = data["subject"]
        m = Manifest(str(subject["name"]), files)
        claimed = "sha256:" + str(subject["digest"]["sha256"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ManifestError(f"not a model manifest statement ({type(exc).__name__}: {exc})") from None
    if claimed != m.digest:
        raise ManifestError(f"the statement's subject digest {claimed} is not its files' digest {m.digest}")
    return m


def listing(root: Path) -> list[Path]:
    """The files of a model directory that its manifest lists, in name order."""
    if not root.is_dir():
        raise ManifestError(f"{root}: not a directory (give the model directory the server loads)")
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED)
        for name in filenames:
            p = Path(dirpath) / name
            if name in IGNORED:
                continue
            if p.is_symlink():
                raise ManifestError(f"{p}: a symbolic link; a model manifest lists regular files only (copy it in)")
            out.append(p)
    for d in dirnames:
        if (Path(root) / d).is_symlink():
            raise ManifestError(f"{root / d}: a symbolic link; a model manifest lists regular files only")
    return sorted(out, key=lambda p: p.relative_to(root).as_posix())


def _key(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _hash_file(path: Path) -> tuple[str, list[str]]:
    """(sha256 of the file, sha256 of each BLOCK of it)."""
    whole = hashlib.sha256()
    blocks: list[str] = []
    with path.open("rb") as fh:
        while chunk := fh.read(BLOCK):
            whole.update(chunk)
            blocks.append(hashlib.sha256(chunk).hexdigest())
    return whole.hexdigest(), blocks


Progress = Callable[[int], object]


def compute(
    root: Path,
    cache: Path | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
    model: str | None = None,
) -> Manifest:
    """The manifest of ROOT. With CACHE (a JSON file), a file whose (size, mtime, inode) is what the cache
    holds is not read again, and the cache is written back. Files are hashed WORKERS at a time (hashlib
    releases the GIL); PROGRESS is called with the bytes of each file as it is done."""
    root = Path(root)
    paths = listing(root)
    known = _read_cache(cache, root)
    fresh: dict[str, dict[str, Any]] = {}

    def one(p: Path) -> FileEntry:
        rel = p.relative_to(root).as_posix()
        st = p.stat()
        hit = known.get(rel)
        if hit is not None and hit.get("key") == _key(st):
            digest, blocks = str(hit["sha256"]), list(hit["blocks"])
        else:
            digest, blocks = _hash_file(p)
        fresh[rel] = {"key": _key(st), "sha256": digest, "blocks": blocks}
        if progress is not None:
            progress(st.st_size)
        return FileEntry(rel, st.st_size, digest)

    with ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as pool:
        files = tuple(pool.map(one, paths))
    if cache is not None:
        _write_cache(cache, root, fresh)
    return Manifest(model or root.name, files)


def sample_check(root: Path, cache: Path, samples: int = 2, seed: int | None = None) -> list[str]:
    """Read SAMPLES random blocks of every file again and compare them with the cache's block digests: what a
    cached look misses when a file changed in place and kept its size, mtime and inode (a failing disk).
    Returns the problems, each naming the file and the block."""
    known = _read_cache(cache, root)
    rng = random.Random(seed)
    bad: list[str] = []
    for rel, entry in sorted(known.items()):
        blocks = list(entry.get("blocks", []))
        if not blocks:
            continue
        path = root / rel
        with path.open("rb") as fh:
            for i in sorted(rng.sample(range(len(blocks)), min(samples, len(blocks)))):
                fh.seek(i * BLOCK)
                if hashlib.sha256(fh.read(BLOCK)).hexdigest() != blocks[i]:
                    end = (i + 1) * BLOCK - 1
                    bad.append(f"{rel}: block {i} (bytes {i * BLOCK}-{end}) differs from when it was hashed")
    return bad


def _read_cache(cache: Path | None, root: Path) -> dict[str, dict[str, Any]]:
    if cache is None or not cache.is_file():
        return {}
    try:
        data = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}  # a cache that cannot be read is no cache: every file is hashed again
    if data.get("root") != str(root.resolve()) or data.get("block") != BLOCK:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def _write_cache(cache: Path, root: Path, files: dict[str, dict[str, Any]]) -> None:
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(cache.name + ".tmp")
    tmp.write_text(json.dumps({"root": str(root.resolve()), "block": BLOCK, "files": files}))
    tmp.replace(cache)


def compare(promoted: Manifest, seen: Manifest) -> list[str]:
    """What differs between the promoted manifest and the one seen, one line per file: missing, extra,
    another size (a truncated or grown file), another sha256. Empty when the digests are equal."""
    if promoted.digest == seen.digest:
        return []
    want = {f.name: f for f in promoted.files}
    have = {f.name: f for f in seen.files}
    out: list[str] = []
    for name in sorted(want.keys() | have.keys()):
        w, h = want.get(name), have.get(name)
        if h is None:
            out.append(f"{name}: missing (promoted: {w.size if w else '?'} bytes, sha256 {w.sha256 if w else '?'})")
        elif w is None:
            out.append(f"{name}: an extra file, not in the promoted manifest ({h.size} bytes, sha256 {h.sha256})")
        elif w.size != h.size:
            out.append(f"{name}: {h.size} bytes where the promoted file has {w.size} (truncated or replaced)")
        elif w.sha256 != h.sha256:
            out.append(f"{name}: sha256 {h.sha256}, promoted {w.sha256} (same size: altered in place)")
    return out
