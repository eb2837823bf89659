"""promtool unit tests of the alert rules (vllm-alerts.test.yml): per alert a fault group where it
fires and a healthy group where it stays silent, on series shaped like a recorded vLLM /metrics.
Part of vfleet.monitoring (see its docstring).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfleet.errors import VfleetError
from vfleet.monitoring.rules import (
    DEFAULT_BOUNDS,
    FINISHED,
    GENERATED,
    JOB,
    KV_USAGE,
    PC_HITS,
    PC_QUERIES,
    RULES_FILE,
    RUNNING,
    TPOT,
    TTFT,
    UP,
    WAITING,
    Alert,
    Bounds,
    Fleet,
    alerts,
    to_yaml,
)
from vfleet.verify.metrics import Sample, parse


@dataclass(frozen=True)
class Recorded:
    """The shape of a real /metrics snapshot: the labels of its series, its histograms, its counters."""

    samples: list[Sample]

    def labels(self) -> dict[str, str]:
        """The labels vLLM puts on its per-engine series (engine, model_name), from vllm:num_requests_running."""
        for s in self.samples:
            if s.name == RUNNING:
                return dict(s.labels)
        raise VfleetError(f"the recorded metrics have no {RUNNING} sample")

    def buckets(self, histogram: str) -> list[tuple[str, float]]:
        """(le, cumulative count) of one histogram, in order."""
        rows = [(s.labels["le"], s.value) for s in self.samples if s.name == f"{histogram}_bucket"]
        if not rows:
            raise VfleetError(f"the recorded metrics have no {histogram}_bucket samples")
        return rows

    def total(self, name: str, **labels: str) -> float:
        return sum(
            s.value for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def finish_reasons(self) -> dict[str, float]:
        return {s.labels["finished_reason"]: s.value for s in self.samples if s.name == FINISHED}


def _labels(d: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in d.items()) + "}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(round(x, 6))


def _counter(per_min: float, minutes: int) -> str:
    return f"0+{_num(per_min)}x{minutes}"


def _expand(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)


def _expected(alert: Alert, labels: dict[str, str]) -> dict[str, Any]:
    rule = alert.rule()
    return {
        "exp_labels": {**labels, **rule["labels"]},
        "exp_annotations": {k: _expand(v, labels) for k, v in rule["annotations"].items()},
    }


def _minutes(duration: str) -> int:
    m = re.fullmatch(r"(\d+)([mh])", duration)
    if not m:
        raise VfleetError(f"duration {duration!r}: write minutes or hours, e.g. 10m or 6h")
    return int(m.group(1)) * (60 if m.group(2) == "h" else 1)


def render_tests(fleet: Fleet, recorded: Recorded, bounds: Bounds = DEFAULT_BOUNDS) -> str:
    """promtool `test rules` input: per alert a fault group where it fires and a healthy group where it
    stays silent, on series shaped like the recorded metrics."""
    by_name = {a.name: a for a in alerts(fleet, bounds)}
    rec = recorded.labels()
    model = fleet.prefix_cached[0] if fleet.prefix_cached else fleet.models[0]
    target = {"job": JOB, "instance": "node1:8000"}
    series_labels = {**target, **rec, "model_name": model}
    alert_labels = {**target, "model_name": model}
    groups: list[dict[str, Any]] = []

    def group(alert: str, series: list[tuple[str, str]], at: int, fires: bool, labels: dict[str, str]) -> None:
        exp = [_expected(by_name[alert], labels)] if fires else []
        groups.append(
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series],
                "alert_rule_test": [{"eval_time": f"{at}m", "alertname": alert, "exp_alerts": exp}],
            }
        )

    # Engine down: the target stops answering scrapes.
    up = f"{UP}{_labels(target)}"
    long = 2 * _minutes(bounds.engine_down_for) + 10
    group("VllmEngineDown", [(up, f"1x10 0x{long}")], 10 + long, True, target)
    group("VllmEngineDown", [(up, f"1x{10 + long}")], 10 + long, False, target)

    # KV cache: the fault sits just above the bound, the healthy server well below it.
    kv = f"{KV_USAGE}{_labels(series_labels)}"
    n = _minutes(bounds.kv_usage_for) + 10
    hi = bounds.kv_usage_max + (1 - bounds.kv_usage_max) / 2
    group("VllmKvCacheNearlyFull", [(kv, f"0.3x5 {hi:g}x{n}")], 5 + n, True, alert_labels)
    group("VllmKvCacheNearlyFull", [(kv, f"0.3+0.01x{n + 5}")], 5 + n, False, alert_labels)

    # Queue: a backlog that grows by two requests a minute, against bursts that drain.
    wq = f"{WAITING}{_labels(series_labels)}"
    n = _minutes(bounds.queue_window) + _minutes(bounds.queue_for) + 10
    group("VllmQueueGrowing", [(wq, f"0x5 1+2x{n}")], 5 + n, True, alert_labels)
    bursts = " ".join(str(v) for v in ([0, 3, 0, 1, 0, 0, 2, 0] * (n // 8 + 2))[: n + 6])
    group("VllmQueueGrowing", [(wq, bursts)], 5 + n, False, alert_labels)

    # Latency histograms: healthy = the recorded distribution (per minute, as many requests as it
    # counted); fault = the same number of requests, every one in the bucket just above the bound.
    n = _minutes(bounds.latency_window) + _minutes(bounds.latency_for) + 10
    for alert, hist, bound in (
        ("VllmTtftHigh", TTFT, bounds.ttft_max_s),
        ("VllmTpotHigh", TPOT, bounds.tpot_max_s),
    ):
        rows = recorded.buckets(hist)
        count = rows[-1][1]
        edges = [float(le) for le, _ in rows]
        if bound not in edges:
            raise VfleetError(
                f"{alert}: bound {bound:g} s is not a bucket edge of {hist} ({', '.join(r[0] for r in rows)})"
            )
        healthy = []
        fault = []
        for le, cum in rows:
            name = f"{hist}_bucket{_labels({**series_labels, 'le': le})}"
            healthy.append((name, _counter(cum, n)))
            fault.append((name, _counter(count if float(le) > bound else 0, n)))
        group(alert, fault, n, True, alert_labels)
        group(alert, healthy, n, False, alert_labels)

    # Finish reasons: healthy = the recorded mix per minute; fault = that mix plus error or abort
    # finishes at twice the bound's share.
    mix = recorded.finish_reasons()
    total = sum(mix.values())
    for alert, reason, bound, window, duration in (
        ("VllmRequestErrors", "error", bounds.error_ratio_max, bounds.error_window, bounds.error_for),
        ("VllmRequestAborts", "abort", bounds.abort_ratio_max, bounds.abort_window, bounds.abort_for),
    ):
        n = _minutes(window) + _minutes(duration) + 10
        extra = total * 2 * bound / (1 - 2 * bound)
        fin = [(f"{FINISHED}{_labels({**series_labels, 'finished_reason': r})}", v) for r, v in mix.items()]
        group(
            alert,
            [(s, _counter(v + (extra if r == reason else 0), n)) for (s, v), r in zip(fin, mix, strict=True)],
            n,
            True,
            alert_labels,
        )
        group(alert, [(s, _counter(v, n)) for s, v in fin], n, False, alert_labels)

    # Prefix cache: the recorded hit ratio for the whole baseline, then hits stop. A model served
    # without prefix caching shows the same series and stays silent.
    if fleet.prefix_cached:
        q = recorded.total(PC_QUERIES)
        h = recorded.total(PC_HITS)
        base = _minutes(bounds.prefix_baseline) + _minutes(bounds.prefix_window)
        tail = _minutes(bounds.prefix_window) + _minutes(bounds.prefix_for) + 10

        def prefix(labels: dict[str, str], falls: bool) -> list[tuple[str, str]]:
            hits = f"{_counter(h, base)} {_num(h * base)}+0x{tail}" if falls else _counter(h, base + tail + 1)
            return [
                (f"{PC_QUERIES}{_labels(labels)}", _counter(q, base + tail + 1)),
                (f"{PC_HITS}{_labels(labels)}", hits),
            ]

        alert = "VllmPrefixCacheHitRateFalling"
        group(alert, prefix(series_labels, True), base + tail, True, alert_labels)
        group(alert, prefix(series_labels, False), base + tail, False, alert_labels)
        uncached = [m for m in fleet.models if m not in fleet.prefix_cached]
        if uncached:
            other = {**series_labels, "model_name": uncached[0]}
            group(alert, prefix(other, True), base + tail, False, alert_labels)

    doc = {"rule_files": [RULES_FILE], "evaluation_interval": "1m", "tests": groups}
    return to_yaml(
        "promtool unit tests of vllm-alerts.yml: `promtool test rules vllm-alerts.test.yml`.\n"
        "Series are shaped like a real vLLM /metrics (tests/fixtures/metrics/h200-graph.txt).\n" + GENERATED,
        doc,
    )


def recorded_metrics_path(root: Path) -> Path:
    return root / "tests" / "fixtures" / "metrics" / "h200-graph.txt"


def load_recorded(path: Path) -> Recorded:
    try:
        return Recorded(parse(path.read_text()))
    except OSError as exc:
        raise VfleetError(f"{path}: cannot read the recorded vLLM metrics ({exc.strerror})") from exc
