"""Prefix-cache checks against a live server: the hit check and the seed-003 integrity probe.

Integrity probe (seed 003, vLLM #57477): a prefill kernel that wrote to the wrong KV block offset
silently corrupted a long-lived prefix-cached prompt; the damage stayed as long as the prompt stayed
cached, while the same prompt sent with a `cache_salt` (fresh blocks) answered correctly. The probe:

1. caches a long registry-style prompt (``prompt_blocks`` KV blocks) by asking each question once;
2. sends unique-prefix filler prompts until ``pool_cycles`` times the KV pool has gone through the
   allocator, sized from `vllm:cache_config_info` (num_gpu_blocks x block_size), touching the cached
   prompt between fillers so it stays cached (as a serving system prompt does) while the rest of the
   pool cycles around it;
3. asks every question again on the cached prompt (prefix-cache hits, measured) and with a unique
   `cache_salt` (computed on fresh blocks); the greedy answers must be identical. This needs no right
   answer, so it works for a model with random weights.
"""

from __future__ import annotations

import math
import random
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from vfleet.profiles import IntegritySpec
from vfleet.verify.client import Client
from vfleet.verify.metrics import prefix_hits

NAMES = tuple(
    "".join("atlas boreal cobalt dune ember fjord garnet harbor iris jade kestrel lumen marble nova onyx ").split()
)


def _registry_text(rng: random.Random, entries: int) -> str:
    lines = [f"Registry {uuid.UUID(int=rng.getrandbits(128))}. Each entry: id, owner, region, value."]
    for i in range(entries):
        lines.append(
            f"entry {i:04d}: owner={rng.choice(NAMES)}-{rng.randrange(1000)} "
            f"region={rng.choice(NAMES)} value={rng.randrange(100000)}"
        )
    return "\n".join(lines)


def _fit(client: Client, make: Any, target_tokens: int, lo: int = 1, hi: int = 4096) -> tuple[str, int]:
    """The longest make(n) whose token count is at most target_tokens (binary search on n)."""
    best: tuple[str, int] | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        text = make(mid)
        n = client.count_tokens(text)
        if n <= target_tokens:
            best = (text, n)
            lo = mid + 1
        else:
            hi = mid - 1
    if best is None:
        text = make(1)
        return text, client.count_tokens(text)
    return best


@dataclass
class PrefixHitResult:
    prompt_tokens: int
    block_size: int
    hit_tokens_delta: float
    query_tokens_delta: float


def prefix_hit_check(client: Client, tag: str) -> PrefixHitResult:
    """Send the same long prompt twice; return the prefix-cache hit delta of the second request."""
    _, block = client.metrics().cache_pool()
    rng = random.Random(tag)
    prompt, n = _fit(client, lambda k: f"[{tag}]\n" + _registry_text(rng_copy(rng), k), 3 * block + 16)
    client.complete(prompt, max_tokens=1)
    q0, h0 = prefix_hits(client.metrics())
    client.complete(prompt, max_tokens=1)
    q1, h1 = prefix_hits(client.metrics())
    return PrefixHitResult(prompt_tokens=n, block_size=block, hit_tokens_delta=h1 - h0, query_tokens_delta=q1 - q0)


def rng_copy(rng: random.Random) -> random.Random:
    r = random.Random()
    r.setstate(rng.getstate())
    return r


@dataclass
class IntegrityResult:
    num_gpu_blocks: int
    block_size: int
    pool_tokens: int
    prompt_tokens: int
    filler_tokens: int
    fillers: int
    filler_tokens_total: int
    pool_cycles: float
    questions: int
    hit_tokens_during_compare: float
    mismatches: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class ProbeSetupError(Exception):
    """The probe cannot be run as specified (the message says why and what to change)."""


def _check_count(fillers: int, filler_tokens: int, pool_tokens: int, spec: IntegritySpec) -> None:
    if fillers > spec.max_fillers:
        raise ProbeSetupError(
            f"cycling {spec.pool_cycles}x a pool of {pool_tokens:,} tokens needs {fillers} fillers of "
            f"{filler_tokens:,} tokens (bounded by max_model_len); integrity.max_fillers is {spec.max_fillers}"
        )


def plan_fillers(pool_tokens: int, block: int, max_model_len: int, spec: IntegritySpec) -> tuple[int, int]:
    """(tokens per filler, number of fillers) to push ``pool_cycles`` x the pool through the allocator:
    fillers at least 4 blocks long, long enough to stay within max_fillers, at most max_model_len and a
    quarter of the pool (so several fit at once)."""
    need = math.ceil(spec.pool_cycles * pool_tokens)
    target = max(4 * block, math.ceil(need / spec.max_fillers))
    target = min(target, max_model_len - 8, max(block, pool_tokens // 4))
    count = math.ceil(need / target)
    _check_count(count, target, pool_tokens, spec)
    return target, count


def integrity_probe(client: Client, spec: IntegritySpec, max_model_len: int, tag: str) -> IntegrityResult:
    blocks, block = client.metrics().cache_pool()
    pool_tokens = blocks * block
    rng = random.Random(tag)
    prompt_target = spec.prompt_blocks * block
    if prompt_target + 64 + spec.answer_tokens > max_model_len:
        raise ProbeSetupError(
            f"integrity.prompt_blocks {spec.prompt_blocks} x block_size {block} does not fit max_model_len "
            f"{max_model_len}; lower prompt_blocks"
        )
    base = rng_copy(rng)
    prompt, prompt_tokens = _fit(client, lambda k: _registry_text(rng_copy(base), k), prompt_target)
    questions = [
        f"\nQuestion {q}: which owner and value does entry {rng.randrange(50):04d} have?\nAnswer:"
        for q in range(spec.questions)
    ]

    filler_target, _ = plan_fillers(pool_tokens, block, max_model_len, spec)
    fbase = random.Random(f"{tag}-filler")
    filler_body, _ = _fit(client, lambda k: _registry_text(rng_copy(fbase), k), filler_target - 24)
    filler_tokens = client.count_tokens(f"[filler {tag} 0 {uuid.uuid4().hex}]\n" + filler_body)
    fillers = math.ceil(math.ceil(spec.pool_cycles * pool_tokens) / filler_tokens)
    _check_count(fillers, filler_tokens, pool_tokens, spec)

    def ask(q: str, salt: str | None = None) -> str:
        extra: dict[str, Any] = {"ignore_eos": True}
        if salt is not None:
            extra["cache_salt"] = salt
        return str(client.complete(prompt + q, max_tokens=spec.answer_tokens, **extra)["text"])

    # 1. cache the prompt
    for q in questions:
        ask(q)

    # 2. cycle the pool around it; the unique leading tag means no filler shares a block with another
    def filler(i: int) -> None:
        client.complete(f"[filler {tag} {i} {uuid.uuid4().hex}]\n" + filler_body, max_tokens=1)

    width = max(1, min(4, blocks // max(1, 2 * math.ceil(filler_tokens / block))))
    done = 0
    with ThreadPoolExecutor(max_workers=width) as pool:
        while done < fillers:
            batch = list(range(done, min(fillers, done + width)))
            list(pool.map(filler, batch))
            done += len(batch)
            ask(questions[done % len(questions)])  # keep the prompt hot, as a system prompt is
    # 3. compare cached against salted (fresh blocks)
    mismatches: list[dict[str, str]] = []
    _, h0 = prefix_hits(client.metrics())
    cached = [ask(q) for q in questions]
    _, h1 = prefix_hits(client.metrics())
    for i, q in enumerate(questions):
        fresh = ask(q, salt=f"vf-{tag}-{i}-{uuid.uuid4().hex[:12]}")
        if cached[i] != fresh:
            mismatches.append({"question": q.strip(), "cached": cached[i], "salted": fresh})
    return IntegrityResult(
        num_gpu_blocks=blocks,
        block_size=block,
        pool_tokens=pool_tokens,
        prompt_tokens=prompt_tokens,
        filler_tokens=filler_tokens,
        fillers=fillers,
        filler_tokens_total=fillers * filler_tokens,
        pool_cycles=round(fillers * filler_tokens / pool_tokens, 2),
        questions=len(questions),
        hit_tokens_during_compare=h1 - h0,
        mismatches=mismatches,
    )
