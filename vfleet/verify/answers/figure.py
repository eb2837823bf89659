"""What boot-verify's answers check writes into the report (``figures.answers``), and how the check makes it:
the profile's question set asked greedily at its concurrency, the accuracy with its Wilson interval, every
item's answer, and the reference text's teacher-forced log-probabilities (docs/answers.md).

The report's sha256 is in the signed verification summary, so the per-item correctness and the log-probabilities
are signed with it; promotion reads them back (vfleet.verify.answers.gate) and never trusts the stored accuracy:
it scores every response again."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict

from vfleet.profile_answers import AnswersSpec
from vfleet.verify.answers.questions import load_set
from vfleet.verify.answers.records import AnswerRecord, LogprobRecord
from vfleet.verify.answers.runner import reference_logprobs, run_set
from vfleet.verify.client import Client


class AnswersFigure(BaseModel):
    """figures.answers of report.json."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    questions: str
    set_sha256: str
    reference: str
    concurrency: int
    max_tokens: int
    confidence: float
    items: int
    right: int
    unanswered: int
    accuracy: float
    wilson_low: float
    wilson_high: float
    #: seconds the set took, and the reference text's request
    set_s: float
    reference_s: float
    #: AnswerRecord.as_dict(): every item's response, finish reason and correctness
    record: dict[str, Any]
    #: LogprobRecord.as_dict(): the reference text's token ids, log-probabilities and top-1 tokens
    logprobs: dict[str, Any]

    def answer_record(self, where: str) -> AnswerRecord:
        return AnswerRecord.from_dict(self.record, f"{where} answers record")

    def logprob_record(self, where: str) -> LogprobRecord:
        return LogprobRecord.from_dict(self.logprobs, f"{where} log-probability record")


def measure(client: Client, spec: AnswersSpec) -> AnswersFigure:
    """Ask SPEC's set of CLIENT's server and read the reference text's log-probabilities."""
    qset = load_set(spec.questions)
    t0 = time.monotonic()
    record = run_set(client, qset, spec.concurrency, spec.max_tokens)
    t1 = time.monotonic()
    lp = reference_logprobs(client, spec.reference)
    t2 = time.monotonic()
    acc, low, high = record.accuracy(spec.confidence)
    return AnswersFigure(
        questions=qset.name,
        set_sha256=qset.sha256,
        reference=spec.reference,
        concurrency=spec.concurrency,
        max_tokens=spec.max_tokens,
        confidence=spec.confidence,
        items=len(record.items),
        right=record.right,
        unanswered=len(record.errors),
        accuracy=acc,
        wilson_low=low,
        wilson_high=high,
        set_s=round(t1 - t0, 3),
        reference_s=round(t2 - t1, 3),
        record=record.as_dict(),
        logprobs=lp.as_dict(),
    )


def problems(fig: AnswersFigure, spec: AnswersSpec) -> list[str]:
    """Why the run alone fails boot-verify (empty: it passes): an item left unanswered, or an accuracy whose
    Wilson upper bound is below the profile's min_accuracy. The comparison with the promoted build is
    promotion's (vfleet.verify.answers.gate)."""
    out = []
    if fig.unanswered:
        first = next(a for a in fig.answer_record("this run's").items if a.error)
        out.append(
            f"{fig.unanswered} of {fig.items} items of {fig.questions} got no answer (first {first.id}: "
            f"{first.error[:200]}): an incomplete run is no pass"
        )
    if spec.min_accuracy is not None and fig.wilson_high < spec.min_accuracy:
        out.append(
            f"accuracy {fig.accuracy:.1%} on {fig.questions} ({fig.right} of {fig.items}; Wilson "
            f"{fig.confidence:.0%} [{fig.wilson_low:.1%}, {fig.wilson_high:.1%}]) is below the profile's "
            f"verify.answers.min_accuracy {spec.min_accuracy:.1%}"
        )
    return out


def summary(fig: AnswersFigure) -> str:
    return (
        f"{fig.questions}: {fig.right} of {fig.items} right, accuracy {fig.accuracy:.1%} "
        f"[{fig.wilson_low:.1%}, {fig.wilson_high:.1%}] (Wilson {fig.confidence:.0%}), concurrency "
        f"{fig.concurrency}, {fig.set_s:.1f} s; reference {fig.reference}: "
        f"{len(fig.logprobs.get('token_ids', []))} tokens, {fig.reference_s:.1f} s"
    )
