"""The promotion judgement of the answers gate (docs/answers.md, "The judgement"): the candidate's run
against the last promoted run of the profile, paired on the same items and the same reference tokens.

Accuracy passes only when the one-sided upper bound (Newcombe, at the spec's confidence) of the accuracy
drop is at most the spec's margin: an inconclusive comparison is no pass. Drift passes only within an
allowance measured by an A/A; without one it is NOT MEASURED, which is no pass either. Records that cannot be
paired (another set, other tokens, an edited correctness) are refused with an error, never judged."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from vfleet.profile_answers import AnswersSpec, DriftAllowance
from vfleet.verify.answers.drift import Drift, drift, exceeded
from vfleet.verify.answers.questions import QuestionSet
from vfleet.verify.answers.records import AnswerRecord, LogprobRecord, RecordError
from vfleet.verify.answers.scoring import RULE, score
from vfleet.verify.answers.stats import PairedTable, mcnemar_exact_worse, paired_drop_interval, z_one_sided

NO_BASELINE = "no baseline: first promotion"
NOT_MEASURED = "NOT MEASURED"


@dataclass(frozen=True)
class AccuracyJudgement:
    table: PairedTable
    baseline_accuracy: float
    candidate_accuracy: float
    drop: float
    drop_lower: float
    drop_upper: float
    p_worse: float
    margin: float
    confidence: float
    ok: bool
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class DriftJudgement:
    drift: Drift
    allowance: DriftAllowance | None
    #: None: no allowance measured (NOT MEASURED), which the verdict counts as no pass.
    ok: bool | None
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Verdict:
    ok: bool
    first_promotion: bool
    reasons: tuple[str, ...]
    accuracy: AccuracyJudgement | None = None
    drift: DriftJudgement | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def rescored(record: AnswerRecord, qset: QuestionSet, role: str) -> dict[str, bool]:
    """Each item's correctness under today's rule, refusing a record of another set or one whose stored
    correctness the rule does not give (edited, or scored by another rule)."""
    if record.set_sha256 != qset.sha256 or record.scoring != RULE or qset.scoring != RULE:
        raise RecordError(
            f"refused: the {role} ran set {record.set_name} v{record.set_version} (sha256 {record.set_sha256[:12]}, "
            f"{record.scoring}), not {qset.name} v{qset.version} (sha256 {qset.sha256[:12]}, {RULE}); runs are "
            "compared on one set only: verify the baseline image again with this set"
        )
    items = qset.by_id()
    ids = [a.id for a in record.items]
    if sorted(ids) != sorted(items) or len(set(ids)) != len(ids):
        missing = sorted(set(items) - set(ids))[:5]
        extra = sorted(set(ids) - set(items))[:5]
        raise RecordError(
            f"refused: the {role} does not answer each item of {qset.name} once (missing {missing}, other {extra})"
        )
    out = {}
    for a in record.items:
        right = not a.error and score(items[a.id], a.response)
        if right != a.correct:
            raise RecordError(
                f"refused: the {role} says item {a.id} is {'right' if a.correct else 'wrong'} but {RULE} scores its "
                f"response {a.response[:80]!r} {'right' if right else 'wrong'}: the record was edited or scored by "
                "another rule"
            )
        out[a.id] = right
    return out


def paired_table(base: dict[str, bool], cand: dict[str, bool]) -> PairedTable:
    pairs = [(base[i], cand[i]) for i in sorted(base)]
    return PairedTable(
        both=sum(1 for b, c in pairs if b and c),
        base_only=sum(1 for b, c in pairs if b and not c),
        cand_only=sum(1 for b, c in pairs if c and not b),
        neither=sum(1 for b, c in pairs if not b and not c),
    )


def judge_accuracy(table: PairedTable, spec: AnswersSpec) -> AccuracyJudgement:
    low, high = paired_drop_interval(table, z_one_sided(spec.confidence))
    p = mcnemar_exact_worse(table.base_only, table.cand_only)
    alpha = 1.0 - spec.confidence
    pct = f"{spec.confidence:.0%}"
    counts = (
        f"{table.base_only} items right only in the baseline, {table.cand_only} only in the candidate, of {table.n}"
    )
    reasons = []
    if high > spec.margin:
        reasons.append(
            f"accuracy: the drop could be up to {high:.1%} ({pct} one-sided bound, drop {table.drop:+.1%}; "
            f"{counts}), above the margin {spec.margin:.1%}: not shown within the margin"
        )
    if p < alpha:
        within = "" if high > spec.margin else ", within the margin"
        reasons.append(
            f"accuracy: the candidate is worse (exact McNemar one-sided p = {p:.3g} < {alpha:.3g}{within}; {counts})"
        )
    if not reasons:
        reasons.append(
            f"accuracy: drop {table.drop:+.1%}, at most {high:.1%} ({pct}), within the margin {spec.margin:.1%}"
        )
    return AccuracyJudgement(
        table=table,
        baseline_accuracy=table.base_right / table.n,
        candidate_accuracy=table.cand_right / table.n,
        drop=table.drop,
        drop_lower=low,
        drop_upper=high,
        p_worse=p,
        margin=spec.margin,
        confidence=spec.confidence,
        ok=high <= spec.margin,
        reasons=tuple(reasons),
    )


def judge_drift(base: LogprobRecord, cand: LogprobRecord, allowance: DriftAllowance | None) -> DriftJudgement:
    d = drift(base, cand)
    seen = f"mean_abs {d.mean_abs:.4g}, p99 {d.p99:.4g}, top1_share {d.top1_share:.4g} over {d.positions} positions"
    if allowance is None:
        why = f"drift: {NOT_MEASURED}: no A/A allowance in the profile's verify.answers.drift ({seen})"
        return DriftJudgement(drift=d, allowance=None, ok=None, reasons=(why,))
    over = exceeded(d, allowance)
    reasons = tuple(over) if over else (f"drift: {seen}, within the allowance (measured by {allowance.measured_by})",)
    return DriftJudgement(drift=d, allowance=allowance, ok=not over, reasons=reasons)


def judge(
    spec: AnswersSpec,
    qset: QuestionSet,
    candidate: AnswerRecord,
    candidate_logprobs: LogprobRecord,
    baseline: AnswerRecord | None,
    baseline_logprobs: LogprobRecord | None,
) -> Verdict:
    """The answers verdict of CANDIDATE against BASELINE (None: the profile's first promotion)."""
    cand = rescored(candidate, qset, "candidate")
    unanswered = _unanswered(candidate)
    if baseline is None and baseline_logprobs is None:
        acc, low, high = candidate.accuracy(spec.confidence)
        line = (
            f"accuracy {acc:.1%} [{low:.1%}, {high:.1%}] (Wilson {spec.confidence:.0%}) of {len(cand)} items, "
            "recorded as the baseline"
        )
        return Verdict(ok=not unanswered, first_promotion=True, reasons=(NO_BASELINE, line, *unanswered))
    if baseline is None or baseline_logprobs is None:
        raise RecordError("refused: the baseline has an answers record or a log-probability record but not both")
    if baseline.errors:
        raise RecordError(f"refused: the baseline left {len(baseline.errors)} items unanswered, so it is no baseline")
    base = rescored(baseline, qset, "baseline")
    accuracy = judge_accuracy(paired_table(base, cand), spec)
    drifted = judge_drift(baseline_logprobs, candidate_logprobs, spec.drift)
    ok = accuracy.ok and drifted.ok is True and not unanswered
    return Verdict(
        ok=ok,
        first_promotion=False,
        reasons=(*accuracy.reasons, *drifted.reasons, *unanswered),
        accuracy=accuracy,
        drift=drifted,
    )


def _unanswered(record: AnswerRecord) -> tuple[str, ...]:
    if not record.errors:
        return ()
    first = record.errors[0]
    return (
        f"{len(record.errors)} items got no answer (first {first.id}: {first.error}): an incomplete run is no pass",
    )
