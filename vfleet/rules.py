"""Encoded deployment constraints, checked on every render.

Each rule carries the reason it exists and where that reason comes from. A profile may waive a rule
only with an explicit ``waivers:`` entry that gives its own reason; the waiver is printed by render.
The production floors (vfleet.profile_floors, at the end of RULES) are rules no waiver lifts; loading a
profile already enforces them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from vfleet.errors import ProfileError
from vfleet.profile_floors import FLOORS, Finding, Rule, Violation
from vfleet.profile_verify import cudagraph_mode, is_true
from vfleet.profiles import Profile

__all__ = ["RULES", "RULES_BY_ID", "CheckResult", "Finding", "Rule", "Violation", "enforce", "evaluate"]


GLM = "glm-5.3-flash"
KIMI = "kimi-k3"


def _no_enforce_eager(p: Profile) -> Iterator[Finding]:
    if is_true(p.vllm.get("enforce-eager")):
        yield Finding("vllm.enforce-eager", "is true, which disables CUDA/HIP graphs")
    if cudagraph_mode(p.vllm) == "NONE":
        yield Finding("vllm.compilation-config.cudagraph_mode", "is NONE, which disables CUDA/HIP graphs")


def _glm_gfx950(p: Profile) -> Iterator[Finding]:
    if p.model != GLM or p.platform.arch != "gfx950":
        return
    if p.env.get("VLLM_ROCM_USE_AITER") != "1":
        yield Finding("env.VLLM_ROCM_USE_AITER", f"is {p.env.get('VLLM_ROCM_USE_AITER')!r}, must be '1'")
    if p.env.get("VLLM_ROCM_USE_AITER_MOE") != "0":
        yield Finding("env.VLLM_ROCM_USE_AITER_MOE", f"is {p.env.get('VLLM_ROCM_USE_AITER_MOE')!r}, must be '0'")
    if p.vllm.get("kv-cache-dtype") != "bfloat16":
        yield Finding("vllm.kv-cache-dtype", f"is {p.vllm.get('kv-cache-dtype')!r}, must be 'bfloat16'")


def _glm_rocm_max_num_seqs(p: Profile) -> Iterator[Finding]:
    if p.model != GLM or p.platform.family != "rocm":
        return
    value = p.vllm.get("max-num-seqs")
    if not isinstance(value, int) or value > 512:
        yield Finding("vllm.max-num-seqs", f"is {value!r}, must be set and at most 512")


def _glm_hopper_bf16_kv(p: Profile) -> Iterator[Finding]:
    if p.model != GLM or p.platform.arch != "sm_90":
        return
    if p.vllm.get("kv-cache-dtype") != "bfloat16":
        yield Finding("vllm.kv-cache-dtype", f"is {p.vllm.get('kv-cache-dtype')!r}, must be 'bfloat16'")


def _kimi_rocm_breakable(p: Profile) -> Iterator[Finding]:
    if p.model != KIMI or p.platform.family != "rocm":
        return
    if p.env.get("VLLM_USE_BREAKABLE_CUDAGRAPH") != "0":
        yield Finding(
            "env.VLLM_USE_BREAKABLE_CUDAGRAPH",
            f"is {p.env.get('VLLM_USE_BREAKABLE_CUDAGRAPH')!r}, must be '0'",
        )


def _tp_fits(p: Profile) -> Iterator[Finding]:
    need = 1
    for key in ("tensor-parallel-size", "pipeline-parallel-size", "data-parallel-size"):
        value = p.vllm.get(key, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            yield Finding(f"vllm.{key}", f"is {value!r}, must be a positive integer")
            return
        need *= value
    have = p.platform.gpus
    if have == 0 and need > 1:
        yield Finding("vllm.tensor-parallel-size", f"asks for {need} ranks on a platform without GPUs")
    elif have and need > have:
        yield Finding(
            "vllm.tensor-parallel-size",
            f"tensor x pipeline x data parallel = {need} GPUs, platform {p.platform.platform} has {have}",
        )


#: Seconds docker must wait beyond vLLM's shutdown-timeout: the engine and API processes exit after it.
SHUTDOWN_MARGIN_S = 10


def _graceful_shutdown(p: Profile) -> Iterator[Finding]:
    value = p.vllm.get("shutdown-timeout")
    stop = p.platform.runtime.stop_timeout
    if value is None:
        if p.production:
            yield Finding("vllm.shutdown-timeout", "is not set: on docker stop vLLM 0.30 aborts in-flight requests")
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        yield Finding("vllm.shutdown-timeout", f"is {value!r}, must be a whole number of seconds")
        return
    if p.production and value == 0:
        yield Finding("vllm.shutdown-timeout", "is 0, which aborts in-flight requests on docker stop")
    if stop < value + SHUTDOWN_MARGIN_S:
        yield Finding(
            "platform.runtime.stop_timeout",
            f"is {stop} s, must be at least shutdown-timeout {value} s + {SHUTDOWN_MARGIN_S} s "
            "or docker kills vLLM while it still finishes requests",
        )


def _no_underscore_false(p: Profile) -> Iterator[Finding]:
    for key, value in p.vllm.items():
        if "_" in key.split(".")[0] and value is False:
            yield Finding(f"vllm.{key}", "is an underscore key set to false, which vLLM silently drops")


RULES: list[Rule] = [
    Rule(
        id="no-enforce-eager",
        reason="eager mode costs 3.3x decode throughput (5.0x at one request)",
        source="seed 000 MI350X table; tests/fixtures/h200-vllm-0.26.0 README",
        fix="remove enforce-eager and any cudagraph_mode NONE; graph mode is the default",
        check=_no_enforce_eager,
    ),
    Rule(
        id="glm-gfx950-aiter-bf16-kv",
        reason=(
            "GLM-5.3-Flash FP8 on gfx950 needs AITER on (its ROCm paths raise otherwise), AITER fused MoE off "
            "(faults on the 288-expert/top-8 shape) and BF16 KV (fp8 KV falls into a faulting asm decode kernel)"
        ),
        source="seed 000 MI350X review; ROCm/aiter#5049; docs/upstream.md",
        fix="set env VLLM_ROCM_USE_AITER: '1', VLLM_ROCM_USE_AITER_MOE: '0' and vllm kv-cache-dtype: bfloat16",
        check=_glm_gfx950,
    ),
    Rule(
        id="glm-rocm-max-num-seqs",
        reason="ROCm GLM-5.3 aborts graph capture at max-num-seqs 1024 (Mamba cache blocks)",
        source="vllm-project/recipes#857 (AMD recipe); docs/upstream.md",
        fix="set vllm max-num-seqs to 512 or less",
        check=_glm_rocm_max_num_seqs,
    ),
    Rule(
        id="glm-hopper-bf16-kv",
        reason="Hopper (H100/H200) runs GLM-5.3-Flash with BF16 KV only",
        source="GLM-5.3-Flash recipes, vllm-project/recipes; docs/upstream.md",
        fix="set vllm kv-cache-dtype: bfloat16",
        check=_glm_hopper_bf16_kv,
    ),
    Rule(
        id="kimi-rocm-breakable-cudagraph",
        reason="Kimi-K3 on ROCm requires breakable CUDA graphs off",
        source="vllm/config/vllm.py of the pinned base; seed 002; docs/upstream.md",
        fix="set env VLLM_USE_BREAKABLE_CUDAGRAPH: '0'",
        check=_kimi_rocm_breakable,
    ),
    Rule(
        id="parallel-fits-platform",
        reason="a parallel size larger than the node's GPU count fails at start-up, after the image pull",
        source="vLLM parallel config",
        fix="lower tensor-parallel-size (x pipeline/data parallel) to the platform's GPU count",
        check=_tp_fits,
    ),
    Rule(
        id="graceful-shutdown",
        reason=(
            "a stop must not cut requests: vLLM finishes in-flight requests on SIGTERM only for "
            "shutdown-timeout seconds (0, the default, aborts them), and docker kills the container after "
            "its stop timeout"
        ),
        source="vLLM --shutdown-timeout (vllm/engine/arg_utils.py, v1/engine/core.py of the pinned base); issue 10",
        fix=(
            "set vllm shutdown-timeout (e.g. 120) in the model layer, and the platform's runtime.stop_timeout "
            f"at least {SHUTDOWN_MARGIN_S} s longer"
        ),
        check=_graceful_shutdown,
    ),
    Rule(
        id="no-underscore-false",
        reason="vLLM's --config loader turns `a_b: false` into nothing: the setting is silently dropped",
        source="vllm/utils/argparse_utils.py load_config_file of the pinned base; docs/upstream.md",
        fix="write the key with dashes (enable-prefix-caching: false renders --no-enable-prefix-caching)",
        check=_no_underscore_false,
    ),
    *FLOORS,
]

RULES_BY_ID = {r.id: r for r in RULES}


@dataclass(frozen=True)
class CheckResult:
    profile: Profile
    violations: list[Violation]
    waived: list[Violation]


def evaluate(profile: Profile) -> CheckResult:
    """Run every rule; split findings into violations and waived ones."""
    waived_ids = {}
    for w in profile.waivers:
        if w.rule not in RULES_BY_ID:
            raise ProfileError(
                f"{profile.name}: waivers: unknown rule {w.rule!r}; known rules: {', '.join(RULES_BY_ID)}"
            )
        if not RULES_BY_ID[w.rule].waivable:
            raise ProfileError(
                f"{profile.name}: waivers: rule {w.rule!r} is a production floor: no waiver lifts it; remove the "
                f"waiver and fix the profile: {RULES_BY_ID[w.rule].fix}"
            )
        waived_ids[w.rule] = w
    violations: list[Violation] = []
    waived: list[Violation] = []
    for rule in RULES:
        for finding in rule.check(profile):
            v = Violation(profile.name, rule, finding)
            (waived if rule.id in waived_ids else violations).append(v)
    used = {v.rule.id for v in waived}
    for rule_id in waived_ids:
        if rule_id not in used:
            raise ProfileError(
                f"{profile.name}: waivers: rule {rule_id!r} is waived but not broken; remove the stale waiver"
            )
    return CheckResult(profile, violations, waived)


def enforce(profile: Profile) -> CheckResult:
    """Evaluate and raise one error listing every violation."""
    result = evaluate(profile)
    if result.violations:
        raise ProfileError("\n".join(str(v) for v in result.violations))
    return result
