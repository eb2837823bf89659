"""Promotion: an image digest is promoted for a profile only on a passing, complete boot-verify
report for that digest and profile. Promotions are appended to a JSON-lines registry."""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
from pathlib import Path
from typing import Any

from vfleet.errors import VfleetError
from vfleet.verify.runner import image_digest

#: The registry: VFLEET_PROMOTIONS, else reports/promotions.jsonl under the current directory.
DEFAULT_REGISTRY = Path(os.environ.get("VFLEET_PROMOTIONS", str(Path("reports") / "promotions.jsonl")))
DEFAULT_REPORTS = Path("reports")


def resolve_digest(image: str) -> str:
    digest, how = image_digest(image)
    if not digest:
        raise VfleetError(f"cannot find the digest of {image}: {how}")
    return digest


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def find_report(digest: str, profile: str, report_dir: Path | None) -> tuple[Path, dict[str, Any]]:
    """The newest passing, complete report for digest+profile; VfleetError naming what is wrong otherwise."""
    if report_dir is not None:
        candidates = [report_dir / "report.json"] if report_dir.is_dir() else [report_dir]
    else:
        candidates = sorted(DEFAULT_REPORTS.glob("**/report.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    seen: list[str] = []
    for path in candidates:
        rep = _load(path)
        if rep is None:
            seen.append(f"{path}: not a readable report")
            continue
        rd = (rep.get("image") or {}).get("digest")
        why = []
        if rd != digest:
            why.append(f"digest {rd}")
        if rep.get("profile") != profile:
            why.append(f"profile {rep.get('profile')}")
        if not rep.get("passed"):
            why.append("did not pass")
        if rep.get("partial"):
            why.append("partial run (-k)")
        if not why:
            return path, rep
        seen.append(f"{path}: " + ", ".join(why))
    where = str(report_dir) if report_dir else f"{DEFAULT_REPORTS}/**/report.json"
    detail = ("; ".join(seen[:5])) if seen else "no reports found"
    raise VfleetError(
        f"no passing boot-verify report for {digest} on {profile} in {where} ({detail}); "
        f"run `vfleet verify --image IMAGE --profile {profile} ...` first"
    )


def promote(image: str, profile: str, report_dir: Path | None, registry: Path) -> dict[str, Any]:
    digest = resolve_digest(image)
    path, rep = find_report(digest, profile, report_dir)
    entry = {
        "promoted_at": dt.datetime.now(dt.UTC).isoformat(),
        "image": image,
        "digest": digest,
        "profile": profile,
        "report": str(path.resolve()),
        "vllm_version": rep.get("vllm_version"),
        "by": getpass.getuser(),
    }
    registry.parent.mkdir(parents=True, exist_ok=True)
    with registry.open("a") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")
    return entry


def is_promoted(image: str, profile: str, registry: Path) -> dict[str, Any] | None:
    digest = resolve_digest(image)
    if not registry.is_file():
        return None
    found = None
    for line in registry.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and e.get("digest") == digest and e.get("profile") == profile:
            found = e
    return found
