"""Image references, parsed in one place: `[HOST/]PATH[:TAG][@sha256:D]`, as docker reads them.

The first part of the name is a registry host when it has a dot or a port or is `localhost`; else the whole
name is the repository path (an image on this daemon only, or Docker Hub's short form). The supply chain asks
the host for the digest (vfleet.supply.identity); a boot-verify report matches the repository against docker's
RepoDigests (vfleet.verify.record.image). Both read the reference through `parse`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ImageRef:
    host: str  # the registry host, or "" where the name has none
    path: str  # the repository path inside it ("" for a reference that names none)
    tag: str | None
    digest: str | None  # sha256:HEX where the reference pins one

    @property
    def repo(self) -> str:
        """The repository as docker names it in RepoDigests: HOST/PATH, or PATH."""
        return f"{self.host}/{self.path}" if self.host else self.path

    @property
    def tag_or_latest(self) -> str:
        """The tag a registry is asked for: the reference's, "latest" where it names neither tag nor digest,
        "" where it pins a digest alone."""
        return self.tag or ("" if self.digest else "latest")


def parse(ref: str) -> ImageRef:
    """The parts of an image reference (nothing is checked here: an empty path is the caller's to refuse)."""
    rest, _, digest = ref.partition("@")
    first, slash, _ = rest.partition("/")
    host = first if slash and ("." in first or ":" in first or first == "localhost") else ""
    path = rest[len(host) + 1 :] if host else rest
    tag = None
    if ":" in path.rsplit("/", 1)[-1]:
        path, tag = path.rsplit(":", 1)
    return ImageRef(host, path, tag or None, digest or None)
