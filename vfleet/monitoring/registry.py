"""The metrics a vLLM base serves, read from its source tree: the registry the alert rules, the dashboard
and boot-verify's metric reads are checked against, for every base of versions.json (issue 24).

vLLM declares each metric once, as a prometheus_client Counter, Gauge or Histogram with a literal
`name="vllm:..."` (v1/metrics/loggers.py and a few modules beside it; the info gauges assign the name
first). `declared(tree)` reads those declarations with Python's parser, without importing vLLM (a base's
torch need not be installed here), and `series(...)` turns them into the names /metrics serves:
`_total` for a counter, `_bucket`, `_sum` and `_count` for a histogram. `default_buckets(tree, family)`
runs the tree's own v1/metrics/buckets.py (standard library only) for a histogram family's default
edges, which the latency bounds must sit on (a profile's `--custom-histogram-buckets` can move them).
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
from pathlib import Path

KINDS = ("counter", "gauge", "histogram")
_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
_counter = itertools.count()


def _kind(func: ast.expr) -> str | None:
    called = ast.unparse(func).lower()
    return next((k for k in KINDS if k in called), None)


def declared(tree: Path) -> dict[str, str]:
    """Every `vllm:` metric the tree declares, with its kind (the tree holds `vllm/`)."""
    found: dict[str, str] = {}
    for path in sorted((tree / "vllm").rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if '"vllm:' not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    value = kw.value
                    if kw.arg == "name" and isinstance(value, ast.Constant) and str(value.value).startswith("vllm:"):
                        kind = _kind(node.func)
                        if kind:
                            found[str(value.value)] = kind
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                const = node.value.value
                named = any(isinstance(t, ast.Name) and t.id == "name" for t in node.targets)
                if named and isinstance(const, str) and const.startswith("vllm:") and const.endswith("_info"):
                    found.setdefault(const, "gauge")  # log_metrics_info: an info gauge, named first
    return found


def series(metrics: dict[str, str]) -> set[str]:
    """The series names /metrics serves for these declarations."""
    out: set[str] = set()
    for name, kind in metrics.items():
        stem = name.removesuffix("_total") if kind == "counter" else name
        out |= {stem + suffix for suffix in _SUFFIXES[kind]}
    return out


def default_buckets(tree: Path, family: str) -> list[float]:
    """The default bucket edges of a histogram family, from the tree's v1/metrics/buckets.py."""
    path = tree / "vllm" / "v1" / "metrics" / "buckets.py"
    spec = importlib.util.spec_from_file_location(f"_vfleet_buckets_{next(_counter)}", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [float(x) for x in module.histogram_buckets(family)]
