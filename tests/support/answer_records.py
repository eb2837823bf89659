"""Answers-gate records made up for the unit tests of its judgement: the basic set answered right but for
chosen items, teacher-forced log-probs shifted or flipped, and a report's answers figure of them."""

from __future__ import annotations

from typing import Any

from vfleet.profile_answers import DriftAllowance
from vfleet.verify.answers.figure import AnswersFigure
from vfleet.verify.answers.questions import QuestionSet, load_reference, load_set
from vfleet.verify.answers.records import AnswerRecord, ItemAnswer, LogprobRecord
from vfleet.verify.answers.scoring import RULE

QSET = load_set("basic-v1")
ALLOWANCE = DriftAllowance(mean_abs=0.01, p99=0.05, top1_share=0.01, measured_by="select aa on node1,node2 (test)")
WRONG = "I do not know"


def record(wrong: set[str], qset: QuestionSet = QSET, errors: frozenset[str] = frozenset()) -> AnswerRecord:
    """A run that answers every item right (its canonical answer) but the ids in WRONG."""
    items = []
    for item in qset.items:
        if item.id in errors:
            items.append(ItemAnswer(item.id, "", None, False, error="HTTP 500: boom"))
        elif item.id in wrong:
            items.append(ItemAnswer(item.id, WRONG, "stop", False))
        else:
            items.append(ItemAnswer(item.id, item.answer, "stop", True))
    return AnswerRecord(qset.name, qset.version, qset.sha256, RULE, "p" * 64, "m", 16, 8, tuple(items))


def logprobs(shift: float = 0.0, flips: int = 0, tokens: tuple[int, ...] = tuple(range(100, 400))) -> LogprobRecord:
    lps = [None] + [-1.0 - (i % 7) / 10 + shift for i in range(1, len(tokens))]
    top = [None] + [tokens[i] if i > flips else tokens[i] + 1 for i in range(1, len(tokens))]
    return LogprobRecord("reference-v1", "r" * 64, "m", tokens, tuple(lps), tuple(top))


IDS = [item.id for item in QSET.items]
BASE_WRONG = set(IDS[:30])
_, REF_SHA = load_reference("reference-v1")


def figure(rec: AnswerRecord, lp: LogprobRecord, **change: Any) -> AnswersFigure:
    acc, low, high = rec.accuracy(0.95)
    lp_dict = {**lp.as_dict(), "reference_sha256": REF_SHA}
    fields: dict[str, Any] = {
        "questions": QSET.name, "set_sha256": QSET.sha256, "reference": "reference-v1", "concurrency": 8,
        "max_tokens": 16, "confidence": 0.95, "items": len(rec.items), "right": rec.right,
        "unanswered": len(rec.errors), "accuracy": acc, "wilson_low": low, "wilson_high": high, "set_s": 1.0,
        "reference_s": 0.1, "record": rec.as_dict(), "logprobs": lp_dict,
    }  # fmt: skip
    return AnswersFigure(**{**fields, **change})


BASE = figure(record(BASE_WRONG), logprobs())
