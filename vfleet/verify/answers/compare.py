"""What boot-verify shows of its answers run against the last promoted run of the profile, for people
(`figures.answers_compared`, report.md and report.html): the items whose correctness changed, the per-position
log-probability differences against the allowance, and the verdict promotion would give now.

It is a view, read from the registry as it is (the baseline's signature is not checked here); the gate is
promotion's, which reads both runs back from their signed reports (vfleet.verify.answers.gate)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from vfleet.errors import VfleetError
from vfleet.profile_answers import AnswersSpec
from vfleet.verify.answers.figure import AnswersFigure
from vfleet.verify.answers.gate import judgement
from vfleet.verify.answers.questions import load_set


class ChangedItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    question: str
    baseline: str
    candidate: str
    baseline_correct: bool
    candidate_correct: bool


class AnswersCompared(BaseModel):
    """figures.answers_compared of report.json."""

    model_config = ConfigDict(extra="forbid")

    baseline: str
    #: the lines promotion's judgement gives now (or why the runs cannot be paired)
    verdict: list[str]
    ok: bool
    changed: list[ChangedItem]
    #: |candidate - baseline| log-probability per position of the reference text (position 0 has none)
    diffs: list[float]
    allowance_mean_abs: float | None
    allowance_p99: float | None


def compare(spec: AnswersSpec, cand: AnswersFigure, base: AnswersFigure, base_name: str) -> AnswersCompared:
    j = judgement(spec, cand, base, base_name)
    lines = j.problems or j.note.split("; ")
    allowance = spec.drift
    try:
        changed = _changed(spec, cand, base)
        diffs = _diffs(cand, base)
    except VfleetError as exc:
        changed, diffs = [], []
        lines = [*lines, f"not compared item by item: {exc}"]
    return AnswersCompared(
        baseline=base_name,
        verdict=lines,
        ok=not j.problems,
        changed=changed,
        diffs=diffs,
        allowance_mean_abs=allowance.mean_abs if allowance else None,
        allowance_p99=allowance.p99 if allowance else None,
    )


def _changed(spec: AnswersSpec, cand: AnswersFigure, base: AnswersFigure) -> list[ChangedItem]:
    questions = {i.id: i.question for i in load_set(spec.questions).items}
    before = {a.id: a for a in base.answer_record("the baseline's").items}
    out = []
    for a in cand.answer_record("this run's").items:
        b = before.get(a.id)
        if b is not None and (b.correct != a.correct or b.response.strip() != a.response.strip()):
            out.append(
                ChangedItem(
                    id=a.id,
                    question=questions.get(a.id, "?"),
                    baseline=b.response.strip()[:120],
                    candidate=a.response.strip()[:120],
                    baseline_correct=b.correct,
                    candidate_correct=a.correct,
                )
            )
    return out


def _diffs(cand: AnswersFigure, base: AnswersFigure) -> list[float]:
    c, b = cand.logprob_record("this run's"), base.logprob_record("the baseline's")
    if c.token_ids != b.token_ids:
        raise VfleetError("the two log-probability records are of other tokens")
    return [
        round(abs(x - y), 6)
        for x, y in zip(c.logprobs[1:], b.logprobs[1:], strict=True)
        if x is not None and y is not None
    ]
