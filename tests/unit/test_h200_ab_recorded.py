"""The recorded H200 A/B of graph mode (A) against --enforce-eager (B) (tests/fixtures/h200-ab, made with
benchmarks/h200_ab.sh on one H200 with vLLM 0.26.0) holds together under today's code: every round
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
from vfleet.verify import logcheck

H200_AB = Path(__file__).resolve().parents[1] / "fixtures" / "h200-ab"
RUNS = ["run1-64tok", "run2-128tok"]
PROFILE_TREE = Path(__file__).resolve().parents[1] / "fixtures" / "h200-verify" / "serve_configs"


def _report(run: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((H200_AB / run / "ab" / "ab.json").read_text())
    return data


@pytest.mark.parametrize("run", RUNS)
def test_rounds_are_complete_paired_and_alternate(run: str) -> None:
    rep = _report(run)
    assert (rep["kind"], rep["mode"], rep["status"], rep["broken"]) == ("vfleet-ab", "A/B", "complete", None)
    a, b = rep["arms"]["A"], rep["arms"]["B"]
    assert a["model"] == b["model"] == "llama-1b-random" and a["max_model_len"] == b["max_model_len"] == 2048
    assert a["vllm_version"] == b["vllm_version"] == "0.26.0" and a["url"] != b["url"]
    s = ab.settings(**rep["settings"])
    assert s.levels == [1, 32] and s.rounds >= 12
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


@pytest.mark.parametrize("run", RUNS)
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
