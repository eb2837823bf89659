"""Load generator: streamed completions with a fixed output length at a given concurrency.

A level fails on what a user would see: a request whose stream broke off (no ``data: [DONE]``, no
``finish_reason``, no usage chunk), an HTTP error (before or after the 200 headers: vLLM sends an
error event in the stream), a finish other than ``length`` (the requests use ``ignore_eos`` and a fixed
``max_tokens``), an empty or short completion. Each problem names the request (its prompt's tag).

The figures are those of vLLM's serving benchmark (vllm/benchmarks/serve.py ``calculate_metrics``):
per request TTFT (first chunk with choices), latency (last chunk with choices) and TPOT =
(latency - TTFT) / (output tokens - 1) for requests with more than one output token; the median and
percentiles over requests, percentiles interpolated linearly as numpy's ``percentile`` does.
"""

from __future__ import annotations

import math
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
    """The q-quantile (0..1) with linear interpolation between ranks, as numpy.percentile's default."""
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def request_problem(r: StreamResult, output_tokens: int) -> str | None:
    """What a user would see wrong with one request of a fixed-length load, or None."""
    if not r.ok:
        return f"request {r.name}: {r.error}"
    if r.output_tokens == 0 or not r.text:
        return (
            f"request {r.name}: empty completion ({r.output_tokens} tokens, text {r.text!r}, "
            f"finish_reason {r.finish_reason})"
        )
    if r.output_tokens < output_tokens:
        return (
            f"request {r.name}: short completion, {r.output_tokens} of {output_tokens} tokens "
            f"(finish_reason {r.finish_reason})"
        )
    if r.finish_reason != "length":
        return (
            f"request {r.name}: finish_reason {r.finish_reason!r}, expected 'length' "
            f"(ignore_eos and max_tokens {output_tokens})"
        )
    return None


@dataclass
class LevelResult:
    concurrency: int
    requests: int
    output_tokens: int
    completed: int
    empty: int
    short: int
    errors: list[str]
    problems: list[str]
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
    tags = [f"{run_tag}-c{concurrency}-r{i}" for i in range(requests)]
    prompts = [make_prompt(tag, prompt_tokens, seed=i) for i, tag in enumerate(tags)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results: list[StreamResult] = list(
            pool.map(lambda tag, p: stream_completion(client, p, output_tokens, name=tag), tags, prompts)
        )
    wall = time.perf_counter() - t0
    return summarize(results, concurrency, output_tokens, wall)


def summarize(results: list[StreamResult], concurrency: int, output_tokens: int, wall: float) -> LevelResult:
    """The level's figures (over the requests that ran to their end) and every request's problem."""
    ok = [r for r in results if r.ok]
    errors = [f"request {r.name}: {r.error}" for r in results if not r.ok]
    problems = [p for r in results if (p := request_problem(r, output_tokens)) is not None]
    empty = sum(1 for r in ok if r.output_tokens == 0 or not r.text)
    short = sum(1 for r in ok if r.text and 0 < r.output_tokens < output_tokens)
    total_out = sum(r.output_tokens for r in ok)
    ttfts = [r.ttft_s * 1000 for r in ok if r.ttft_s is not None]
    tpots = [t * 1000 for r in ok if (t := r.tpot_s) is not None]
    lats = [r.latency_s * 1000 for r in ok]
    return LevelResult(
        concurrency=concurrency,
        requests=len(results),
        output_tokens=output_tokens,
        completed=len(ok),
        empty=empty,
        short=short,
        errors=errors,
        problems=problems,
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
