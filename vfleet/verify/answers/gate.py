"""The answers gate of a promotion (docs/answers.md, "The judgement"): the candidate report's answers run
against the one of the report its baseline was promoted on, both read back from the signed reports and scored
again (vfleet.verify.answers.verdict). Promotion and `promote --check` call `judgement`, one code path.

What cannot be judged is no pass: a candidate report without an answers run where the profile sets
verify.answers, a run of another set or reference text than the profile names, an edited record. A baseline
report without an answers run (promoted before its profile set verify.answers) makes this the answers gate's
first promotion, said as such, as a profile's first promotion is."""

from __future__ import annotations

from dataclasses import dataclass

from vfleet.errors import VfleetError
from vfleet.profile_answers import AnswersSpec
from vfleet.verify.answers.figure import AnswersFigure
from vfleet.verify.answers.questions import load_reference, load_set
from vfleet.verify.answers.verdict import NO_BASELINE, Verdict, judge

#: What a promotion says when its baseline's report predates the answers gate of its profile.
NO_ANSWERS_BASELINE = "no answers baseline: the baseline's report holds no answers run, so this run becomes it"


@dataclass(frozen=True)
class Judgement:
    problems: list[str]
    #: the verdict's lines, recorded in the registry line (`answers`); '' where the profile sets no gate
    note: str
    verdict: Verdict | None = None


def judgement(
    spec: AnswersSpec | None, candidate: AnswersFigure | None, baseline: AnswersFigure | None, baseline_name: str
) -> Judgement:
    """The answers judgement of a CANDIDATE report's run for a profile whose gate is SPEC, against BASELINE
    (the run of the baseline's report BASELINE_NAME; None with an empty name: the profile's first promotion)."""
    if spec is None:
        return Judgement([], "")
    if candidate is None:
        return Judgement(
            [
                "answers: the report holds no answers run while the profile sets verify.answers (a report made "
                "before the answers gate, or of another profile): run vfleet verify on the image again"
            ],
            "",
        )
    try:
        verdict = _verdict(spec, candidate, baseline)
    except VfleetError as exc:
        return Judgement([f"answers: {exc}"], "")
    lines = list(verdict.reasons)
    if baseline is None and baseline_name:
        lines = [NO_ANSWERS_BASELINE + f" ({baseline_name})", *lines[1:]]
    note = "; ".join(lines)
    if verdict.ok:
        return Judgement([], note, verdict)
    failing = [r for r in lines if r != NO_BASELINE and not r.startswith(NO_ANSWERS_BASELINE)]
    against = f" against {baseline_name}" if baseline_name else ""
    return Judgement([f"answers{against}: " + "; ".join(failing)], note, verdict)


def _verdict(spec: AnswersSpec, candidate: AnswersFigure, baseline: AnswersFigure | None) -> Verdict:
    qset = load_set(spec.questions)
    cand = candidate.answer_record("the candidate's")
    cand_lp = candidate.logprob_record("the candidate's")
    _, ref_sha = load_reference(spec.reference)
    if cand_lp.reference != spec.reference or cand_lp.reference_sha256 != ref_sha:
        raise VfleetError(
            f"the candidate read the reference text {cand_lp.reference} (sha256 {cand_lp.reference_sha256[:12]}), "
            f"not the profile's {spec.reference} (sha256 {ref_sha[:12]}): run vfleet verify on the image again"
        )
    if baseline is None:
        return judge(spec, qset, cand, cand_lp, None, None)
    return judge(
        spec,
        qset,
        cand,
        cand_lp,
        baseline.answer_record("the baseline's"),
        baseline.logprob_record("the baseline's"),
    )
