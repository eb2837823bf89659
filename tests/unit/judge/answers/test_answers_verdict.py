"""The promotion judgement of the answers gate (vfleet.verify.answers.verdict) on constructed records."""

from __future__ import annotations

import dataclasses

import pytest
from support.answer_records import ALLOWANCE, BASE_WRONG, IDS, QSET, logprobs, record

from vfleet.profile_answers import AnswersSpec
from vfleet.verify.answers.records import AnswerRecord, LogprobRecord, RecordError
from vfleet.verify.answers.verdict import NO_BASELINE, NOT_MEASURED, judge

SPEC = AnswersSpec(margin=0.05, confidence=0.95, drift=ALLOWANCE)


def test_aa_passes() -> None:
    v = judge(SPEC, QSET, record(BASE_WRONG), logprobs(), record(BASE_WRONG), logprobs())
    assert v.ok and not v.first_promotion
    assert v.accuracy is not None and v.accuracy.drop == 0 and v.accuracy.drop_upper < SPEC.margin
    assert v.drift is not None and v.drift.ok is True and v.drift.drift.mean_abs == 0


def test_worse_beyond_margin_fails() -> None:
    """30 more items wrong (about 10% of the set): shown worse, and beyond the 5% margin."""
    v = judge(SPEC, QSET, record(set(IDS[:60])), logprobs(), record(BASE_WRONG), logprobs())
    assert not v.ok and v.accuracy is not None and not v.accuracy.ok
    assert v.accuracy.p_worse < 0.05 and v.accuracy.drop_lower > 0
    assert any("not shown within the margin" in r for r in v.reasons)
    assert any("exact McNemar" in r for r in v.reasons)


def test_a_drop_that_cannot_be_bounded_within_the_margin_fails() -> None:
    """Six items flipped each way: no net drop, yet the bound on the drop passes the margin: inconclusive
    is no pass (with a margin that a clean run passes)."""
    spec = SPEC.model_copy(update={"margin": 0.02})
    cand = (BASE_WRONG - set(IDS[:6])) | set(IDS[100:106])
    v = judge(spec, QSET, record(cand), logprobs(), record(BASE_WRONG), logprobs())
    assert v.accuracy is not None and v.accuracy.drop == 0 and not v.accuracy.ok and not v.ok
    clean = judge(spec, QSET, record(BASE_WRONG), logprobs(), record(BASE_WRONG), logprobs())
    assert clean.ok


def test_better_candidate_passes() -> None:
    v = judge(SPEC, QSET, record(set(IDS[:10])), logprobs(), record(BASE_WRONG), logprobs())
    assert v.ok and v.accuracy is not None and v.accuracy.drop < 0


def test_first_promotion_says_so_and_records_the_run() -> None:
    v = judge(SPEC, QSET, record(BASE_WRONG), logprobs(), None, None)
    assert v.ok and v.first_promotion and v.reasons[0] == NO_BASELINE
    assert any("recorded as the baseline" in r for r in v.reasons)


def test_unanswered_items_fail_even_a_first_promotion() -> None:
    cand = record(BASE_WRONG, errors=frozenset(IDS[200:201]))
    assert not judge(SPEC, QSET, cand, logprobs(), None, None).ok
    v = judge(SPEC, QSET, cand, logprobs(), record(BASE_WRONG), logprobs())
    assert not v.ok and any("got no answer" in r for r in v.reasons)


def test_drift_not_measured_is_no_pass() -> None:
    spec = SPEC.model_copy(update={"drift": None})
    v = judge(spec, QSET, record(BASE_WRONG), logprobs(), record(BASE_WRONG), logprobs())
    assert v.drift is not None and v.drift.ok is None and not v.ok
    assert any(NOT_MEASURED in r for r in v.reasons)


@pytest.mark.parametrize(("shift", "flips", "metric"), [(0.02, 0, "mean_abs"), (0.0, 10, "top1_share")])
def test_drift_beyond_the_allowance_fails(shift: float, flips: int, metric: str) -> None:
    v = judge(SPEC, QSET, record(BASE_WRONG), logprobs(shift, flips), record(BASE_WRONG), logprobs())
    assert not v.ok and any(f"drift {metric}" in r and "measured by" in r for r in v.reasons)


def test_drift_within_the_allowance_passes() -> None:
    v = judge(SPEC, QSET, record(BASE_WRONG), logprobs(0.005, 1), record(BASE_WRONG), logprobs())
    assert v.ok and v.drift is not None and v.drift.drift.top1_share == pytest.approx(1 / 299)


def test_another_set_is_refused() -> None:
    other = dataclasses.replace(QSET, sha256="0" * 64)
    with pytest.raises(RecordError, match=r"refused: the baseline ran set .* compared on one set only"):
        judge(SPEC, QSET, record(BASE_WRONG), logprobs(), record(BASE_WRONG, qset=other), logprobs())


def test_missing_items_are_refused() -> None:
    short = dataclasses.replace(record(BASE_WRONG), items=record(BASE_WRONG).items[:-1])
    with pytest.raises(RecordError, match="does not answer each item"):
        judge(SPEC, QSET, short, logprobs(), record(BASE_WRONG), logprobs())


def test_other_tokens_are_refused() -> None:
    with pytest.raises(RecordError, match=r"other tokens .* first at position 0"):
        judge(SPEC, QSET, record(BASE_WRONG), logprobs(tokens=tuple(range(1, 301))), record(BASE_WRONG), logprobs())


def test_another_reference_text_is_refused() -> None:
    other = dataclasses.replace(logprobs(), reference_sha256="x" * 64)
    with pytest.raises(RecordError, match="reference text"):
        judge(SPEC, QSET, record(BASE_WRONG), logprobs(), record(BASE_WRONG), other)


def test_an_edited_correctness_is_refused() -> None:
    """A record that says an item is right whose response the rule scores wrong is not judged."""
    base = record(BASE_WRONG)
    items = list(base.items)
    items[0] = dataclasses.replace(items[0], correct=True)
    with pytest.raises(RecordError, match="edited or scored by another rule"):
        judge(SPEC, QSET, record(BASE_WRONG), logprobs(), dataclasses.replace(base, items=tuple(items)), logprobs())


def test_half_a_baseline_is_refused() -> None:
    with pytest.raises(RecordError, match="not both"):
        judge(SPEC, QSET, record(BASE_WRONG), logprobs(), record(BASE_WRONG), None)


def test_records_round_trip_through_json() -> None:
    rec, lp = record(BASE_WRONG), logprobs(0.1, 3)
    assert AnswerRecord.from_dict(rec.as_dict()) == rec
    assert LogprobRecord.from_dict(lp.as_dict()) == lp
    bad = rec.as_dict()
    bad["items"][3]["correct"] = "yes"
    with pytest.raises(RecordError, match=r"items\[3\]: correct must be bool"):
        AnswerRecord.from_dict(bad)
