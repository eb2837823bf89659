"""`vfleet check` and `vfleet render`, as an operator runs them, on a production profile that declares its
gates away (issue 31, item 7): refused, each floor named with the profile, the key, the bound and the fix;
`vfleet check --rules` lists every floor. Every bound one by one: tests/unit/core/test_production_floors.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from conftest import ConfigTree

from vfleet import checkids
from vfleet.profile_floors import FLOORS

PROFILE = "kimi-k3/gb300"
#: With the two prefix-cache checks Kimi-K3 declares (it serves without a prefix cache), the 9 checks of 16
#: the finding declared not applicable: every one main let a production profile declare (all but the log
#: checks and GPU health).
DECLARED_AWAY = tuple(
    c.replace("<n>", "32")
    for c in checkids.CHECK_IDS
    if not c.startswith("test_log[") and c != "test_gpu_health" and "prefix_cache" not in c
)


def vfleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vfleet", *args], capture_output=True, text=True, env=dict(os.environ), check=False
    )


def _declare_the_gates_away(d: dict[str, Any]) -> None:
    """The finding: 9 checks not applicable, a pass valid for 36,500 days, a load floor of 0.001 tok/s, an
    integrity tolerance of 1,000 nats, and a waiver, each with a ten-character reason."""
    d["verify"]["not_applicable"].update(dict.fromkeys(DECLARED_AWAY, "not needed"))
    d["verify"].update(report_max_age_days=36500, integrity={"logprob_tolerance": 1000.0})
    d["verify"]["load"]["min_output_tok_per_s"] = {1: 0.001, 32: 0.001}
    d["vllm"]["enable_chunked_prefill"] = False  # breaks rule no-underscore-false, which the waiver lifts
    d["waivers"] = [{"rule": "no-underscore-false", "reason": "not needed"}]


def test_check_and_render_refuse_a_production_profile_that_declares_its_gates_away(
    config_tree: ConfigTree,
) -> None:
    assert vfleet("check", PROFILE).returncode == 0  # as shipped
    config_tree.edit("models/kimi-k3/model.yaml", _declare_the_gates_away)
    proc = vfleet("check", PROFILE)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = proc.stderr
    assert f"FAIL {PROFILE}" in err
    for line in (
        f"{PROFILE}: rule production-checks-run: verify.not_applicable.test_health: declares not applicable a check "
        "production runs.",
        f"{PROFILE}: rule production-report-max-age: verify.report_max_age_days: is 36500 days, production maximum "
        "30. Why: a stale pass says nothing",
        f"{PROFILE}: rule production-load-floor: verify.load.min_output_tok_per_s.32: is 0.001 output tok/s at C32, "
        "production minimum 160 (5 per stream x 32).",
        f"{PROFILE}: rule production-integrity-bounds: verify.integrity.logprob_tolerance: is 1000, production "
        "maximum 0.015625",
        f"{PROFILE}: rule production-waiver-source: waivers[0] (no-underscore-false).source: is not set.",
        f"{PROFILE}: its layers: models/kimi-k3/model.yaml,",
    ):
        assert line in err, err
    for check in DECLARED_AWAY:
        assert f"{PROFILE}: rule production-checks-run: verify.not_applicable.{check}: declares" in err, check
    assert "verify.not_applicable.test_prefix_cache_hit" not in err  # Kimi-K3 serves without a prefix cache
    assert err.count("Fix: ") >= 5 and "no waiver lifts it" in err
    assert "0 of 1 profiles pass" in proc.stdout
    # The rest of the catalogue still passes, and render refuses the same profile.
    others = vfleet("check", "glm-5.3-flash/h200", "tiny/cpu")
    assert others.returncode == 0, others.stderr
    render = vfleet("render", PROFILE)
    assert render.returncode == 2 and "rule production-report-max-age" in render.stderr, render.stderr


def test_check_rules_lists_every_floor_with_its_reason() -> None:
    proc = vfleet("check", "--rules")
    assert proc.returncode == 0, proc.stderr
    for r in FLOORS:
        assert f"{r.id}\n  why:    {r.reason}\n  source: {r.source}\n  fix:    {r.fix}\n  waiver: none" in proc.stdout
