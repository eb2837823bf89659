"""What boot-verify's answers check fails on by itself (vfleet.verify.answers.figure.problems), and the view of a
run against the promoted one (vfleet.verify.answers.compare), on constructed records."""

from __future__ import annotations

from support.answer_records import ALLOWANCE, BASE, BASE_WRONG, IDS, QSET, figure, logprobs, record

from vfleet.profile_answers import AnswersSpec
from vfleet.verify.answers.compare import compare
from vfleet.verify.answers.figure import problems, summary

SPEC = AnswersSpec(questions="basic-v1", drift=ALLOWANCE)


def test_a_complete_run_passes_boot_verify_whatever_its_accuracy_without_a_floor() -> None:
    poor = figure(record(set(IDS[:300])), logprobs())
    assert problems(poor, SPEC) == []
    assert summary(poor).startswith(f"{QSET.name}: 10 of 310 right, accuracy 3.2% [")


def test_an_unanswered_item_fails_naming_it() -> None:
    fig = figure(record(BASE_WRONG, errors=frozenset({IDS[5]})), logprobs())
    got = problems(fig, SPEC)
    assert len(got) == 1 and f"1 of 310 items of {QSET.name} got no answer (first {IDS[5]}: HTTP 500" in got[0]


def test_an_accuracy_surely_below_the_floor_fails_and_one_that_may_reach_it_passes() -> None:
    floor = AnswersSpec(questions="basic-v1", min_accuracy=0.5)
    collapsed = figure(record(set(IDS[:250])), logprobs())  # 60 of 310 right: upper bound about 24%
    assert "is below the profile's verify.answers.min_accuracy 50.0%" in problems(collapsed, floor)[0]
    near = figure(record(set(IDS[:160])), logprobs())  # 150 of 310: 48%, the interval reaches 50%
    assert problems(near, floor) == []


def test_the_view_lists_the_changed_items_and_the_drift_per_position() -> None:
    cand = figure(record(BASE_WRONG | {IDS[40], IDS[41]}), logprobs(shift=0.002))
    c = compare(SPEC, cand, BASE, "sha256:aa")
    assert [i.id for i in c.changed] == [IDS[40], IDS[41]]
    assert all(i.baseline_correct and not i.candidate_correct for i in c.changed)
    assert len(c.diffs) == 299 and max(c.diffs) < 0.0021 and c.ok
    assert c.allowance_p99 == ALLOWANCE.p99
    worse = compare(SPEC, figure(record(set(IDS[:90])), logprobs()), BASE, "sha256:aa")
    assert not worse.ok and worse.verdict[0].startswith("answers against sha256:aa: accuracy")
