"""vLLM's /metrics (Prometheus text), read with prometheus_client's parser, and the questions
boot-verify asks of it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition. Text that is not one is an error (a gate that
    cannot read /metrics must not read it as "no samples")."""
    try:
        return [
            Sample(s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
    except ValueError as exc:
        raise ValueError(f"/metrics is not Prometheus text ({exc}); its start: {text[:200]!r}") from exc


class Metrics:
    """One /metrics snapshot."""

    def __init__(self, text: str) -> None:
        self.samples = parse(text)

    def total(self, name: str, **labels: str) -> float:
        """Sum of every sample of ``name`` whose labels include ``labels`` (0 when absent)."""
        return sum(
            s.value for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def has(self, name: str) -> bool:
        return any(s.name == name for s in self.samples)

    def by_label(self, name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for s in self.samples:
            if s.name == name and label in s.labels:
                out[s.labels[label]] = out.get(s.labels[label], 0.0) + s.value
        return out

    def info(self, name: str) -> dict[str, str]:
        """Labels of an info-style metric such as vllm:cache_config_info."""
        for s in self.samples:
            if s.name == name:
                return dict(s.labels)
        return {}

    def cache_pool(self) -> tuple[int, int]:
        """(num_gpu_blocks, block_size) from vllm:cache_config_info."""
        info = self.info("vllm:cache_config_info")
        try:
            blocks = int(float(info["num_gpu_blocks"]))
            size = int(float(info["block_size"]))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"vllm:cache_config_info lacks num_gpu_blocks/block_size (labels: {info})") from exc
        if blocks <= 0 or size <= 0 or math.isnan(blocks):
            raise ValueError(f"vllm:cache_config_info has no usable pool (labels: {info})")
        return blocks, size


def prefix_hits(m: Metrics) -> tuple[float, float]:
    """(queries, hits) of the prefix cache, in tokens."""
    return m.total("vllm:prefix_cache_queries_total"), m.total("vllm:prefix_cache_hits_total")


def finishes(m: Metrics) -> dict[str, float]:
    """Finished requests by reason (stop, length, abort, error, ...)."""
    return m.by_label("vllm:request_success_total", "finished_reason")


def unexpected_finishes(now: Metrics, before: Metrics | None = None) -> str | None:
    """None when there is no error and no abort finish; else what was seen (expected none: boot-verify
    runs before the server takes traffic and its own requests all run to their stop or length limit).
    A client that hangs up is not counted here by vLLM 0.30 (the front end drops the request without a
    finish record), so an abort finish comes from the engine itself."""
    f = finishes(now)
    b = finishes(before) if before is not None else {}
    errors, aborts = f.get("error", 0.0), f.get("abort", 0.0)
    if errors == 0 and aborts == 0:
        return None
    return (
        f"expected no error and no abort finishes (the suite causes none); saw {errors:.0f} error and "
        f"{aborts:.0f} abort finishes ({b.get('error', 0.0):.0f} and {b.get('abort', 0.0):.0f} before the "
        f"suite); all finishes: {f}"
    )
