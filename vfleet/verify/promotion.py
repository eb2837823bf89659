"""Promotion: an image's registry digest is promoted for a profile only on a passing, complete
boot-verify report for that digest and profile. Promotions are appended to a JSON-lines registry.

Digests are registry manifest digests (`REPO@sha256:D`, what a rollout pulls), never local image IDs:
`vfleet promote REF` resolves REF the same way `vfleet verify` records a report's digest
(vfleet.verify.image). A production profile needs a report whose digest was read from the verified
container (`vfleet verify --container`); a non-production one may use a digest from a reference.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vfleet.errors import VfleetError
from vfleet.paths import reports_dir
from vfleet.profiles import Catalog
from vfleet.verify.image import SOURCE_CONTAINER, registry_digest
from vfleet.verify.model import SCHEMA, Report


def default_registry() -> Path:
    """VFLEET_PROMOTIONS, else promotions.jsonl in the reports root (absolute, whatever the cwd)."""
    env = os.environ.get("VFLEET_PROMOTIONS")
    return Path(env).expanduser().resolve() if env else reports_dir() / "promotions.jsonl"


def resolve_digest(image: str) -> str:
    return registry_digest(image)


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load_report(path: Path) -> Report:
    """The boot-verify report at ``path``; VfleetError when it is not one this code can vouch for: of an
    older schema (said first: it needs a new run, not a fix), unreadable, or with a key that is unknown,
    missing or of the wrong type (named, with its value)."""
    data = _load(path)
    if data is not None and isinstance(data.get("schema"), int) and data["schema"] < SCHEMA:
        raise VfleetError(f"report schema {data['schema']} predates fail-closed gating; run vfleet verify again")
    return Report.load(path)


def report_problems(rep: Report, digest: str, profile: str, production: bool) -> list[str]:
    """Why a report cannot promote ``digest`` for ``profile`` (empty when it can)."""
    img = rep.image
    why: list[str] = []
    if img.digest != digest:
        why.append(f"digest {img.digest}")
    if rep.profile != profile:
        why.append(f"profile {rep.profile}")
    if not rep.passed:
        why.append("did not pass")
    if rep.unexcused_skips:
        why.append(
            "not verified (skipped, not declared not applicable): " + ", ".join(u.id for u in rep.unexcused_skips)
        )
    if rep.partial:
        why.append("partial run (-k)")
    if production and img.digest == digest and img.source != SOURCE_CONTAINER:
        why.append(
            f"digest taken from {img.source or 'nowhere'}, not read from the verified container; a production "
            "profile needs `vfleet verify --container NAME [--docker-host URL]`"
        )
    return why


def _newest(
    given: Path | None, name: str, check: Callable[[Path], list[str]], sep: str
) -> tuple[Path | None, list[str], str]:
    """The first of the candidates (``given``: a directory holding ``name``, or a file; else every ``name``
    under the reports root, newest first) for which ``check`` finds no problem, the problems of the ones
    before it (`PATH: why`), and where it looked."""
    root = reports_dir()
    if given is not None:
        candidates = [given / name] if given.is_dir() else [given]
    else:
        candidates = sorted(root.glob(f"**/{name}"), key=lambda p: p.stat().st_mtime, reverse=True)
    seen: list[str] = []
    for path in candidates:
        why = check(path)
        if not why:
            return path, seen, ""
        seen.append(f"{path}: " + sep.join(why))
    return None, seen, str(given) if given else f"{root}/**/{name}"


def find_report(digest: str, profile: str, report_dir: Path | None, production: bool = True) -> tuple[Path, Report]:
    """The newest passing, complete report for digest+profile; VfleetError naming what is wrong otherwise.
    A report that does not load (unknown key, wrong type, older schema) is never a pass."""
    loaded: dict[Path, Report] = {}

    def check(path: Path) -> list[str]:
        try:
            loaded[path] = load_report(path)
        except VfleetError as exc:
            return [str(exc).removeprefix(f"{path}: ")]
        return report_problems(loaded[path], digest, profile, production)

    path, seen, where = _newest(report_dir, "report.json", check, ", ")
    if path is not None:
        return path, loaded[path]
    detail = ("; ".join(seen[:5])) if seen else "no reports found"
    raise VfleetError(
        f"no passing boot-verify report for {digest} on {profile} in {where} ({detail}); "
        f"run `vfleet verify --profile {profile} --container NAME --image IMAGE ...` first"
    )


AB_REPORT = "ab.json"


def last_promoted(profile: str, registry: Path, other_than: str) -> dict[str, Any] | None:
    """The newest registry entry for ``profile`` whose digest is not ``other_than`` (the baseline an
    A/B gate compares against), or None for the profile's first image."""
    found = [e for e in _entries(registry) if e.get("profile") == profile and e.get("digest") != other_than]
    return found[-1] if found else None


def _entries(registry: Path) -> list[dict[str, Any]]:
    """The registry's entries, oldest first (unreadable lines skipped); [] when there is no file."""
    if not registry.is_file():
        return []
    out = []
    for line in registry.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict):
            out.append(e)
    return out


def ab_problems(rep: dict[str, Any], baseline: str, digest: str, profile: str) -> list[str]:
    """Why an A/B report (vfleet.ab.report) cannot show that ``digest`` is not worse than ``baseline``."""
    if rep.get("kind") != "vfleet-ab":
        return ["not an A/B report"]
    arms = rep.get("arms") or {}
    a_img, b_img = ((arms.get(n) or {}).get("image") or {} for n in ("A", "B"))
    why: list[str] = []
    if a_img.get("digest") != baseline:
        why.append(f"arm A runs {a_img.get('digest')}, not the promoted {baseline}")
    if b_img.get("digest") != digest:
        why.append(f"arm B runs {b_img.get('digest')}, not {digest}")
    if rep.get("profile") != profile:
        why.append(f"profile {rep.get('profile')}")
    if rep.get("mode") != "A/B":
        why.append(f"mode {rep.get('mode')}")
    if rep.get("status") != "complete" or not rep.get("comparisons"):
        why.append(f"the run did not complete ({rep.get('broken') or rep.get('status')})")
    worse = sorted(k for k, v in (rep.get("verdicts") or {}).items() if v == "worse")
    if worse:
        why.append("worse: " + ", ".join(worse))
    return why


def find_ab_report(baseline: str, digest: str, profile: str, ab_report: Path | None) -> Path:
    """The newest complete A/B report of ``digest`` (arm B) against ``baseline`` (arm A) on ``profile``
    with no metric worse; VfleetError naming what is wrong otherwise."""

    def check(path: Path) -> list[str]:
        rep = _load(path)
        return ["not a readable A/B report"] if rep is None else ab_problems(rep, baseline, digest, profile)

    path, seen, where = _newest(ab_report, AB_REPORT, check, "; ")
    if path is not None:
        return path
    raise VfleetError(
        f"profile {profile} sets verify.ab_not_worse: promoting {digest} needs a complete A/B report against the "
        f"promoted {baseline} with no metric worse, in {where} ({'; '.join(seen[:5]) or 'no A/B reports found'}); "
        f"run `vfleet ab --a URL_OF_PROMOTED --image-a REPO@{baseline} --b URL_OF_NEW --image-b REPO@{digest} "
        f"--profile {profile}` first"
    )


def promote(
    image: str,
    profile: str,
    report_dir: Path | None,
    registry: Path | None = None,
    ab_report: Path | None = None,
) -> dict[str, Any]:
    registry = registry or default_registry()
    prof = Catalog().load(profile)
    production = prof.production
    digest = resolve_digest(image)
    path, rep = find_report(digest, profile, report_dir, production)
    ab_path: Path | None = None
    baseline: str | None = None
    if prof.verify.ab_not_worse:
        previous = last_promoted(profile, registry, other_than=digest)
        if previous is not None:
            baseline = str(previous["digest"])
            ab_path = find_ab_report(baseline, digest, profile, ab_report)
    img = rep.image
    entry = {
        "promoted_at": dt.datetime.now(dt.UTC).isoformat(),
        "image": image,
        "digest": digest,
        "image_id": img.id,
        "digest_source": img.source,
        "profile": profile,
        "report": str(path.resolve()),
        "vllm_version": rep.vllm_version,
        "by": getpass.getuser(),
    }
    if prof.verify.ab_not_worse:
        entry["ab_report"] = str(ab_path.resolve()) if ab_path else None
        entry["ab_baseline"] = baseline  # None: the profile's first image, nothing to compare against
    registry.parent.mkdir(parents=True, exist_ok=True)
    with registry.open("a") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")
    return entry


def is_promoted(image: str, profile: str, registry: Path | None = None) -> dict[str, Any] | None:
    registry = registry or default_registry()
    digest = resolve_digest(image)
    found = [e for e in _entries(registry) if e.get("digest") == digest and e.get("profile") == profile]
    return found[-1] if found else None
