"""The promotion side of the answers gate (vfleet.verify.answers.gate) on report figures built from constructed
records: what promotion does with a missing run, a first promotion, a baseline from before the gate, another
reference text, an unmeasured drift allowance and a worse candidate."""

from __future__ import annotations

from support.answer_records import ALLOWANCE, BASE, BASE_WRONG, IDS, figure, logprobs, record

from vfleet.profile_answers import AnswersSpec
from vfleet.verify.answers.gate import NO_ANSWERS_BASELINE, judgement
from vfleet.verify.answers.verdict import NO_BASELINE

SPEC = AnswersSpec(questions="basic-v1", drift=ALLOWANCE)


def test_a_profile_without_the_gate_is_not_judged() -> None:
    j = judgement(None, None, BASE, "b")
    assert j.problems == [] and j.note == ""


def test_a_report_without_a_run_is_refused_where_the_profile_sets_the_gate() -> None:
    j = judgement(SPEC, None, BASE, "b")
    assert j.problems and "holds no answers run while the profile sets verify.answers" in j.problems[0]


def test_the_first_promotion_records_the_baseline() -> None:
    j = judgement(SPEC, BASE, None, "")
    assert j.problems == [] and j.note.startswith(NO_BASELINE), j.note
    assert "recorded as the baseline" in j.note


def test_a_baseline_from_before_the_gate_makes_this_the_first_answers_run() -> None:
    j = judgement(SPEC, BASE, None, "sha256:aa (report r)")
    assert j.problems == [] and j.note.startswith(NO_ANSWERS_BASELINE + " (sha256:aa (report r))"), j.note


def test_the_same_answers_pass_and_a_worse_candidate_is_refused_naming_the_baseline() -> None:
    same = judgement(SPEC, figure(record(BASE_WRONG), logprobs()), BASE, "sha256:aa")
    assert same.problems == [] and "within the allowance" in same.note
    worse = judgement(SPEC, figure(record(set(IDS[:60])), logprobs()), BASE, "sha256:aa")
    assert worse.problems and worse.problems[0].startswith("answers against sha256:aa: accuracy:"), worse.problems
    drifted = judgement(SPEC, figure(record(BASE_WRONG), logprobs(shift=0.5)), BASE, "sha256:aa")
    assert drifted.problems and "drift mean_abs 0.5 above the allowance" in drifted.problems[0], drifted.problems


def test_an_unmeasured_drift_allowance_is_no_pass() -> None:
    spec = AnswersSpec(questions="basic-v1")
    j = judgement(spec, figure(record(BASE_WRONG), logprobs()), BASE, "sha256:aa")
    assert j.problems and "drift: NOT MEASURED" in j.problems[0]


def test_a_run_of_another_reference_text_is_refused() -> None:
    other = figure(record(BASE_WRONG), logprobs(), logprobs={**logprobs().as_dict(), "reference_sha256": "f" * 64})
    j = judgement(SPEC, other, BASE, "sha256:aa")
    assert j.problems and "not the profile's reference-v1" in j.problems[0], j.problems
