"""A boot-verify answers run made up for tests of other gates (promotion, rollback, the fleet page) whose
profile sets verify.answers: every item answered with its own answer (all right), the reference text's
log-probabilities all -1 over made-up tokens. Two such runs are identical (an A/A). The gate itself is tested
on a real server (tests/integration/judge/test_answers_gate_live.py)."""

from __future__ import annotations

from typing import Any

from vfleet.profiles import Catalog
from vfleet.verify.answers.questions import load_reference, load_set
from vfleet.verify.answers.records import AnswerRecord, ItemAnswer, LogprobRecord
from vfleet.verify.answers.runner import prompt_sha256
from vfleet.verify.answers.scoring import RULE


def made_up_answers(profile: str, shift: float = 0.0) -> dict[str, Any] | None:
    """figures.answers of a run under PROFILE's verify.answers (None where it sets none); SHIFT moves every
    log-probability (drift)."""
    spec = Catalog().load(profile).verify.answers
    if spec is None:
        return None
    qset = load_set(spec.questions)
    items = tuple(ItemAnswer(i.id, i.answer, "stop", True) for i in qset.items)
    rec = AnswerRecord(qset.name, qset.version, qset.sha256, RULE, prompt_sha256(), "m", spec.max_tokens, 1, items)
    _, sha = load_reference(spec.reference)
    n = 64
    lp = LogprobRecord(
        spec.reference, sha, "m", tuple(range(n)), (None, *[-1.0 + shift] * (n - 1)), (None, *range(1, n))
    )
    acc, low, high = rec.accuracy(spec.confidence)
    return {
        "questions": qset.name, "set_sha256": qset.sha256, "reference": spec.reference, "concurrency": 1,
        "max_tokens": spec.max_tokens, "confidence": spec.confidence, "items": len(items), "right": rec.right,
        "unanswered": 0, "accuracy": acc, "wilson_low": low, "wilson_high": high, "set_s": 0.0, "reference_s": 0.0,
        "record": rec.as_dict(), "logprobs": lp.as_dict(),
    }  # fmt: skip


#: A drift allowance for tests of other gates that promote a production profile twice (its profile measures
#: none: NOT MEASURED fails the second promotion, as it must).
MADE_UP_ALLOWANCE = {
    "mean_abs": 0.01,
    "p99": 0.05,
    "top1_share": 0.01,
    "measured_by": "made up for tests of other gates (tests/support/answers.py), never measured",
}


def allow_drift(config_tree: Any, model: str) -> None:
    """Give MODEL's answers gate the made-up allowance in the test's copy of serve_configs/."""
    config_tree.edit(f"models/{model}/model.yaml", lambda d: d["verify"]["answers"].update(drift=MADE_UP_ALLOWANCE))
