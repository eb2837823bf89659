"""2.4: prefix-cache hits on a repeated prefix, and the seed-003 integrity probe."""

from __future__ import annotations

import time
from typing import Any

import pytest

from vfleet.verify.probe.cache import prefix_hit_check
from vfleet.verify.probe.integrity import ProbeSetupError, integrity_probe
from vfleet.verify.target import Target


def test_prefix_cache_hit(target: Target, figures: dict[str, Any]) -> None:
    if not target.profile.verify.prefix_cache:
        pytest.skip("the profile does not expect prefix caching")
    res = prefix_hit_check(target.client, tag=f"hit-{time.time_ns()}")
    figures["prefix_hit"] = vars(res)
    assert res.hit_tokens_delta >= res.block_size, (
        f"expected the repeated {res.prompt_tokens}-token prompt to hit the prefix cache "
        f"(hits delta >= one block, {res.block_size} tokens); saw a hits delta of {res.hit_tokens_delta:.0f} "
        f"tokens out of {res.query_tokens_delta:.0f} queried"
    )


def test_prefix_cache_integrity(target: Target, figures: dict[str, Any]) -> None:
    v = target.profile.verify
    if not v.prefix_cache or not v.integrity.enabled:
        pytest.skip("the profile disables prefix caching or the integrity probe")
    try:
        res = integrity_probe(target.client, v.integrity, v.max_model_len, tag=f"int-{time.time_ns()}")
    except ProbeSetupError as exc:
        pytest.fail(f"expected a runnable integrity probe; saw: {exc}")
    figures["integrity"] = res.as_dict()
    hit_problems = res.hit_problems()
    assert not hit_problems, (
        f"expected every cached request to hit its whole cached prefix and every cache_salt reference to hit "
        f"nothing, after {res.fillers} fillers cycled the {res.num_gpu_blocks}-block pool {res.pool_cycles}x "
        f"(hits from {res.hit_source}); " + "; ".join(hit_problems)
    )
    problems = res.judgement_problems(target.profile.production)
    assert not problems, " ; ".join(problems)
