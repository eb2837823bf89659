"""Prometheus alert rules, their promtool unit tests and a Grafana dashboard for vLLM's /metrics.

Everything is generated here, from one place, and `vfleet alerts` writes it to monitoring/:

- the metric names: those a real vLLM serves (recorded from vLLM 0.26.0 on an H200,
  tests/fixtures/metrics/h200-graph.txt; tests/integration/judge/test_alerts.py checks every name used against it);
- the serve profiles (serve_configs/): which served model names exist, and which serve with prefix
  caching (``verify.prefix_cache``): the prefix-cache alert watches only those;
- the bounds in :data:`DEFAULT_BOUNDS`. The profiles' ``verify:`` sections define no latency, queue or
  KV-usage bound, so these are chosen defaults, named once here and documented in docs/monitoring.md.

The promtool tests feed series shaped like the recorded H200 /metrics (its labels, its histogram
buckets, its TTFT/TPOT distributions and finish reasons, its prefix-cache hit ratio) and check that
each alert fires on its fault series and stays silent on a healthy one.

The parts: rules (names, bounds, the rules), promtests (the promtool unit tests, the recorded
/metrics), dashboard (Grafana), runner (promtool itself). What `vfleet alerts` and the tests use is
importable from here; the metric names are vfleet.monitoring.rules's.
"""

from __future__ import annotations

from vfleet.monitoring.dashboard import render_dashboard
from vfleet.monitoring.promtests import Recorded, load_recorded, recorded_metrics_path, render_tests
from vfleet.monitoring.rules import (
    DASHBOARD_FILE,
    DEFAULT_BOUNDS,
    RULES_FILE,
    TESTS_FILE,
    Alert,
    Bounds,
    Fleet,
    alerts,
    render_rules,
)
from vfleet.monitoring.runner import PromtoolError, ensure_promtool, promtool

__all__ = [
    "DASHBOARD_FILE",
    "DEFAULT_BOUNDS",
    "RULES_FILE",
    "TESTS_FILE",
    "Alert",
    "Bounds",
    "Fleet",
    "PromtoolError",
    "Recorded",
    "alerts",
    "ensure_promtool",
    "generate",
    "load_recorded",
    "promtool",
    "recorded_metrics_path",
    "render_dashboard",
    "render_rules",
    "render_tests",
]


def generate(fleet: Fleet, recorded: Recorded, bounds: Bounds = DEFAULT_BOUNDS) -> dict[str, str]:
    """File name -> text of every generated monitoring file."""
    return {
        RULES_FILE: render_rules(fleet, bounds),
        TESTS_FILE: render_tests(fleet, recorded, bounds),
        DASHBOARD_FILE: render_dashboard(fleet, bounds),
    }
