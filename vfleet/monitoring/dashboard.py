"""The Grafana dashboard of the vLLM fleet (vllm-dashboard.json). Part of vfleet.monitoring (see its
docstring).
"""

from __future__ import annotations

import json
from typing import Any

from vfleet.monitoring.rules import (
    DEFAULT_BOUNDS,
    E2E,
    FINISHED,
    GENERATED,
    GENERATION_TOKENS,
    ITL,
    JOB,
    KV_USAGE,
    PC_HITS,
    PC_QUERIES,
    PREEMPTIONS,
    PROMPT_TOKENS,
    QUEUE_TIME,
    RUNNING,
    TPOT,
    TTFT,
    UP,
    WAITING,
    Bounds,
    Fleet,
    pct,
)


def _panel(
    pid: int,
    title: str,
    targets: list[tuple[str, str]],
    x: int,
    y: int,
    unit: str = "short",
    threshold: float | None = None,
    description: str = "",
) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
    if threshold is not None:
        steps.append({"color": "red", "value": threshold})
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "custom": {"thresholdsStyle": {"mode": "line" if threshold is not None else "off"}},
                "thresholds": {"mode": "absolute", "steps": steps},
            },
            "overrides": [],
        },
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def render_dashboard(fleet: Fleet, b: Bounds = DEFAULT_BOUNDS) -> str:
    sel = 'job="' + JOB + '", instance=~"$instance", model_name=~"$model_name"'
    by = "instance, model_name"
    leg = "{{model_name}} {{instance}}"

    def q(metric: str, quantile: float) -> tuple[str, str]:
        return (
            f"histogram_quantile({quantile:g}, sum by ({by}, le) (rate({metric}_bucket{{{sel}}}[$__rate_interval])))",
            f"p{quantile * 100:g} {leg}",
        )

    panels: list[tuple[str, list[tuple[str, str]], str, float | None, str]] = [
        (
            "Targets up (VllmEngineDown)",
            [(f'{UP}{{job="{JOB}", instance=~"$instance"}}', "{{instance}}")],
            "short",
            None,
            "1 = scraped, 0 = down",
        ),
        ("Requests running", [(f"sum by ({by}) ({RUNNING}{{{sel}}})", leg)], "short", None, ""),
        (
            "Requests waiting (VllmQueueGrowing)",
            [(f"sum by ({by}) ({WAITING}{{{sel}}})", leg)],
            "short",
            None,
            "",
        ),
        (
            "KV-cache usage (VllmKvCacheNearlyFull)",
            [(f"max by ({by}) ({KV_USAGE}{{{sel}}})", leg)],
            "percentunit",
            b.kv_usage_max,
            "",
        ),
        (
            "Time to first token (VllmTtftHigh)",
            [q(TTFT, 0.5), q(TTFT, b.ttft_quantile), q(TTFT, 0.99)],
            "s",
            b.ttft_max_s,
            "",
        ),
        (
            "Time per output token (VllmTpotHigh)",
            [q(TPOT, 0.5), q(TPOT, b.tpot_quantile), q(ITL, 0.9)],
            "s",
            b.tpot_max_s,
            f"{TPOT} per request; p90 of {ITL} per token",
        ),
        (
            "Finished requests by reason (VllmRequestErrors, VllmRequestAborts)",
            [
                (
                    f"sum by ({by}, finished_reason) (rate({FINISHED}{{{sel}}}[$__rate_interval]))",
                    "{{finished_reason}} " + leg,
                )
            ],
            "reqps",
            None,
            "",
        ),
        (
            "Error and abort share of finished requests",
            [
                (
                    f'sum by ({by}) (rate({FINISHED}{{{sel}, finished_reason="{r}"}}[$__rate_interval])) / '
                    f"sum by ({by}) (rate({FINISHED}{{{sel}}}[$__rate_interval]))",
                    f"{r} {leg}",
                )
                for r in ("error", "abort")
            ],
            "percentunit",
            b.error_ratio_max,
            f"alert bounds: error {pct(b.error_ratio_max)}, abort {pct(b.abort_ratio_max)}",
        ),
        (
            "Prefix-cache hit rate (VllmPrefixCacheHitRateFalling)",
            [
                (
                    f"sum by ({by}) (rate({PC_HITS}{{{sel}}}[$__rate_interval])) / "
                    f"sum by ({by}) (rate({PC_QUERIES}{{{sel}}}[$__rate_interval]))",
                    leg,
                )
            ],
            "percentunit",
            None,
            "hit / queried tokens; alerting only for " + ", ".join(fleet.prefix_cached),
        ),
        (
            "Tokens per second",
            [
                (f"sum by ({by}) (rate({PROMPT_TOKENS}{{{sel}}}[$__rate_interval]))", "prompt " + leg),
                (f"sum by ({by}) (rate({GENERATION_TOKENS}{{{sel}}}[$__rate_interval]))", "generation " + leg),
            ],
            "short",
            None,
            "",
        ),
        (
            "Preemptions per second",
            [(f"sum by ({by}) (rate({PREEMPTIONS}{{{sel}}}[$__rate_interval]))", leg)],
            "short",
            None,
            "",
        ),
        (
            "Queue time and end-to-end latency",
            [q(QUEUE_TIME, 0.9), q(E2E, 0.9)],
            "s",
            None,
            f"p90 of {QUEUE_TIME} and {E2E}",
        ),
    ]
    built = [
        _panel(i + 1, title, targets, 12 * (i % 2), 8 * (i // 2), unit, thr, desc)
        for i, (title, targets, unit, thr, desc) in enumerate(panels)
    ]

    def var(name: str, label: str) -> dict[str, Any]:
        return {
            "name": name,
            "label": label,
            "type": "query",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": f'label_values({RUNNING}{{job="{JOB}"}}, {name})', "refId": name},
            "definition": f'label_values({RUNNING}{{job="{JOB}"}}, {name})',
            "includeAll": True,
            "multi": True,
            "current": {"text": "All", "value": "$__all"},
            "refresh": 2,
            "sort": 1,
        }

    dashboard = {
        "title": "vLLM fleet (vfleet)",
        "uid": "vfleet-vllm",
        "description": f"{GENERATED} Served models: {', '.join(fleet.models)}.",
        "tags": ["vllm", "vfleet"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "timezone": "utc",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                },
                var("instance", "server"),
                var("model_name", "model"),
            ]
        },
        "annotations": {"list": []},
        "panels": built,
    }
    return json.dumps(dashboard, indent=2) + "\n"
