"""The patch series of each vLLM base, one header-carrying patch file per fix, and the checker.

A patch file is a block of `Key: value` headers (continuation lines start with whitespace), a blank
line, free text, then a git-style unified diff (`--- a/vllm/...`, `+++ b/vllm/...`) against the root of
a site-packages directory. git reads the diff (vfleet.patchset.gitapply); the headers are ours.
Each base in versions.json names its series file in patches/ (`patches/series` for the default base,
`patches/series-<version>` for another), which lists the patch files in apply order, `#` starts a
comment. A patch's `Bases:` header names the bases its diff is written for; the checker requires every
series to list only patches written for its base, and every patch to be listed by each base it names.
A patch is one file however many bases take it; a fix ported to another base is a second file that keeps
the fix's number (`0004-...patch` and `0004-...-<version>.patch`).
`patches/upstream.yaml` records fixes the base already contains (not patches, but verified by a test).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vfleet import paths, pins
from vfleet.errors import VfleetError
from vfleet.patchset import gitapply
from vfleet.profile_schema import FAMILIES

REQUIRED_HEADERS = (
    "Subject",
    "Origin",
    "Upstream-Status",
    "Applied-Upstream",
    "Bases",
    "Platforms",
    "Models",
    "Why",
    "Verified-By",
    "Remove-When",
)
PLATFORMS = FAMILIES  # a patch's Platforms header names image families
UPSTREAM_STATUSES = ("Pending", "Submitted", "Accepted", "Backport", "Inappropriate")
#: Files in patches/ that are not patches.
NON_PATCH_FILES = ("series", "upstream.yaml", "release-wheels.json", "README.md")


class PatchError(VfleetError):
    """A patch file or the series is malformed."""


@dataclass(frozen=True)
class Patch:
    name: str
    path: Path
    headers: dict[str, str]
    files: tuple[str, ...]  # paths under the site-packages root, as git reads them
    sha256: str

    @property
    def platforms(self) -> tuple[str, ...]:
        return tuple(p.strip() for p in self.headers["Platforms"].split(",") if p.strip())

    @property
    def bases(self) -> tuple[str, ...]:
        return tuple(b.strip() for b in self.headers["Bases"].split(",") if b.strip())

    @property
    def fix(self) -> str:
        """The fix's number (the name's leading digits): a port of a fix to another base keeps it."""
        return self.name.split("-", 1)[0]

    @property
    def upstream_status(self) -> str:
        return self.headers["Upstream-Status"]

    @property
    def verified_by(self) -> str:
        return self.headers["Verified-By"]

    @property
    def applied_upstream(self) -> str:
        return self.headers["Applied-Upstream"]

    def manifest_entry(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "sha256": self.sha256,
            "platforms": list(self.platforms),
            "upstream_status": self.upstream_status,
        }


def patches_dir() -> Path:
    return paths.home() / "patches"


def split_headers(text: bytes, source: str) -> tuple[dict[str, str], bytes]:
    """Headers until the first blank line; the rest is the body (free text + diff)."""
    headers: dict[str, str] = {}
    lines = text.splitlines(keepends=True)
    key = ""
    i = 0
    for i, raw in enumerate(lines):
        line = raw.decode("utf-8", "strict").rstrip("\r\n")
        if not line.strip():
            break
        if line[0] in " \t":
            if not key:
                raise PatchError(f"{source}: line {i + 1}: continuation line before any header")
            headers[key] = f"{headers[key]} {line.strip()}".strip()
            continue
        if ":" not in line:
            raise PatchError(f"{source}: line {i + 1}: expected 'Header: value', got {line!r}")
        key, value = (part.strip() for part in line.split(":", 1))
        if key in headers:
            raise PatchError(f"{source}: line {i + 1}: header {key} given twice")
        headers[key] = value
    else:
        raise PatchError(f"{source}: no blank line after the headers, so there is no diff")
    return headers, b"".join(lines[i + 1 :])


def load_patch(path: Path) -> Patch:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PatchError(f"{path}: cannot read the patch ({exc})") from exc
    headers, _ = split_headers(raw, path.name)
    gitapply.git()  # a missing git is one error for the whole series, not one per patch
    try:
        files = gitapply.files(path)
    except gitapply.GitApplyError as exc:
        raise PatchError(str(exc)) from exc
    for rel in files:
        if not rel.startswith("vllm/") or ".." in rel.split("/"):
            raise PatchError(
                f"{path.name}: {rel}: a patch changes files under vllm/ only, named git-style as "
                "--- a/vllm/... and +++ b/vllm/... (git strips the first path component, -p1)"
            )
    missing = [h for h in REQUIRED_HEADERS if not headers.get(h)]
    if missing:
        raise PatchError(f"{path.name}: missing or empty header(s): {', '.join(missing)}")
    plats = [p.strip() for p in headers["Platforms"].split(",") if p.strip()]
    bad = [p for p in plats if p not in PLATFORMS]
    if bad or not plats:
        raise PatchError(
            f"{path.name}: Platforms must list some of {', '.join(PLATFORMS)}, got {headers['Platforms']!r}"
        )
    bases = [b.strip() for b in headers["Bases"].split(",") if b.strip()]
    if not bases or any(not re.fullmatch(r"\d+\.\d+\.\d+", b) for b in bases):
        raise PatchError(
            f"{path.name}: Bases must list the vLLM versions its diff is written for, X.Y.Z, got {headers['Bases']!r}"
        )
    status = headers["Upstream-Status"].split()[0]
    if status not in UPSTREAM_STATUSES:
        raise PatchError(
            f"{path.name}: Upstream-Status must start with one of {', '.join(UPSTREAM_STATUSES)}, "
            f"got {headers['Upstream-Status']!r}"
        )
    if "::" not in headers["Verified-By"] or not headers["Verified-By"].startswith("tests/"):
        raise PatchError(f"{path.name}: Verified-By must be a pytest node id under tests/, e.g. tests/x.py::test_y")
    return Patch(path.name, path, headers, tuple(files), hashlib.sha256(raw).hexdigest())


def read_series(pdir: Path, name: str = "series") -> list[str]:
    series = pdir / name
    try:
        text = series.read_text()
    except OSError as exc:
        raise PatchError(f"{series}: cannot read the series file ({exc}); restore it from git") from exc
    names = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


def _pins(pdir: Path) -> tuple[pins.Pins, str]:
    """The pins a patches dir goes with: the versions.json beside it, else the vfleet home's."""
    beside = pdir.parent / "versions.json"
    path = beside if beside.is_file() else paths.release_dir() / "versions.json"
    return pins.load(path), str(path)


def series_files(pdir: Path | None = None) -> dict[str, str]:
    """base version -> its series file's name in pdir, from versions.json."""
    pdir = pdir or patches_dir()
    pinned, source = _pins(pdir)
    out: dict[str, str] = {}
    for version, b in pinned.bases.items():
        rel = Path(b.series)
        if rel.parent != Path("patches") or not rel.name.startswith("series"):
            raise PatchError(f"{source}: bases.{version}.series is {b.series!r}: a series file is patches/series*")
        out[version] = rel.name
    return out


def base_version(base: str | None = None, pdir: Path | None = None) -> str:
    """BASE checked against versions.json (default: the default base); an unknown one names the file."""
    pinned, source = _pins(pdir or patches_dir())
    return pinned.base(base, source=source).version


def load_series(pdir: Path | None = None, base: str | None = None) -> list[Patch]:
    """Every patch of BASE's series (default: the default base) in series order. Raises PatchError on
    the first problem of any base's series (run `check` for all)."""
    pdir = pdir or patches_dir()
    version = base_version(base, pdir)
    problems = check_series(pdir)
    if problems:
        raise PatchError(f"{pdir}: the patch series is broken: " + "; ".join(problems))
    return [load_patch(pdir / name) for name in read_series(pdir, series_files(pdir)[version])]


def select(patches: list[Patch], platform: str) -> list[Patch]:
    if platform not in PLATFORMS:
        raise PatchError(f"unknown platform {platform!r}: use one of {', '.join(PLATFORMS)}")
    return [p for p in patches if platform in p.platforms]


def series_sha256(patches: list[Patch]) -> str:
    """sha256 over `name sha256` lines of the selected patches, in order: changes with any patch, or the order."""
    text = "".join(f"{p.name} {p.sha256}\n" for p in patches)
    return hashlib.sha256(text.encode()).hexdigest()


def load_upstream(pdir: Path | None = None) -> list[dict[str, Any]]:
    pdir = pdir or patches_dir()
    path = pdir / "upstream.yaml"
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise PatchError(f"{path}: cannot read ({exc})") from exc
    entries = data.get("upstream", [])
    if not isinstance(entries, list):
        raise PatchError(f"{path}: 'upstream' must be a list of entries")
    for e in entries:
        for key in ("name", "subject", "origin", "applied_upstream", "verified_by"):
            if not isinstance(e, dict) or not e.get(key):
                raise PatchError(f"{path}: every entry needs {key!r}: {e!r}")
    return entries


def check_series(pdir: Path | None = None) -> list[str]:
    """The series checker, over every base's series: every problem found, as one line each (empty
    list: the series are good)."""
    pdir = pdir or patches_dir()
    problems: list[str] = []
    try:
        files = series_files(pdir)
    except VfleetError as exc:
        return [str(exc)]
    loaded: dict[str, Patch | None] = {}
    listed_by: dict[str, set[str]] = {}
    for version, series_name in files.items():
        where = f"{series_name} (the series of vLLM {version}, versions.json bases.{version}.series)"
        try:
            names = read_series(pdir, series_name)
        except PatchError as exc:
            problems.append(str(exc))
            continue
        seen: set[str] = set()
        fixes: dict[str, str] = {}
        for name in names:
            if name in seen:
                problems.append(f"{where}: lists {name} more than once")
                continue
            seen.add(name)
            if "/" in name or not (pdir / name).is_file():
                problems.append(f"{where}: lists {name}, which is not a file in {pdir}")
                continue
            if name not in loaded:
                try:
                    loaded[name] = load_patch(pdir / name)
                except PatchError as exc:
                    loaded[name] = None
                    problems.append(str(exc))
            patch = loaded[name]
            listed_by.setdefault(name, set()).add(version)
            if patch is None:
                continue
            if version not in patch.bases:
                problems.append(
                    f"{where}: lists {name}, which is not written for vLLM {version} "
                    f"(its Bases: {patch.headers['Bases']}); list the patch written for {version} instead"
                )
            if patch.fix in fixes:
                problems.append(f"{where}: lists two patches of fix {patch.fix}: {fixes[patch.fix]} and {name}")
            fixes.setdefault(patch.fix, name)
    for name, patch in loaded.items():
        if patch is None:
            continue
        for b in patch.bases:
            if b not in files:
                problems.append(f"{name}: Bases names vLLM {b}, which is not a base in versions.json")
            elif b not in listed_by.get(name, set()):
                problems.append(
                    f"{name}: Bases names vLLM {b}, but {files[b]} does not list it (list it there, or drop {b} "
                    "from its Bases)"
                )
    non_patch = set(NON_PATCH_FILES) | set(files.values())
    for f in sorted(pdir.iterdir()):
        if f.name in non_patch or f.name in loaded:
            continue
        problems.append(f"{f.name} is in {pdir} but not listed in any series (add it to a base's series or remove it)")
    try:
        upstream = load_upstream(pdir)
    except PatchError as exc:
        problems.append(str(exc))
        upstream = []
    for e in upstream:
        for b in e.get("bases") or []:
            b = str(b)
            if b not in files:
                problems.append(
                    f"upstream.yaml: {e['name']}: bases names vLLM {b}, which is not a base in versions.json"
                )
                continue
            fix = str(e["name"]).split("-", 1)[0]
            carried = [n for n in listed_by if version_lists(listed_by, n, b) and n.split("-", 1)[0] == fix]
            if fix.isdigit() and carried:
                problems.append(
                    f"upstream.yaml: {e['name']}: recorded as upstream in vLLM {b}, but {files[b]} carries {carried[0]}"
                )
    return problems


def version_lists(listed_by: dict[str, set[str]], name: str, base: str) -> bool:
    return base in listed_by.get(name, set())
