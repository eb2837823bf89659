"""Every rule: the shipped profiles pass it, and a profile that breaks it fails with the exact error."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import ConfigTree

from vfleet.cli import main
from vfleet.errors import ProfileError
from vfleet.profiles import Catalog
from vfleet.rules import RULES, enforce, evaluate


def test_every_shipped_profile_passes_every_rule() -> None:
    catalog = Catalog()
    names = catalog.profile_names()
    assert len(names) == 11
    for name in names:
        result = enforce(catalog.load(name))
        waived = {v.rule.id for v in result.waived}
        assert waived == ({"no-enforce-eager"} if name in ("tiny/cpu", "smollm2-135m/cpu") else set()), name


def test_cli_check_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    n = len(Catalog().profile_names())
    assert n >= 2 and f"{n} of {n} profiles pass {len(RULES)} rules" in out
    assert "ok   tiny/cpu [waived: no-enforce-eager]" in out
    assert "ok   smollm2-135m/cpu [waived: no-enforce-eager]" in out


DROP = object()  # remove the key from this layer, so the one below shows through


def _set(section: str, key: str, value: Any) -> Any:
    def fn(d: dict[str, Any]) -> None:
        if section == "waivers":  # a list: key is the waived rule, value the entry's other fields
            d.setdefault(section, []).append({"rule": key, **value})
        elif value is DROP:
            d.setdefault(section, {}).pop(key)
        else:
            d.setdefault(section, {})[key] = value

    return fn


# (rule id, file to edit, section, key, bad value, profile, exact error)
CASES = [
    (
        "no-enforce-eager",
        "models/glm-5.3-flash/model.yaml",
        "vllm",
        "enforce-eager",
        True,
        "glm-5.3-flash/b200",
        "glm-5.3-flash/b200: rule no-enforce-eager: vllm.enforce-eager: is true, which disables CUDA/HIP graphs. "
        "Why: eager mode costs 3.3x decode throughput (5.0x at one request) (source: seed 000 MI350X table; "
        "tests/fixtures/h200-vllm-0.26.0 README). Fix: remove enforce-eager and any cudagraph_mode NONE; graph mode "
        "is the default",
    ),
    (
        "no-enforce-eager",
        "models/glm-5.3-flash/cuda.yaml",
        "vllm",
        "compilation-config",
        {"cudagraph_mode": "NONE"},
        "glm-5.3-flash/h200",
        "glm-5.3-flash/h200: rule no-enforce-eager: vllm.compilation-config.cudagraph_mode: is NONE, which disables "
        "CUDA/HIP graphs.",
    ),
    (
        "glm-gfx950-aiter-bf16-kv",
        "models/glm-5.3-flash/gfx950.yaml",
        "env",
        "VLLM_ROCM_USE_AITER_MOE",
        "1",
        "glm-5.3-flash/mi355x",
        "glm-5.3-flash/mi355x: rule glm-gfx950-aiter-bf16-kv: env.VLLM_ROCM_USE_AITER_MOE: is '1', must be '0'. "
        "Why: GLM-5.3-Flash FP8 on gfx950 needs AITER on",
    ),
    (
        "glm-gfx950-aiter-bf16-kv",
        "models/glm-5.3-flash/rocm.yaml",
        "env",
        "VLLM_ROCM_USE_AITER",
        None,
        "glm-5.3-flash/mi350x",
        "glm-5.3-flash/mi350x: rule glm-gfx950-aiter-bf16-kv: env.VLLM_ROCM_USE_AITER: is None, must be '1'.",
    ),
    (
        "glm-gfx950-aiter-bf16-kv",
        "models/glm-5.3-flash/gfx950.yaml",
        "vllm",
        "kv-cache-dtype",
        "fp8",
        "glm-5.3-flash/mi355x",
        "glm-5.3-flash/mi355x: rule glm-gfx950-aiter-bf16-kv: vllm.kv-cache-dtype: is 'fp8', must be 'bfloat16'.",
    ),
    (
        "glm-rocm-max-num-seqs",
        "models/glm-5.3-flash/rocm.yaml",
        "vllm",
        "max-num-seqs",
        1024,
        "glm-5.3-flash/mi355x",
        "glm-5.3-flash/mi355x: rule glm-rocm-max-num-seqs: vllm.max-num-seqs: is 1024, must be set and at most 512. "
        "Why: ROCm GLM-5.3 aborts graph capture at max-num-seqs 1024 (Mamba cache blocks) (source: vllm-project/"
        "recipes#857 (AMD recipe); docs/upstream.md). Fix: set vllm max-num-seqs to 512 or less",
    ),
    (
        "glm-hopper-bf16-kv",
        "models/glm-5.3-flash/h200.yaml",
        "vllm",
        "kv-cache-dtype",
        DROP,
        "glm-5.3-flash/h200",
        "glm-5.3-flash/h200: rule glm-hopper-bf16-kv: vllm.kv-cache-dtype: is 'fp8', must be 'bfloat16'. "
        "Why: Hopper (H100/H200) runs GLM-5.3-Flash with BF16 KV only (source: GLM-5.3-Flash recipes, "
        "vllm-project/recipes; docs/upstream.md). "
        "Fix: set vllm kv-cache-dtype: bfloat16",
    ),
    (
        "kimi-rocm-breakable-cudagraph",
        "models/kimi-k3/rocm.yaml",
        "env",
        "VLLM_USE_BREAKABLE_CUDAGRAPH",
        "1",
        "kimi-k3/mi355x",
        "kimi-k3/mi355x: rule kimi-rocm-breakable-cudagraph: env.VLLM_USE_BREAKABLE_CUDAGRAPH: is '1', must be '0'. "
        "Why: Kimi-K3 on ROCm requires breakable CUDA graphs off (source: vllm/config/vllm.py of the pinned "
        "base; seed 002; docs/upstream.md). "
        "Fix: set env VLLM_USE_BREAKABLE_CUDAGRAPH: '0'",
    ),
    (
        "parallel-fits-platform",
        "models/glm-5.3-flash/gb300.yaml",
        "vllm",
        "tensor-parallel-size",
        8,
        "glm-5.3-flash/gb300",
        "glm-5.3-flash/gb300: rule parallel-fits-platform: vllm.tensor-parallel-size: tensor x pipeline x data "
        "parallel = 8 GPUs, platform gb300 has 4.",
    ),
    (
        "graceful-shutdown",
        "models/glm-5.3-flash/model.yaml",
        "vllm",
        "shutdown-timeout",
        DROP,
        "glm-5.3-flash/mi355x",
        "glm-5.3-flash/mi355x: rule graceful-shutdown: vllm.shutdown-timeout: is not set: on docker stop vLLM 0.30 "
        "aborts in-flight requests. Why: a stop must not cut requests",
    ),
    (
        "graceful-shutdown",
        "platforms/b200.yaml",
        "runtime",
        "stop_timeout",
        125,
        "kimi-k3/b200",
        "kimi-k3/b200: rule graceful-shutdown: platform.runtime.stop_timeout: is 125 s, must be at least "
        "shutdown-timeout 120 s + 10 s or docker kills vLLM while it still finishes requests.",
    ),
    (
        "no-underscore-false",
        "models/kimi-k3/model.yaml",
        "vllm",
        "enable_chunked_prefill",
        False,
        "kimi-k3/b200",
        "kimi-k3/b200: rule no-underscore-false: vllm.enable_chunked_prefill: is an underscore key set to false, "
        "which vLLM silently drops. Why: vLLM's --config loader turns `a_b: false` into nothing",
    ),
    # The production floors (vfleet.profile_floors): refused when the profile loads. Every bound of each:
    # tests/unit/core/test_production_floors.py.
    (
        "production-checks-run",
        "models/glm-5.3-flash/model.yaml",
        "verify",
        "not_applicable",
        {"test_log[faults]": "we would rather not look at it"},
        "glm-5.3-flash/b200",
        "glm-5.3-flash/b200: rule production-checks-run: verify.not_applicable.test_log[faults]: declares not "
        "applicable a check production runs. Why: a check declared not applicable is one nobody ran",
    ),
    (
        "production-report-max-age",
        "models/glm-5.3-flash/cuda.yaml",
        "verify",
        "report_max_age_days",
        36500,
        "glm-5.3-flash/h200",
        "glm-5.3-flash/h200: rule production-report-max-age: verify.report_max_age_days: is 36500 days, production "
        "maximum 30. Why: a stale pass says nothing",
    ),
    (
        "production-load-floor",
        "models/kimi-k3/model.yaml",
        "verify",
        "load",
        {"min_output_tok_per_s": {1: 0.001, 32: 160.0}},
        "kimi-k3/mi355x",
        "kimi-k3/mi355x: rule production-load-floor: verify.load.min_output_tok_per_s.1: is 0.001 output tok/s at "
        "C1, production minimum 5 (5 per stream x 1).",
    ),
    (
        "production-kv-floor",
        "models/kimi-k3/model.yaml",
        "verify",
        "min_kv_tokens",
        1024,
        "kimi-k3/gb300",
        "kimi-k3/gb300: rule production-kv-floor: verify.min_kv_tokens: is 1024, production minimum "
        "verify.max_model_len 16384.",
    ),
    (
        "production-integrity-bounds",
        "models/glm-5.3-flash/rocm.yaml",
        "verify",
        "integrity",
        {"logprob_tolerance": 1000.0},
        "glm-5.3-flash/mi350x",
        "glm-5.3-flash/mi350x: rule production-integrity-bounds: verify.integrity.logprob_tolerance: is 1000, "
        "production maximum 0.015625 (one bf16 step of a logit",
    ),
    (
        "production-new-warnings-fail",
        "models/glm-5.3-flash/model.yaml",
        "verify",
        "warnings",
        {"new_fails": False},
        "glm-5.3-flash/gb300",
        "glm-5.3-flash/gb300: rule production-new-warnings-fail: verify.warnings.new_fails: is false, so a new "
        "warning template would not fail promotion.",
    ),
    (
        "production-ab-gate",
        "models/kimi-k3/model.yaml",
        "verify",
        "ab_not_worse",
        False,
        "kimi-k3/b200",
        "kimi-k3/b200: rule production-ab-gate: verify.ab_not_worse: is not true, so a promotion needs no A/B "
        "against the promoted image.",
    ),
    (
        "production-answers-gate",
        "models/kimi-k3/model.yaml",
        "verify",
        "answers",
        {"margin": 0.1},
        "kimi-k3/gb300",
        "kimi-k3/gb300: rule production-answers-gate: verify.answers.margin: is 0.1, production maximum 0.05.",
    ),
    (
        "production-waiver-source",
        "models/glm-5.3-flash/model.yaml",
        "waivers",
        "no-enforce-eager",
        {"reason": "trust me, it is fine"},
        "glm-5.3-flash/mi355x",
        "glm-5.3-flash/mi355x: rule production-waiver-source: waivers[0] (no-enforce-eager).source: is not set. "
        "Why: a waiver lifts a rule that has a source",
    ),
]


def test_every_rule_has_a_breaking_case() -> None:
    assert {c[0] for c in CASES} == {r.id for r in RULES}


@pytest.mark.parametrize(
    ("rule", "rel", "section", "key", "value", "profile", "error"),
    CASES,
    ids=[f"{c[0]}:{c[3]}" for c in CASES],
)
def test_rule_catches_its_fault(
    config_tree: ConfigTree,
    rule: str,
    rel: str,
    section: str,
    key: str,
    value: Any,
    profile: str,
    error: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config_tree.edit(rel, _set(section, key, value))
    with pytest.raises(ProfileError) as exc:
        enforce(Catalog().load(profile))
    assert str(exc.value).startswith(error), str(exc.value)
    # The CLI reports the same error and fails.
    assert main(["check", profile]) == 1
    assert error in capsys.readouterr().err


def test_waiver_lifts_a_rule_and_is_shown_by_render(
    config_tree: ConfigTree, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", "tiny/cpu", "--format", "text"]) == 0
    out = capsys.readouterr().out
    assert "# WAIVED rule no-enforce-eager (vllm.enforce-eager): a CPU has no CUDA graphs" in out
    # Without the waiver the same profile fails.
    config_tree.edit("models/tiny/model.yaml", lambda d: d.pop("waivers"))
    assert main(["render", "tiny/cpu"]) == 2
    assert "tiny/cpu: rule no-enforce-eager: vllm.enforce-eager: is true" in capsys.readouterr().err


def test_stale_or_unknown_waiver_is_an_error(config_tree: ConfigTree) -> None:
    config_tree.edit(
        "models/glm-5.3-flash/model.yaml",
        lambda d: d.__setitem__(
            "waivers", [{"rule": "glm-hopper-bf16-kv", "reason": "testing a stale one", "source": "docs/upstream.md"}]
        ),
    )
    with pytest.raises(ProfileError, match="rule 'glm-hopper-bf16-kv' is waived but not broken"):
        evaluate(Catalog().load("glm-5.3-flash/h200"))
    config_tree.edit(
        "models/glm-5.3-flash/model.yaml",
        lambda d: d.__setitem__(
            "waivers", [{"rule": "no-such-rule", "reason": "a typo in a rule id", "source": "docs/upstream.md"}]
        ),
    )
    with pytest.raises(ProfileError, match="waivers: unknown rule 'no-such-rule'; known rules: no-enforce-eager"):
        evaluate(Catalog().load("glm-5.3-flash/h200"))
