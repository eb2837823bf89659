"""Load generator: streamed completions with a fixed output length at a given concurrency."""

from __future__ import annotations

import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from vfleet.verify.client import Client, StreamResult, stream_completion

WORDS = tuple(
    "".join(
        "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar "
        "papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu river mountain city "
        "number value "
    ).split()
)


def make_prompt(tag: str, approx_tokens: int, seed: int) -> str:
    """A prompt of roughly ``approx_tokens`` tokens with a unique leading tag (so no prefix is shared)."""
    rng = random.Random(seed)
    words = [rng.choice(WORDS) for _ in range(max(1, approx_tokens))]
    return f"[{tag}] " + " ".join(words)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


@dataclass
class LevelResult:
    concurrency: int
    requests: int
    output_tokens: int
    completed: int
    empty: int
    short: int
    errors: list[str]
    wall_s: float
    out_tok_per_s: float
    ttft_p50_ms: float | None
    ttft_p90_ms: float | None
    tpot_p50_ms: float | None
    tpot_p90_ms: float | None
    latency_p50_ms: float | None
    latency_p90_ms: float | None
    latencies_ms: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_level(
    client: Client,
    concurrency: int,
    requests: int,
    prompt_tokens: int,
    output_tokens: int,
    run_tag: str,
) -> LevelResult:
    prompts = [make_prompt(f"{run_tag}-c{concurrency}-r{i}", prompt_tokens, seed=i) for i in range(requests)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results: list[StreamResult] = list(pool.map(lambda p: stream_completion(client, p, output_tokens), prompts))
    wall = time.perf_counter() - t0
    ok = [r for r in results if r.ok]
    errors = [r.error for r in results if not r.ok]
    empty = sum(1 for r in ok if not r.text)
    short = sum(1 for r in ok if r.text and r.output_tokens and r.output_tokens < output_tokens)
    total_out = sum(r.output_tokens for r in ok)
    ttfts = [r.ttft_s * 1000 for r in ok if r.ttft_s is not None]
    tpots = [t * 1000 for r in ok if (t := r.tpot_s) is not None]
    lats = [r.latency_s * 1000 for r in ok]
    return LevelResult(
        concurrency=concurrency,
        requests=requests,
        output_tokens=output_tokens,
        completed=len(ok),
        empty=empty,
        short=short,
        errors=errors,
        wall_s=wall,
        out_tok_per_s=total_out / wall if wall > 0 else 0.0,
        ttft_p50_ms=statistics.median(ttfts) if ttfts else None,
        ttft_p90_ms=_pct(ttfts, 0.9),
        tpot_p50_ms=statistics.median(tpots) if tpots else None,
        tpot_p90_ms=_pct(tpots, 0.9),
        latency_p50_ms=statistics.median(lats) if lats else None,
        latency_p90_ms=_pct(lats, 0.9),
        latencies_ms=lats,
    )
