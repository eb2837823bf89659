"""The prefix-cache hit check against a live server, and the prompts the prefix-cache probes build: a
long registry-style text of random entries, fitted to a token count (the integrity probe, seed 003, is
vfleet.verify.probe.integrity; its rule is vfleet.verify.probe.integrity_rule)."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import Any

from vfleet.verify.client import Client
from vfleet.verify.metrics import prefix_hits

NAMES = tuple(
    "".join("atlas boreal cobalt dune ember fjord garnet harbor iris jade kestrel lumen marble nova onyx ").split()
)


def registry_text(rng: random.Random, entries: int) -> str:
    lines = [f"Registry {uuid.UUID(int=rng.getrandbits(128))}. Each entry: id, owner, region, value."]
    for i in range(entries):
        lines.append(
            f"entry {i:04d}: owner={rng.choice(NAMES)}-{rng.randrange(1000)} "
            f"region={rng.choice(NAMES)} value={rng.randrange(100000)}"
        )
    return "\n".join(lines)


def fit_tokens(client: Client, make: Any, target_tokens: int, lo: int = 1, hi: int = 4096) -> tuple[str, int]:
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
    prompt, n = fit_tokens(client, lambda k: f"[{tag}]\n" + registry_text(rng_copy(rng), k), 3 * block + 16)
    client.complete(prompt, max_tokens=1)
    q0, h0 = prefix_hits(client.metrics())
    client.complete(prompt, max_tokens=1)
    q1, h1 = prefix_hits(client.metrics())
    return PrefixHitResult(prompt_tokens=n, block_size=block, hit_tokens_delta=h1 - h0, query_tokens_delta=q1 - q0)


def rng_copy(rng: random.Random) -> random.Random:
    r = random.Random()
    r.setstate(rng.getstate())
    return r
