"""The baseline a promotion is judged against, and the new-warning judgement made against it.

The baseline of an image's promotion for a profile is the image promoted for that profile before it: the
newest registry line of the profile, above the image's own line, naming another digest (`previous`).
`vfleet promote` takes the last such line of the registry and records it in the line it appends;
`vfleet promote --check` works it out again from the lines above the one it checks, refuses a line that
records another one (or records none where there is one), and judges against what it worked out. So
neither a hand-written line nor an edited `baseline` field chooses what an image is compared with.

A baseline is used only as a promoted, signed report (`checked`): its line names a report whose signed
verification summary (vfleet.verify.record.attestation) a trusted key made for that digest and profile, under
the serve profiles the line records. A line that names no report, or whose summary does not check, stops
the promotion (and the check) and is named: it is never skipped for an older one, never read as "no
baseline". With no line above, the promotion is the profile's first, and says "no baseline: first
promotion" (NO_BASELINE) in the run's output and in its registry line.

It sits below vfleet.promotion (which weighs the A/B too) in the judge floor (docs/architecture.md).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfleet.errors import VfleetError
from vfleet.paths import profiles_digest
from vfleet.profiles import Profile
from vfleet.supply import statements
from vfleet.supply.statements import VERIFY, Keyring
from vfleet.supply.store import SupplyError
from vfleet.verify.answers import gate as answers_gate
from vfleet.verify.answers.figure import AnswersFigure
from vfleet.verify.answers.verdict import NO_BASELINE
from vfleet.verify.log import templates as logtemplates
from vfleet.verify.record import attestation
from vfleet.verify.record.model import SCHEMA, Report

#: What a promotion with no image promoted before it for its profile says, in its output and its line, is
#: NO_BASELINE, imported from the answers gate's verdict (the lowest module that says it).

#: A baseline's signed summary is checked for who signed it and what it covers, not for its age: the
#: templates of an image promoted long ago are still what that image printed.
BASELINE_MAX_AGE = dt.timedelta(days=36500)


def load_report(path: Path) -> Report:
    """The boot-verify report at ``path``; VfleetError when it is not one this code can vouch for: of an
    older schema (said first: it needs a new run, not a fix), unreadable, or with a key that is unknown,
    missing or of the wrong type (named, with its value)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("schema"), int) and data["schema"] < SCHEMA:
        raise VfleetError(f"report schema {data['schema']} predates fail-closed gating; run vfleet verify again")
    return Report.load(path)


def entries(registry: Path) -> list[dict[str, Any]]:
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


def previous(lines: list[dict[str, Any]], upto: int, profile: str, digest: str) -> dict[str, Any] | None:
    """The newest of ``lines[:upto]`` for ``profile`` whose digest is not ``digest``: the line of the image
    promoted before, the baseline; None for the profile's first image."""
    found = [e for e in lines[:upto] if e.get("profile") == profile and e.get("digest") != digest]
    return found[-1] if found else None


@dataclass(frozen=True)
class Baseline:
    """A promoted image a promotion is judged against: its digest, the report it was promoted on, the
    serve profiles that report was verified under and when it was promoted."""

    digest: str
    report: Path
    profiles_digest: str
    promoted_at: str

    def record(self) -> dict[str, str]:
        """What a registry line records of it (`baseline`)."""
        return {"digest": self.digest, "report": str(self.report), "promoted_at": self.promoted_at}

    def note(self) -> str:
        return f"judged against {self.digest}, promoted {self.promoted_at} (report {self.report})"


def note(base: Baseline | None) -> str:
    """The line a promotion (and its check) prints and records about its baseline."""
    return base.note() if base else NO_BASELINE


def checked(entry: dict[str, Any], profile: str, keys: Keyring) -> Baseline:
    """The baseline of registry line ``entry``, a promoted, signed report; VfleetError naming why not."""
    digest, named = str(entry.get("digest")), entry.get("report")
    where = f"the image promoted before for {profile} ({digest}), the baseline of this promotion"
    if not isinstance(named, str) or not named:
        raise VfleetError(f"{where}: its registry line names no report, so it cannot be checked")
    path = Path(named)
    signed_under = str(entry.get("profiles_digest") or profiles_digest())
    why = attestation.check(path, keys, digest, profile, signed_under, BASELINE_MAX_AGE)
    if why:
        raise VfleetError(f"the report of {where} ({path}) cannot be checked: {'; '.join(why)}")
    return Baseline(digest, path, signed_under, str(entry.get("promoted_at")))


def before(lines: list[dict[str, Any]], upto: int, profile: str, digest: str, keys: Keyring) -> Baseline | None:
    """The checked baseline of a promotion of ``digest`` whose line is ``lines[upto]`` (or would be)."""
    entry = previous(lines, upto, profile, digest)
    return checked(entry, profile, keys) if entry is not None else None


def signed_time(report: Path, keys: Keyring) -> str | None:
    """The signed timeVerified of the summary beside ``report`` (TIME_FORMAT sorts as time), or None when
    no trusted key of the verify role signed it."""
    try:
        stmt, _ = statements.open_statement(
            json.loads((report.parent / attestation.ATTESTATION).read_text()), VERIFY, keys
        )
    except (OSError, ValueError, SupplyError):
        return None
    stamp = (stmt.get("predicate") or {}).get("timeVerified")
    return stamp if isinstance(stamp, str) else None


def first_claim_problems(
    lines: list[dict[str, Any]], at: int, profile: str, digest: str, report: Path, keys: Keyring
) -> list[str]:
    """A line with no image of its profile above it is the profile's first promotion, judged against
    nothing. That holds only while no other image promoted for the profile anywhere in the registry was
    verified (signed time) no later than this one: a first promotion comes before every other, so a line
    moved to the top of the registry, above the image it was refused against, is refused."""
    mine = signed_time(report, keys)
    for i, e in enumerate(lines):
        if i == at or e.get("profile") != profile or e.get("digest") == digest:
            continue
        try:
            other = checked(e, profile, keys)
        except VfleetError:
            continue  # a line that proves no promotion proves nothing against this one either
        when = signed_time(other.report, keys)
        if mine is None or (when is not None and when <= mine):
            return [
                f"its line is the first of {profile} in the registry ({NO_BASELINE}), but {other.digest}, promoted for "
                f"it too (line {i + 1}), was verified at {when}, before this image's report ({mine}): the registry "
                "was reordered or edited; promote the image again"
            ]
    return []


def resolve(
    lines: list[dict[str, Any]], at: int, profile: str, digest: str, report: Path, keys: Keyring
) -> Baseline | None:
    """The baseline of the promotion of ``digest`` on ``report`` whose line is ``lines[at]`` (or would be:
    ``at`` == len(lines)): the image promoted before it, checked (before), or None for a first promotion that
    holds (first_claim_problems); VfleetError naming why otherwise."""
    base = before(lines, at, profile, digest, keys)
    if base is None:
        why = first_claim_problems(lines, at, profile, digest, report, keys)
        if why:
            raise VfleetError("; ".join(why))
    return base


def recorded_problems(entry: dict[str, Any], base: Baseline | None) -> list[str]:
    """Why the baseline registry line ``entry`` records is not ``base``, the one worked out from the lines
    above it (empty: it is, or the line records none, an older line: it is judged against ``base``)."""
    if "baseline" not in entry:
        return []
    rec = entry["baseline"]
    said = rec.get("digest") if isinstance(rec, dict) else None
    was = f"{base.digest} (report {base.report})" if base else "no image (its first promotion)"
    if base is None and rec is None:
        return []
    if base is not None and isinstance(rec, dict) and said == base.digest and rec.get("report") == str(base.report):
        return []
    says = f"baseline {said} (report {rec.get('report')})" if isinstance(rec, dict) else f"{NO_BASELINE!r}"
    return [
        f"the line says {says}, but the image promoted before it for its profile is {was}: the registry was "
        "edited; promote the image again"
    ]


def templates(base: Baseline | None) -> logtemplates.Baseline | None:
    """The warning templates of a checked baseline's report; None when there is no baseline, or its
    report predates warning templates."""
    if base is None:
        return None
    rep = load_report(base.report)
    if rep.figures.log_warnings is None:
        return None
    return logtemplates.Baseline(str(base.report), [t.template for t in rep.figures.log_warnings])


def last_promoted(profile: str, registry: Path, digest: str | None) -> tuple[str, Path, Report] | None:
    """For `vfleet verify`'s views: (digest, path, report) of the report the image promoted last for ``profile``
    (other than ``digest``) was promoted on, read as it is (its signature is not checked here: the promotion
    gate checks it); None when there is none or it cannot be read."""
    lines = entries(registry)
    entry = previous(lines, len(lines), profile, digest or "")
    if entry is None or not isinstance(entry.get("report"), str):
        return None
    path = Path(entry["report"])
    try:
        return str(entry.get("digest")), path, load_report(path)
    except VfleetError:
        return None


def listing(profile: str, registry: Path, digest: str | None) -> logtemplates.Baseline | None:
    """For `vfleet verify`'s listing of new warnings: the templates of the last promoted report, or None."""
    found = last_promoted(profile, registry, digest)
    if found is None or found[2].figures.log_warnings is None:
        return None
    name = f"{found[1]} (signature not checked here; the promotion gate checks it)"
    return logtemplates.Baseline(name, [t.template for t in found[2].figures.log_warnings])


def warning_problems(prof: Profile, rep: Report, base: Baseline | None) -> tuple[list[str], str]:
    """Why the new warnings of ``rep`` stop its promotion against ``base`` (empty: they do not), and the
    note for the registry entry."""
    spec = prof.verify.warnings
    if rep.figures.log_warnings is None:
        if logtemplates.fails(spec, prof.production):
            return [
                "the report holds no warning templates (no server log was read, or it was made before they were "
                "recorded); verify again with --container NAME"
            ], ""
        return [], "no warning templates in the report"
    cmp = logtemplates.judge([t.template for t in rep.figures.log_warnings], templates(base), spec)
    if cmp.new and logtemplates.fails(spec, prof.production):
        more = f" (+{len(cmp.new) - 10} more)" if len(cmp.new) > 10 else ""
        listed = "; ".join(repr(t) for t in cmp.new[:10]) + more
        return [
            f"{cmp.note}: {listed}. Find the cause in the server log (the report lists each template's first "
            "line), or, if it is harmless, excuse it in the profile's verify.warnings.allow with a template "
            'pattern, the reason and its source (docs/boot-verify.md, "New warnings")'
        ], cmp.note
    return [], cmp.note


def answers_judgement(prof: Profile, rep: Report, base: Baseline | None) -> answers_gate.Judgement:
    """The answers gate (docs/answers.md) of ``rep`` against the run of ``base``'s signed report (None: the
    profile's first promotion). A baseline report that cannot be read stops the promotion, named."""
    spec = prof.verify.answers
    if spec is None:
        return answers_gate.judgement(None, None, None, "")
    if base is None:
        return answers_gate.judgement(spec, rep.figures.answers, None, "")
    try:
        base_fig = load_report(base.report).figures.answers
    except VfleetError as exc:
        return answers_gate.Judgement([f"answers: the baseline's report {base.report}: {exc}"], "")
    return answers_gate.judgement(spec, rep.figures.answers, base_fig, f"{base.digest} (report {base.report})")


def answers_listing(profile: str, registry: Path, digest: str | None) -> tuple[str, AnswersFigure] | None:
    """For `vfleet verify`'s view: the answers run of the last promoted report, or None."""
    found = last_promoted(profile, registry, digest)
    fig = found[2].figures.answers if found is not None else None
    if found is None or fig is None:
        return None
    return f"{found[0]} (report {found[1]}; signature not checked here: the promotion gate checks it)", fig


def warning_baseline(
    profile: str, registry: Path, digest: str | None, keys: Keyring | None
) -> logtemplates.Baseline | None:
    """The warning templates of the baseline a promotion of ``digest`` would be judged against now. With
    ``keys`` (the gate) it is the checked baseline (VfleetError naming why it does not check); without
    (`vfleet verify`'s listing) it is read as it is, and its name says so."""
    if keys is None:
        return listing(profile, registry, digest)
    lines = entries(registry)
    return templates(before(lines, len(lines), profile, digest or "", keys))
