"""The recorded H200 A/Bs (benchmarks/h200_ab.sh on one H200 with vLLM 0.26.0): graph mode (A) against
--enforce-eager (B) (tests/fixtures/h200-ab, two runs), and graph mode against graph mode with
VLLM_BATCH_INVARIANT=1 (tests/fixtures/h200-bi, `B=bi`), hold together under today's code: every round
measured both arms at every level in the A B, B A order with fresh prompts and no failed request, and
`vfleet.ab.run.analyse` recomputes, from the recorded per-round figures alone, the same per-round
ratios, estimates, bootstrap intervals and verdicts that the report states (so a change to the
statistics, or a hand-edited report, shows here)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from vfleet.ab import run as ab
from vfleet.ab.stats import METRICS, arm_order
from vfleet.profiles import Catalog
from vfleet.verify.log import check as logcheck

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
H200_AB = FIXTURES / "h200-ab"
H200_BI = FIXTURES / "h200-bi"
EAGER_RUNS = ["h200-ab/run1-64tok", "h200-ab/run2-128tok"]
RUNS = [*EAGER_RUNS, "h200-bi"]
PROFILE_TREE = Path(__file__).resolve().parents[2] / "fixtures" / "h200-verify" / "serve_configs"


def _report(run: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / run / "ab" / "ab.json").read_text())
    return data


@pytest.mark.parametrize("run", RUNS)
def test_rounds_are_complete_paired_and_alternate(run: str) -> None:
    rep = _report(run)
    assert (rep["kind"], rep["mode"], rep["status"], rep["broken"]) == ("vfleet-ab", "A/B", "complete", None)
    a, b = rep["arms"]["A"], rep["arms"]["B"]
    assert a["model"] == b["model"] == "llama-1b-random" and a["max_model_len"] == b["max_model_len"] == 2048
    assert a["vllm_version"] == b["vllm_version"] == "0.26.0" and a["url"] != b["url"]
    s = ab.settings(**rep["settings"])
    assert s.levels == [1, 32] and s.rounds >= 10
    ms = [ab.Measurement(**m) for m in rep["measurements"]]
    keys = [(m.round, m.level, m.arm) for m in ms]
    assert sorted(keys) == sorted((k, c, arm) for k in range(s.rounds) for c in s.levels for arm in "AB")
    for m in ms:
        assert m.position == arm_order(m.round).index(m.arm), m
        assert m.requests == m.completed == s.requests(m.level), m
    salts = [m.salt for m in ms] + [w["salt"] for w in rep["warmup"]]
    assert len(set(salts)) == len(salts), "a measurement reused another's prompts"


@pytest.mark.parametrize("run", RUNS)
def test_analysis_recomputes_the_recorded_comparisons(run: str) -> None:
    rep = _report(run)
    s = ab.settings(**rep["settings"])
    recomputed = ab.analyse([ab.Measurement(**m) for m in rep["measurements"]], s)
    recorded = rep["comparisons"]
    assert len(recomputed) == len(recorded) == len(s.levels) * len(METRICS)
    for new, old in zip(recomputed, recorded, strict=True):
        where = f"{old['metric']}@C{old['level']}"
        assert (new.metric, new.level, new.rounds) == (old["metric"], old["level"], old["rounds"]), where
        assert new.a == old["a"] and new.b == old["b"], where
        assert new.ratios == pytest.approx(old["ratios"], rel=1e-12), where
        assert new.ratio == pytest.approx(old["ratio"], rel=1e-9), where
        assert new.confidence == pytest.approx(old["confidence"]) and new.method == old["method"], where
        # The same seeded bootstrap: equal up to float noise with this project's scipy pin.
        assert new.low == pytest.approx(old["low"], rel=1e-6), where
        assert new.high == pytest.approx(old["high"], rel=1e-6), where
        assert (new.verdict, new.reason) == (old["verdict"], old["reason"]), where
        assert rep["verdicts"][where] == new.verdict, where


@pytest.mark.parametrize("run", EAGER_RUNS)
def test_eager_is_worse_than_graph_on_every_metric(run: str) -> None:
    """What the H200 showed, recomputed from the per-round figures: the eager server (B) is slower than
    the graph server (A) on output tok/s, TTFT and TPOT at C1 and C32, by far more than the minimum
    effect, in every round."""
    rep = _report(run)
    s = ab.settings(**rep["settings"])
    for c in ab.analyse([ab.Measurement(**m) for m in rep["measurements"]], s):
        assert c.verdict == "worse", (c.metric, c.level, c.reason)
        assert c.low is not None and c.high is not None and c.ratio is not None
        worse_side = [1 / r for r in c.ratios] if c.metric == "out_tok_per_s" else c.ratios
        assert min(worse_side) > 1.0, (c.metric, c.level, c.ratios)  # every round, not only the estimate
        if c.metric == "tpot_p50_ms":  # eager decode: at least 3x the graph-mode time per token
            assert c.low > 3.0 and math.isfinite(c.high), (c.level, c.low, c.high)


def test_arm_a_booted_in_graph_mode_and_arm_b_eager() -> None:
    """The arms are what the report calls them: the server on A's port (8000, vLLM's default, so not
    among the non-default args) passes every log check of the profile, graph mode included; the server on
    B's port (8001) fails graph mode alone (--enforce-eager)."""
    verify = Catalog(PROFILE_TREE).load("llama-1b-random/h200").verify
    graph = (H200_AB / "boot-ab-graph.log").read_text()
    eager = (H200_AB / "boot-ab-eager.log").read_text()
    for run in RUNS:
        arms = _report(run)["arms"]
        assert arms["A"]["url"].endswith(":8000") and arms["B"]["url"].endswith(":8001"), arms
    assert "'port': 8001" not in graph and "'port': 8001" in eager and "'enforce_eager': True" in eager
    assert [f.check for f in logcheck.all_checks(graph, verify) if f.ok is False] == []
    failed = {f.check: f.message for f in logcheck.all_checks(eager, verify) if f.ok is False}
    assert set(failed) == {"graph_mode"} and "eager mode" in failed["graph_mode"], failed


def test_batch_invariance_costs_a_quarter_of_the_throughput_or_more() -> None:
    """What the H200 showed for VLLM_BATCH_INVARIANT=1 (B) against plain graph mode (A), recomputed from
    the per-round figures: output tok/s is worse at C1 and C32 with the whole interval below 0.75 (at
    least a quarter lost), and decode (TPOT) is worse at both levels. These are the figures behind the
    decision in docs/boot-verify.md that production profiles do not run it."""
    rep = _report("h200-bi")
    s = ab.settings(**rep["settings"])
    got = {(c.metric, c.level): c for c in ab.analyse([ab.Measurement(**m) for m in rep["measurements"]], s)}
    for level in s.levels:
        tok, tpot = got[("out_tok_per_s", level)], got[("tpot_p50_ms", level)]
        assert tok.verdict == "worse" and tok.high is not None and tok.high < 0.75, (level, tok.low, tok.high)
        assert tpot.verdict == "worse" and tpot.low is not None and tpot.low > 1.3, (level, tpot.low)


def test_batch_invariant_arm_compiled_a_kernel_during_inference() -> None:
    """Both arms are graph mode; the batch-invariant one (port 8001, VLLM_BATCH_INVARIANT=1) compiled its
    persistent Triton matmul for a new shape after warm-up, while serving the A/B, and the log check
    fails it for that alone; the plain graph arm passes every log check."""
    verify = Catalog(PROFILE_TREE).load("llama-1b-random/h200").verify
    graph = (H200_BI / "boot-ab-graph.log").read_text()
    bi = (H200_BI / "boot-ab-bi.log").read_text()
    assert "'port': 8001" in bi and "batch_invariant" in bi and "'enforce_eager'" not in bi
    assert [f.check for f in logcheck.all_checks(graph, verify) if f.ok is False] == []
    failed = {f.check: f.message for f in logcheck.all_checks(bi, verify) if f.ok is False}
    assert set(failed) == {"faults"}, failed
    assert "jit-during-inference" in failed["faults"] and "matmul_kernel_persistent" in failed["faults"], failed
