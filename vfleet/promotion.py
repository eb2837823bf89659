"""Promotion: an image's registry digest is promoted for a profile only on a passing, complete
boot-verify report for that digest and profile, whose signed verification summary (vfleet.verify.
attestation) a trusted key made. Promotions are appended to a JSON-lines registry.

Digests are registry manifest digests (`REPO@sha256:D`, what a rollout pulls), never local image IDs:
`vfleet promote REF` resolves REF the same way `vfleet verify` records a report's digest
(vfleet.verify.image). A production profile needs a report whose digest was read from the verified
container (`vfleet verify --container`); a non-production one may use a digest from a reference.

Nothing a report says about itself is taken as given (a report.json is a file anyone can edit): `passed`
is recomputed from its checks under the profile's not-applicable declarations, and the summary beside
it must be signed by a trusted key, name this digest, this profile and this checkout's serve-profiles
digest, carry report.json's sha256, and be younger than the profile's verify.report_max_age_days. The
registry is no proof either: `promote --check` runs the same gate again on the report a line names.

It weighs both boot-verify (vfleet.verify) and the A/B (vfleet.ab), so it sits above both, at the top of the
judge floor (docs/architecture.md).
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vfleet import settings
from vfleet.ab import attest as ab_attest
from vfleet.ab import gate as ab_gate
from vfleet.errors import VfleetError
from vfleet.paths import profiles_digest, reports_dir
from vfleet.profiles import Catalog, Profile
from vfleet.verify import attestation, logtemplates, releases
from vfleet.verify.image import SOURCE_CONTAINER, registry_digest
from vfleet.verify.model import SCHEMA, Report, verdict_problems

if TYPE_CHECKING:
    from securesystemslib.signer import Key  # type: ignore[attr-defined]


def default_registry() -> Path:
    """VFLEET_PROMOTIONS, else promotions.jsonl in the reports root (absolute, whatever the cwd)."""
    env = settings.load().promotions
    return env.expanduser().resolve() if env else reports_dir() / "promotions.jsonl"


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


@dataclass(frozen=True)
class Gate:
    """What a report must show to promote ``digest`` for ``profile``, and to keep it promoted: the
    profile's production flag and not-applicable declarations, the keys trusted to sign boot-verify,
    this checkout's serve-profiles digest and the oldest signed time accepted."""

    digest: str
    profile: str
    production: bool
    not_applicable: dict[str, str]
    keys: list[Key]
    profiles_digest: str
    max_age: dt.timedelta
    now: dt.datetime


def gate(digest: str, profile: str, keys: list[Key], now: dt.datetime | None = None) -> Gate:
    """The gate for ``digest`` on ``profile`` (loaded from this checkout). No trusted key is a VfleetError
    naming how to give one: nothing could be checked, so nothing is promoted."""
    if not keys:
        raise VfleetError(f"no trusted key, so no boot-verify result can be checked: {attestation.NO_TRUSTED_KEY}")
    prof = Catalog().load(profile)
    return Gate(
        digest=digest,
        profile=profile,
        production=prof.production,
        not_applicable=dict(prof.verify.not_applicable),
        keys=keys,
        profiles_digest=profiles_digest(),
        max_age=dt.timedelta(days=prof.verify.report_max_age_days),
        now=now or dt.datetime.now(dt.UTC),
    )


def report_problems(rep: Report, g: Gate) -> list[str]:
    """Why a report's content cannot promote ``g.digest`` for ``g.profile`` (empty when it can). The
    verdict is recomputed from the checks, under the profile's not-applicable declarations of today;
    the stored `passed` and `unexcused_skips` are not read, only compared."""
    img = rep.image
    why: list[str] = []
    if img.digest != g.digest:
        why.append(f"digest {img.digest}")
    if rep.profile != g.profile:
        why.append(f"profile {rep.profile}")
    verdict = verdict_problems(rep.checks, rep.pytest_exitstatus, g.not_applicable)
    if verdict:
        why.append("did not pass (recomputed from its checks): " + "; ".join(verdict))
    if rep.passed != (not verdict):
        why.append(f"its stored passed={str(rep.passed).lower()} does not match its checks: edited, or not ours")
    if rep.partial:
        why.append("partial run (-k)")
    if g.production and img.digest == g.digest and img.source != SOURCE_CONTAINER:
        why.append(
            f"digest taken from {img.source or 'nowhere'}, not read from the verified container; a production "
            "profile needs `vfleet verify --container NAME [--docker-host URL]`"
        )
    return why


def check_report(path: Path, g: Gate) -> tuple[Report | None, list[str]]:
    """The report at ``path`` and why it cannot promote ``g.digest`` (empty: it can): its content
    (report_problems) and its signed verification summary (vfleet.verify.attestation.check). A report
    that does not load (missing, unknown key, wrong type, older schema) is never a pass."""
    try:
        rep = load_report(path)
    except VfleetError as exc:
        return None, [str(exc).removeprefix(f"{path}: ")]
    why = report_problems(rep, g)
    why += attestation.check(path, g.keys, g.digest, g.profile, g.profiles_digest, g.max_age, g.now)
    return rep, why


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


def find_report(g: Gate, report_dir: Path | None) -> tuple[Path, Report]:
    """The newest report that passes ``g`` (check_report); VfleetError naming what is wrong otherwise."""
    loaded: dict[Path, Report] = {}

    def check(path: Path) -> list[str]:
        rep, why = check_report(path, g)
        if rep is not None:
            loaded[path] = rep
        return why

    path, seen, where = _newest(report_dir, "report.json", check, ", ")
    if path is not None:
        return path, loaded[path]
    detail = ("; ".join(seen[:5])) if seen else "no reports found"
    raise VfleetError(
        f"no passing boot-verify report for {g.digest} on {g.profile} in {where} ({detail}); "
        f"run `vfleet verify --profile {g.profile} --container NAME --image IMAGE --sign-key PRIV ...` first"
    )


AB_REPORT = "ab.json"


def last_promoted(profile: str, registry: Path, other_than: str) -> dict[str, Any] | None:
    """The newest registry entry for ``profile`` whose digest is not ``other_than`` (the baseline an
    A/B gate compares against), or None for the profile's first image."""
    found = [e for e in _entries(registry) if e.get("profile") == profile and e.get("digest") != other_than]
    return found[-1] if found else None


#: A baseline's signed summary is checked for who signed it and what it covers, not for its age: the
#: templates of an image promoted long ago are still what that image printed.
BASELINE_MAX_AGE = dt.timedelta(days=36500)


def warning_baseline(
    profile: str, registry: Path, digest: str | None, keys: list[Key] | None
) -> logtemplates.Baseline | None:
    """The warning templates of the report the image promoted last for ``profile`` (other than ``digest``)
    was promoted on; None when there is no such image, or its report predates warning templates. With
    ``keys`` (the promotion gate) that report's signed summary must check (VfleetError naming why not);
    without (`vfleet verify`'s listing) it is read as it is, and the name says so."""
    entry = last_promoted(profile, registry, other_than=digest or "")
    if entry is None or not isinstance(entry.get("report"), str):
        return None
    path = Path(entry["report"])
    if keys is not None:
        why = attestation.check(
            path, keys, str(entry.get("digest")), profile, str(entry.get("profiles_digest") or profiles_digest()),
            BASELINE_MAX_AGE,
        )  # fmt: skip
        if why:
            raise VfleetError(
                f"the report of the image promoted last for {profile} ({path}), the baseline of the new-warning "
                f"check, cannot be checked: {'; '.join(why)}"
            )
    try:
        rep = load_report(path)
    except VfleetError:
        if keys is not None:
            raise
        return None  # the listing goes without; the gate (with keys) raised above
    if rep.figures.log_warnings is None:
        return None
    name = str(path) if keys is not None else f"{path} (signature not checked here; the promotion gate checks it)"
    return logtemplates.Baseline(name, [t.template for t in rep.figures.log_warnings])


def warning_problems(prof: Profile, rep: Report, registry: Path, digest: str, keys: list[Key]) -> tuple[list[str], str]:
    """Why the new warnings of ``rep`` stop its promotion (empty: they do not), and the note for the
    registry entry. The baseline is the signed report of the image promoted last for the profile."""
    spec = prof.verify.warnings
    if rep.figures.log_warnings is None:
        if logtemplates.fails(spec, prof.production):
            return [
                "the report holds no warning templates (no server log was read, or it was made before they were "
                "recorded); verify again with --container NAME"
            ], ""
        return [], "no warning templates in the report"
    cmp = logtemplates.judge(
        [t.template for t in rep.figures.log_warnings],
        warning_baseline(prof.name, registry, digest, keys),
        spec,
    )
    if cmp.new and logtemplates.fails(spec, prof.production):
        more = f" (+{len(cmp.new) - 10} more)" if len(cmp.new) > 10 else ""
        listed = "; ".join(repr(t) for t in cmp.new[:10]) + more
        return [
            f"{cmp.note}: {listed}. Find the cause in the server log (the report lists each template's first "
            "line), or, if it is harmless, excuse it in the profile's verify.warnings.allow with a template "
            'pattern, the reason and its source (docs/boot-verify.md, "New warnings")'
        ], cmp.note
    return [], cmp.note


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
    """Why an A/B report (vfleet.ab.report) cannot show that ``digest`` is not worse than ``baseline``.

    Non-inferiority, recomputed (vfleet.ab.gate): a promotion run (`vfleet ab --promotion`) of this
    profile, complete, at or above the floors, whose arms are two different servers running two different
    images read from their containers, A the baseline and B ``digest``, and every metric at every one of
    the profile's levels shown not worse within the margin from the per-round figures. An inconclusive
    comparison is a refusal; the report's own verdicts are not read."""
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
    if rep.get("promotion") is not True:
        why.append("not a promotion run (vfleet ab --promotion)")
    if rep.get("status") != "complete" or rep.get("broken") or not rep.get("comparisons"):
        why.append(f"the run did not complete ({rep.get('broken') or rep.get('status')})")
        return why
    if why:
        return why
    levels = list(Catalog().load(profile).verify.load.levels)
    why += ab_gate.arms_problems(arms)
    why += ab_gate.settings_problems(rep.get("settings") or {}, levels)
    if not why:  # the bootstrap only for a report that could pass otherwise
        why += ab_gate.comparisons_problems(rep, levels)
    return why


def find_ab_report(baseline: str, digest: str, profile: str, ab_report: Path | None, keys: list[Key]) -> Path:
    """The newest promotion A/B report of ``digest`` (arm B) against ``baseline`` (arm A) on ``profile``
    that shows every metric not worse (ab_problems) and whose signed summary a key of ``keys`` made
    (vfleet.ab.attest); VfleetError naming what is wrong otherwise."""

    def check(path: Path) -> list[str]:
        rep = _load(path)
        if rep is None:
            return ["not a readable A/B report"]
        return ab_problems(rep, baseline, digest, profile) + ab_attest.check(path, keys, baseline, digest, profile)

    path, seen, where = _newest(ab_report, AB_REPORT, check, "; ")
    if path is not None:
        return path
    raise VfleetError(
        f"profile {profile} sets verify.ab_not_worse: promoting {digest} needs a promotion A/B report against the "
        f"promoted {baseline} showing every metric not worse within the margin, in {where} "
        f"({'; '.join(seen[:5]) or 'no A/B reports found'}); run `vfleet ab --promotion --profile {profile} "
        f"--a URL_OF_PROMOTED --container-a NAME [--docker-host-a URL] --b URL_OF_NEW --container-b NAME "
        f"[--docker-host-b URL]` first"
    )


def promote(
    image: str,
    profile: str,
    report_dir: Path | None,
    registry: Path | None = None,
    ab_report: Path | None = None,
    *,
    keys: list[Key],
) -> dict[str, Any]:
    """Promote ``image`` for ``profile`` on the newest report that passes the gate (its summary signed by
    one of ``keys``); VfleetError naming every report looked at and why otherwise. Appends the entry."""
    registry = registry or default_registry()
    prof = Catalog().load(profile)
    digest = resolve_digest(image)
    path, rep = find_report(gate(digest, profile, keys), report_dir)
    why, warnings_note = warning_problems(prof, rep, registry, digest, keys)
    if why:
        raise VfleetError(f"{image} ({digest}) is not promoted for {profile}: {'; '.join(why)}")
    ab_path: Path | None = None
    baseline: str | None = None
    if prof.verify.ab_not_worse:
        previous = last_promoted(profile, registry, other_than=digest)
        if previous is not None:
            baseline = str(previous["digest"])
            ab_path = find_ab_report(baseline, digest, profile, ab_report, keys)
    img = rep.image
    entry = {
        "promoted_at": dt.datetime.now(dt.UTC).isoformat(),
        "image": image,
        "digest": digest,
        "image_id": img.id,
        "digest_source": img.source,
        "profile": profile,
        "report": str(path.resolve()),
        "attestation": str(path.resolve().parent / attestation.ATTESTATION),
        "vllm_version": rep.vllm_version,
        "by": getpass.getuser(),
    }
    if prof.verify.ab_not_worse:
        entry["ab_report"] = str(ab_path.resolve()) if ab_path else None
        entry["ab_baseline"] = baseline  # None: the profile's first image, nothing to compare against
    # The release data this image was promoted under, for a rollback to it later (vfleet.verify.releases).
    entry["new_warnings"] = warnings_note
    entry["release"] = str(releases.save(registry, digest))
    entry["profiles_digest"] = profiles_digest()
    registry.parent.mkdir(parents=True, exist_ok=True)
    with registry.open("a") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")
    return entry


def promoted_entry(
    image: str, profile: str, registry: Path | None = None, *, keys: list[Key], now: dt.datetime | None = None
) -> dict[str, Any]:
    """The newest registry entry for ``image`` on ``profile`` whose report passes the gate again, now
    (`vfleet promote --check`, the rollout's preflight). A line of the registry proves nothing alone: the
    report it names is loaded, recomputed and its signed summary checked, so a hand-written line, a
    report removed or edited since, another checkout's profiles or a pass grown stale are refused.
    VfleetError naming each entry looked at and why otherwise."""
    registry = registry or default_registry()
    digest = resolve_digest(image)
    g = gate(digest, profile, keys, now)
    entries: list[dict[str, Any]] = [
        e for e in _entries(registry) if e.get("digest") == digest and e.get("profile") == profile
    ]
    if not entries:
        raise VfleetError(f"{image} ({digest}) was never promoted for {profile} (registry {registry})")
    seen: list[str] = []
    for entry in entries[::-1]:
        named = entry.get("report")
        if not isinstance(named, str) or not named:
            seen.append(f"entry of {entry.get('promoted_at')}: names no report")
            continue
        _, why = check_report(Path(named), g)
        if not why:
            return entry
        seen.append(f"{named}: " + ", ".join(why))
    raise VfleetError(
        f"{image} ({digest}) is in {registry} for {profile}, but no entry's report passes the gate now: "
        + "; ".join(seen[:5])
        + f"; boot-verify it again with the signing key and `vfleet promote {image} --profile {profile}`"
    )
