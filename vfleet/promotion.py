"""Promotion: an image's registry digest is promoted for a profile only on a passing, complete
boot-verify report for that digest and profile, whose signed verification summary (vfleet.verify.
attestation) a trusted key made. Promotions are appended to a JSON-lines registry.

Digests are registry manifest digests (`REPO@sha256:D`, what a rollout pulls), never local image IDs:
`vfleet promote REF` resolves REF the same way `vfleet verify` records a report's digest
(vfleet.verify.record.image). A production profile needs a report whose digest was read from the verified
container (`vfleet verify --container`); a non-production one may use a digest from a reference.

Nothing a report says about itself is taken as given (a report.json is a file anyone can edit): `passed`
is recomputed from its checks under the profile's not-applicable declarations, and the summary beside
it must be signed by a trusted key, name this digest, this profile and this checkout's serve-profiles
digest, carry report.json's sha256, and be younger than the profile's verify.report_max_age_days.
Against the image promoted before it for the profile (the baseline, vfleet.baseline), its new warning
templates are judged and, where the profile sets verify.ab_not_worse, a signed promotion A/B must show
it not worse (vfleet.ab.gate). `judge` is that judgement, the one code path of both entry points. The
registry is no proof either: `promote --check` runs `judge` again on the report a line names, against
the baseline worked out from the lines above it, with the A/B report the line names.

It weighs both boot-verify (vfleet.verify) and the A/B (vfleet.ab), so it sits above both, at the top of the
judge floor (docs/architecture.md).
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vfleet import baseline as baseline_mod
from vfleet import settings
from vfleet.ab import gate as ab_gate
from vfleet.baseline import load_report as load_report
from vfleet.errors import VfleetError
from vfleet.paths import profiles_digest, reports_dir
from vfleet.profiles import Catalog, Profile
from vfleet.supply.statements import VERIFY, Keyring
from vfleet.verify.record import attestation, releases
from vfleet.verify.record.image import SOURCE_CONTAINER, registry_digest
from vfleet.verify.record.model import Report, verdict_problems


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


@dataclass(frozen=True)
class Gate:
    """What a report must show to promote ``digest`` for ``profile``, and to keep it promoted: the
    profile's production flag and not-applicable declarations, the keys trusted to sign boot-verify,
    this checkout's serve-profiles digest and the oldest signed time accepted."""

    digest: str
    profile: str
    production: bool
    not_applicable: dict[str, str]
    keys: Keyring
    profiles_digest: str
    max_age: dt.timedelta
    now: dt.datetime
    #: the profile's verify.weights_accept (empty: any weights, named)
    weights_accept: list[str] = field(default_factory=list)


def gate(digest: str, profile: str, keys: Keyring, now: dt.datetime | None = None) -> Gate:
    """The gate for ``digest`` on ``profile`` (loaded from this checkout). No trusted key is a VfleetError
    naming how to give one: nothing could be checked, so nothing is promoted."""
    if not keys.of(VERIFY):
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
        weights_accept=list(prof.verify.weights_accept),
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
    why += weights_problems(rep, g.weights_accept)
    if g.production and img.digest == g.digest and img.source != SOURCE_CONTAINER:
        why.append(
            f"digest taken from {img.source or 'nowhere'}, not read from the verified container; a production "
            "profile needs `vfleet verify --container NAME [--docker-host URL]`"
        )
    return why


def weights_problems(rep: Report, accepted: list[str]) -> list[str]:
    """A promotion binds the image to the weights it was verified with: a report that names none (figures.weights,
    the model manifest of boot-verify's test_weights) cannot promote, nor one whose weights the profile does not
    accept (verify.weights_accept, today's profile)."""
    digest = (rep.figures.weights or {}).get("digest")
    if not digest:
        return ["names no model manifest of the weights it served (figures.weights): verify it again with this vfleet"]
    if accepted and digest not in accepted:
        return [
            f"served weights {digest}, which the profile does not accept (verify.weights_accept: {', '.join(accepted)})"
        ]
    return []


def check_report(path: Path, g: Gate) -> tuple[Report | None, list[str]]:
    """The report at ``path`` and why it cannot promote ``g.digest`` (empty: it can): its content
    (report_problems) and its signed verification summary (vfleet.verify.record.attestation.check). A report
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


def find_ab_report(baseline: str, digest: str, profile: str, ab_report: Path | None, keys: Keyring) -> Path:
    """The newest promotion A/B report of ``digest`` (arm B) against ``baseline`` (arm A) on ``profile``
    that passes ab_report_problems; VfleetError naming what is wrong otherwise."""

    def check(path: Path) -> list[str]:
        return ab_gate.report_problems(path, baseline, digest, profile, keys)

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


@dataclass(frozen=True)
class Judgement:
    """What the promotion gate found for one boot-verify report: why it cannot promote (empty: it can),
    the baseline it was judged against, the new-warning note and the A/B report that showed it not worse
    (None: the profile asks for none, or there is no baseline)."""

    problems: list[str]
    report: Report | None
    baseline: baseline_mod.Baseline | None
    warnings_note: str
    ab_report: Path | None
    #: the answers gate's lines (docs/answers.md); '' where the profile sets no verify.answers
    answers_note: str = ""


#: Gives the A/B report that shows the image not worse than a baseline digest; VfleetError when none does.
AbSource = Callable[[str], Path]


def judge(g: Gate, prof: Profile, report: Path, base: baseline_mod.Baseline | None, ab: AbSource) -> Judgement:
    """Every judgement of a promotion, the one code path of `vfleet promote` and `promote --check`: the
    report and its signed summary (check_report), its new warnings against ``base`` (the baseline's signed
    report), its answers run against the baseline's (vfleet.verify.answers.gate), and, where the profile
    sets verify.ab_not_worse and there is a baseline, the signed A/B that ``ab`` gives (a search for
    `vfleet promote`, the line's report for the check). The A/B is looked for
    only once the rest passes, so a refusal names the boot-verify's problems first."""
    rep, why = check_report(report, g)
    note = answers_note = ""
    if rep is not None:
        try:
            warned, note = baseline_mod.warning_problems(prof, rep, base)
        except VfleetError as exc:
            warned = [f"the baseline's report {base.report if base else ''}: {exc}"]
        why += warned
        answered = baseline_mod.answers_judgement(prof, rep, base)
        why += answered.problems
        answers_note = answered.note
    ab_path: Path | None = None
    if not why and prof.verify.ab_not_worse and base is not None:
        try:
            ab_path = ab(base.digest)
        except VfleetError as exc:
            why.append(str(exc))
    return Judgement(why, rep, base, note, ab_path, answers_note)


def promote(
    image: str,
    profile: str,
    report_dir: Path | None,
    registry: Path | None = None,
    ab_report: Path | None = None,
    *,
    keys: Keyring,
) -> dict[str, Any]:
    """Promote ``image`` for ``profile`` on the newest report that passes the gate (its summary signed by
    one of ``keys``) and the judgement against the image promoted last for the profile (judge);
    VfleetError naming every report looked at and why otherwise. Appends the entry, which records the
    baseline it was judged against (None and NO_BASELINE: the profile's first promotion)."""
    registry = registry or default_registry()
    prof = Catalog().load(profile)
    digest = resolve_digest(image)
    g = gate(digest, profile, keys)
    path, _ = find_report(g, report_dir)
    lines = baseline_mod.entries(registry)
    base = baseline_mod.resolve(lines, len(lines), profile, digest, path, keys)
    j = judge(g, prof, path, base, lambda b: find_ab_report(b, digest, profile, ab_report, keys))
    if j.problems or j.report is None:
        raise VfleetError(f"{image} ({digest}) is not promoted for {profile}: {'; '.join(j.problems)}")
    entry = _entry(image, g, path, j, prof.verify.ab_not_worse)
    entry["release"] = str(releases.save(registry, digest))
    registry.parent.mkdir(parents=True, exist_ok=True)
    with registry.open("a") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")
    return entry


def _entry(image: str, g: Gate, path: Path, j: Judgement, ab_required: bool) -> dict[str, Any]:
    """The registry line of a promotion judged ``j`` (its release snapshot is added by the caller)."""
    assert j.report is not None
    img = j.report.image
    entry: dict[str, Any] = {
        "promoted_at": dt.datetime.now(dt.UTC).isoformat(),
        "image": image,
        "digest": g.digest,
        "image_id": img.id,
        "digest_source": img.source,
        "profile": g.profile,
        "report": str(path.resolve()),
        "attestation": str(path.resolve().parent / attestation.ATTESTATION),
        "vllm_version": j.report.vllm_version,
        "by": getpass.getuser(),
        # What it was judged against; `promote --check` refuses a line whose baseline is not the image
        # promoted before it (vfleet.baseline).
        "baseline": j.baseline.record() if j.baseline else None,
        "baseline_note": baseline_mod.note(j.baseline),
        "new_warnings": j.warnings_note,
        "answers": j.answers_note,
        # The weights it was verified with (their model manifest digest): a rollout swaps only nodes holding them.
        "weights": (j.report.figures.weights or {}).get("digest"),
        "profiles_digest": g.profiles_digest,
    }
    if ab_required:
        entry["ab_report"] = str(j.ab_report.resolve()) if j.ab_report else None
        entry["ab_baseline"] = j.baseline.digest if j.baseline else None  # None: the first image, no A/B
    return entry


@dataclass(frozen=True)
class Checked:
    """A registry line that passed `promote --check`, and the baseline note of its judgement."""

    entry: dict[str, Any]
    note: str
    #: the weights its report names (figures.weights: root, digest, files, bytes and, from reports of this
    #: vfleet on, every file's path, size and sha256), which a rollout compares each node's with
    weights: dict[str, Any] | None = None


def check_line(lines: list[dict[str, Any]], at: int, g: Gate, prof: Profile) -> Judgement:
    """The judgement of registry line ``lines[at]`` now; its problems: it names no report, its baseline
    does not check or is not the one it records (vfleet.baseline.resolve), or the judgement of `vfleet
    promote` (judge) refuses its report, against that baseline, with the A/B report the line names."""
    entry = lines[at]
    named = entry.get("report")
    if not isinstance(named, str) or not named:
        return Judgement(["names no report"], None, None, "", None)
    try:
        base = baseline_mod.resolve(lines, at, g.profile, g.digest, Path(named), g.keys)
    except VfleetError as exc:
        return Judgement([str(exc)], None, None, "", None)
    j = judge(g, prof, Path(named), base, lambda b: ab_gate.named_report(entry, b, g.digest, g.profile, g.keys))
    return replace(j, problems=baseline_mod.recorded_problems(entry, base) + j.problems)


def checked_entry(
    image: str, profile: str, registry: Path | None = None, *, keys: Keyring, now: dt.datetime | None = None
) -> Checked:
    """The newest registry line for ``image`` on ``profile`` that holds now (check_line): `vfleet promote
    --check`, the rollout's preflight. A line of the registry proves nothing alone: its report is judged
    again as `vfleet promote` judges it (report, signed summary, new warnings, A/B), against the image
    promoted before it, so a hand-written or edited line, a report removed or edited since, another
    checkout's profiles or a pass grown stale are refused. VfleetError naming each line looked at and why."""
    registry = registry or default_registry()
    digest = resolve_digest(image)
    g = gate(digest, profile, keys, now)
    prof = Catalog().load(profile)
    lines = baseline_mod.entries(registry)
    mine = [i for i, e in enumerate(lines) if e.get("digest") == digest and e.get("profile") == profile]
    if not mine:
        raise VfleetError(f"{image} ({digest}) was never promoted for {profile} (registry {registry})")
    seen: list[str] = []
    for at in mine[::-1]:
        j = check_line(lines, at, g, prof)
        if not j.problems:
            weights = j.report.figures.weights if j.report is not None else None
            return Checked(lines[at], baseline_mod.note(j.baseline), weights)
        seen.append(f"{_label(lines[at])}: " + ", ".join(j.problems))
    raise VfleetError(
        f"{image} ({digest}) is in {registry} for {profile}, but no entry passes the gate now: "
        + "; ".join(seen[:5])
        + f"; boot-verify it again with the signing key and `vfleet promote {image} --profile {profile}`"
    )


def _label(entry: dict[str, Any]) -> str:
    named = entry.get("report")
    return named if isinstance(named, str) and named else f"entry of {entry.get('promoted_at')}"


def promoted_entry(
    image: str, profile: str, registry: Path | None = None, *, keys: Keyring, now: dt.datetime | None = None
) -> dict[str, Any]:
    """The registry line checked_entry finds."""
    return checked_entry(image, profile, registry, keys=keys, now=now).entry
