"""Alert rules and dashboard (monitoring/): promtool checks and unit-tests the rules, a broken threshold
fails those unit tests, every metric name used is one a real vLLM serves, and the committed files are
what `vfleet alerts` generates from vfleet/monitoring/ and the serve profiles."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, ConfigTree

from vfleet import host, monitoring
from vfleet.monitoring import DEFAULT_BOUNDS, Fleet, registry, rules
from vfleet.patchset.fetch import fetch_base
from vfleet.pins import load as load_pins

MON = REPO / "monitoring"
RULES = MON / monitoring.RULES_FILE
TESTS = MON / monitoring.TESTS_FILE
DASHBOARD = MON / monitoring.DASHBOARD_FILE
RECORDED = monitoring.recorded_metrics_path(REPO)
# The same server's other snapshot (eager mode; tests/fixtures/h200-vllm-0.26.0/README.md).
OTHER_SNAPSHOT = REPO / "tests" / "fixtures" / "h200-vllm-0.26.0" / "metrics-eager.txt"
# Prometheus' own series that the rules and the dashboard may use besides vLLM's.
PROMETHEUS_SERIES = {"up"}


def _rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    return rules


def _recorded_names() -> set[str]:
    names = {s.name for s in monitoring.load_recorded(RECORDED).samples}
    other = {s.name for s in monitoring.load_recorded(OTHER_SNAPSHOT).samples}
    vllm_names = {n for n in names if n.startswith("vllm:")}
    assert vllm_names and vllm_names == {n for n in other if n.startswith("vllm:")}, OTHER_SNAPSHOT
    return names


def _series_names(expr: str) -> set[str]:
    """Every series a PromQL expression selects (a name before `{`), and every vllm: token in it."""
    return set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{", expr)) | set(re.findall(r"vllm:[a-zA-Z0-9_:]*", expr))


def _unknown(exprs: list[str], recorded: set[str]) -> set[str]:
    return {n for e in exprs for n in _series_names(e)} - recorded - PROMETHEUS_SERIES


def _dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dash["templating"]["list"] if v.get("type") == "query"]
    return exprs


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return monitoring.promtool(*args, cwd=cwd)
    except monitoring.PromtoolError as exc:
        pytest.fail(str(exc))


# -- promtool ------------------------------------------------------------------------------------


def test_promtool_check_rules() -> None:
    proc = _promtool("check", "rules", RULES.name, cwd=MON)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in proc.stdout, proc.stdout


def test_promtool_check_rules_rejects_a_broken_rule(tmp_path: Path) -> None:
    """The check above can fail: a rule whose expression does not parse is refused."""
    doc = yaml.safe_load(RULES.read_text())
    doc["groups"][0]["rules"][1]["expr"] = doc["groups"][0]["rules"][1]["expr"].replace(")", "", 1)
    (tmp_path / RULES.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = _promtool("check", "rules", RULES.name, cwd=tmp_path)
    assert proc.returncode != 0
    assert "parse error" in proc.stdout + proc.stderr


def test_promtool_test_rules() -> None:
    proc = _promtool("test", "rules", TESTS.name, cwd=MON)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_alert_has_a_firing_and_a_silent_test() -> None:
    tests = yaml.safe_load(TESTS.read_text())["tests"]
    fires: set[str] = set()
    silent: set[str] = set()
    for group in tests:
        for case in group["alert_rule_test"]:
            (fires if case["exp_alerts"] else silent).add(case["alertname"])
    names = {r["alert"] for r in _rules()}
    assert fires == names and silent == names


def test_test_series_are_shaped_like_the_recorded_metrics() -> None:
    """Labels and histogram buckets of the test series are the recorded server's."""
    recorded = monitoring.load_recorded(RECORDED)
    rec_labels = set(recorded.labels())  # engine, model_name
    tests = yaml.safe_load(TESTS.read_text())["tests"]
    seen: dict[str, set[str]] = {}
    for group in tests:
        for s in group["input_series"]:
            name, labels = s["series"].split("{", 1)
            keys = set(re.findall(r'(\w+)="', labels))
            if name.startswith("vllm:"):
                assert rec_labels <= keys, s["series"]
            le = re.search(r'le="([^"]+)"', labels)
            if le:
                seen.setdefault(name, set()).add(le.group(1))
    assert seen, "no histogram series in the tests"
    for name, les in seen.items():
        assert les == {le for le, _ in recorded.buckets(name.removesuffix("_bucket"))}, name


# Thresholds moved so that a fault no longer fires (lax) or a healthy server fires (strict). Only the
# rule's expression and `for` change; the promtool tests must then fail for that alert and no other.
BROKEN: list[tuple[str, str, dict[str, Any]]] = [
    ("VllmEngineDown", "lax", {"engine_down_for": "1h"}),
    ("VllmKvCacheNearlyFull", "lax", {"kv_usage_max": 0.99}),
    ("VllmKvCacheNearlyFull", "strict", {"kv_usage_max": 0.2}),
    ("VllmQueueGrowing", "lax", {"queue_min_waiting": 1000}),
    ("VllmTtftHigh", "lax", {"ttft_max_s": 40.0}),
    ("VllmTtftHigh", "strict", {"ttft_max_s": 0.01}),
    ("VllmTpotHigh", "lax", {"tpot_max_s": 1.0}),
    ("VllmTpotHigh", "strict", {"tpot_max_s": 0.001}),
    ("VllmRequestErrors", "lax", {"error_ratio_max": 0.5}),
    ("VllmRequestErrors", "strict", {"error_ratio_max": -1.0}),
    ("VllmRequestAborts", "lax", {"abort_ratio_max": 0.9}),
    ("VllmRequestAborts", "strict", {"abort_ratio_max": -1.0}),
    ("VllmPrefixCacheHitRateFalling", "lax", {"prefix_fall_to": 0.0}),
    ("VllmPrefixCacheHitRateFalling", "strict", {"prefix_fall_to": 1.5}),
]


def test_every_alert_has_a_broken_threshold_case() -> None:
    assert {a for a, _, _ in BROKEN} == {r["alert"] for r in _rules()}


@pytest.mark.parametrize(("alert", "how", "change"), BROKEN, ids=[f"{a}-{h}" for a, h, _ in BROKEN])
def test_a_broken_threshold_fails_the_rule_tests(tmp_path: Path, alert: str, how: str, change: dict[str, Any]) -> None:
    broken = {a.name: a for a in monitoring.alerts(Fleet.from_profiles(), replace(DEFAULT_BOUNDS, **change))}[alert]
    doc = yaml.safe_load(RULES.read_text())
    rule = next(r for r in doc["groups"][0]["rules"] if r["alert"] == alert)
    assert (rule["expr"], rule["for"]) != (broken.expr, broken.duration)
    rule["expr"], rule["for"] = broken.expr, broken.duration
    (tmp_path / RULES.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    shutil.copy(TESTS, tmp_path / TESTS.name)
    proc = _promtool("test", "rules", TESTS.name, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    failed = set(re.findall(r"alertname: (\w+),", out))
    assert failed == {alert}, out
    if how == "lax":
        assert "got:[]" in out, out  # the fault series no longer fires it
    else:
        assert "exp:[]" in out, out  # the healthy series now fires it


# -- metric names --------------------------------------------------------------------------------


def test_rules_use_only_recorded_metric_names() -> None:
    exprs = [r["expr"] for r in _rules()]
    assert not _unknown(exprs, _recorded_names())
    used = {n for e in exprs for n in _series_names(e)}
    assert {"up", "vllm:kv_cache_usage_perc", "vllm:request_success_total"} <= used


def test_dashboard_uses_only_recorded_metric_names() -> None:
    exprs = _dashboard_exprs()
    recorded = _recorded_names()
    assert len(exprs) >= 12
    assert not _unknown(exprs, recorded)
    # The check can fail: a name vLLM 0.26.0 does not serve (older vLLM's TPOT histogram) is caught.
    wrong = 'histogram_quantile(0.9, rate(vllm:time_per_output_token_seconds_bucket{job="vllm"}[5m]))'
    assert _unknown([wrong], recorded) == {"vllm:time_per_output_token_seconds_bucket"}


# -- every base's metric registry (issue 24) ----------------------------------------------------------

BASES = list(load_pins(REPO / "versions.json").bases)


@pytest.mark.parametrize("base", BASES)
def test_rules_dashboard_and_verify_use_only_names_the_base_declares(base: str) -> None:
    """Every metric the rules, the dashboard and boot-verify read is declared in the base's source (its
    pinned wheel): a base that drops or renames one fails here, naming it."""
    declared = registry.declared(fetch_base(base, say=lambda m: None))
    served = registry.series(declared)
    exprs = [r["expr"] for r in _rules()] + _dashboard_exprs()
    assert not _unknown(exprs, served), base
    # the names vfleet.monitoring.rules and boot-verify's metric reads (vfleet/verify/metrics.py) hold
    names = {
        m for path in [*(REPO / "vfleet").rglob("*.py"), *(REPO / "smoke_tests").rglob("*.py")]
        for m in re.findall(r"[\"'](vllm:[a-z_:]+)[\"']", path.read_text())
    }  # fmt: skip
    assert {"vllm:cache_config_info", rules.TTFT} <= names and len(names) >= 14, names
    assert not names - served - set(declared), (base, names - served - set(declared))
    # The check can fail: older vLLM's TPOT histogram is declared by no base.
    assert _unknown(["rate(vllm:time_per_output_token_seconds_bucket[5m])"], served) == {
        "vllm:time_per_output_token_seconds_bucket"
    }


@pytest.mark.parametrize("base", BASES)
def test_latency_bounds_sit_on_the_default_bucket_edges_of_every_base(base: str) -> None:
    tree = fetch_base(base, say=lambda m: None)
    ttft = registry.default_buckets(tree, "time_to_first_token")
    itl = registry.default_buckets(tree, "inter_token_latency")  # TPOT's histogram uses these edges too
    assert DEFAULT_BOUNDS.ttft_max_s in ttft, (base, ttft)
    assert DEFAULT_BOUNDS.tpot_max_s in itl, (base, itl)


def test_the_registry_reader_finds_each_kind_and_its_series(tmp_path: Path) -> None:
    """`declared` on a small tree: a counter, a gauge, a histogram and an info gauge, as vLLM writes them."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "m.py").write_text(
        "c = self._counter_cls(name=\"vllm:prompt_tokens\", documentation='x')\n"
        'g = self._gauge_cls(name="vllm:num_requests_running")\n'
        'h = self._histogram_cls(name="vllm:time_to_first_token_seconds", buckets=[1.0])\n'
        'name = "vllm:cache_config_info"\n'
        'other = f(name="vllm:not_a_metric")\n'
    )
    found = registry.declared(tmp_path)
    assert found == {
        "vllm:prompt_tokens": "counter",
        "vllm:num_requests_running": "gauge",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:cache_config_info": "gauge",
    }
    assert registry.series(found) == {
        "vllm:prompt_tokens_total",
        "vllm:num_requests_running",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_to_first_token_seconds_sum",
        "vllm:time_to_first_token_seconds_count",
        "vllm:cache_config_info",
    }


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    """promtool parses every dashboard query (as a recording rule, Grafana's variables filled in)."""
    filled = [
        e.replace("$__rate_interval", "5m").replace("$instance", ".*").replace("$model_name", ".*")
        for e in _dashboard_exprs()
        if not e.startswith("label_values(")
    ]
    rules = [{"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(filled)]
    (tmp_path / "dash.yml").write_text(yaml.safe_dump({"groups": [{"name": "dash", "rules": rules}]}))
    proc = _promtool("check", "rules", "dash.yml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dashboard_and_rules_share_thresholds() -> None:
    dash = json.loads(DASHBOARD.read_text())
    lines = {
        p["title"]: p["fieldConfig"]["defaults"]["thresholds"]["steps"][-1]["value"]
        for p in dash["panels"]
        if len(p["fieldConfig"]["defaults"]["thresholds"]["steps"]) > 1
    }
    exprs = {r["alert"]: r["expr"] for r in _rules()}
    for alert in ("VllmKvCacheNearlyFull", "VllmTtftHigh", "VllmTpotHigh"):
        title = next(t for t in lines if f"({alert})" in t)
        assert exprs[alert].rstrip().endswith(f"> {lines[title]:g}"), (alert, lines[title])


# -- generated from one source -------------------------------------------------------------------


def test_committed_files_are_generated() -> None:
    files = monitoring.generate(Fleet.from_profiles(), monitoring.load_recorded(RECORDED))
    for name, text in files.items():
        assert (MON / name).read_text() == text, f"monitoring/{name} is out of date: run `vfleet alerts`"


def test_prefix_cache_alert_follows_the_profiles(config_tree: ConfigTree) -> None:
    """Turning prefix caching off in a profile takes its model out of the prefix-cache alert, so the
    committed rules are then out of date (`vfleet alerts --check` fails)."""
    assert Fleet.from_profiles().prefix_cached == ["glm-5.3-flash", "smollm2-135m", "tiny"]
    rules = RULES.read_text()
    assert 'model_name=~"glm-5\\\\.3-flash|smollm2-135m|tiny"' in rules

    def off(d: dict[str, Any]) -> None:
        d["vllm"]["enable-prefix-caching"] = False

    config_tree.edit("models/glm-5.3-flash/model.yaml", off)
    fleet = Fleet.from_profiles()
    assert fleet.prefix_cached == ["smollm2-135m", "tiny"]
    assert monitoring.render_rules(fleet) != rules
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet", "alerts", "--check"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1 and "out of date" in proc.stderr, proc.stdout + proc.stderr


def test_custom_buckets_off_an_alert_bound_are_refused(config_tree: ConfigTree) -> None:
    """vLLM 0.34's `--custom-histogram-buckets` can move the edges the latency alerts read: a profile
    whose TTFT edges leave out the alert's bound stops `vfleet alerts` and `vfleet check`, naming the
    profile, the family and the fix; edges that keep the bound are accepted."""

    def edges(values: list[float]) -> Any:
        def edit(d: dict[str, Any]) -> None:
            d["vllm"]["custom-histogram-buckets"] = {"time_to_first_token": values}

        return edit

    config_tree.edit("models/glm-5.3-flash/model.yaml", edges([0.5, 1.0, 5.0, 20.0]))
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet", "alerts", "--check"], capture_output=True, text=True, check=False
    )
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "vllm.custom-histogram-buckets.time_to_first_token has no edge at 10 s" in proc.stderr, proc.stderr
    assert "glm-5.3-flash/" in proc.stderr and "add 10 to its edges" in proc.stderr
    # `vfleet check` refuses the profile too, before any rollout, on every base
    proc = subprocess.run([sys.executable, "-m", "vfleet", "check"], capture_output=True, text=True, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL glm-5.3-flash/" in proc.stderr, proc.stderr
    assert "  vllm.custom-histogram-buckets.time_to_first_token has no edge at 10 s" in proc.stderr, proc.stderr
    config_tree.edit("models/glm-5.3-flash/model.yaml", edges([0.5, 1.0, 5.0, 10.0, 20.0]))
    assert Fleet.from_profiles().prefix_cached == ["glm-5.3-flash", "smollm2-135m", "tiny"]
    proc = subprocess.run([sys.executable, "-m", "vfleet", "check"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the command line's form, a JSON object, is read too; text that is neither is refused, not skipped
    assert rules.bucket_edge_problems("p", {"custom-histogram-buckets": '{"time_to_first_token": [1, 10]}'}) == []
    assert (
        "has no edge at 10 s"
        in rules.bucket_edge_problems("p", {"custom-histogram-buckets": '{"time_to_first_token": [1, 20]}'})[0]
    )
    assert "is not a mapping" in rules.bucket_edge_problems("p", {"custom-histogram-buckets": "ttft=1,10"})[0]


def test_cli_check_passes_on_the_committed_files() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet", "alerts", "--check"], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_latency_bounds_sit_on_bucket_edges() -> None:
    recorded = monitoring.load_recorded(RECORDED)
    for hist, bound in ((rules.TTFT, DEFAULT_BOUNDS.ttft_max_s), (rules.TPOT, DEFAULT_BOUNDS.tpot_max_s)):
        assert bound in [float(le) for le, _ in recorded.buckets(hist)], (hist, bound)


def test_missing_promtool_without_root_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # promtool is found and installed through vfleet.host, as every package vfleet needs
    monkeypatch.setattr(host.shutil, "which", lambda _name: None)
    monkeypatch.setattr(host.os, "geteuid", lambda: 1000)
    with pytest.raises(monitoring.PromtoolError, match="apt-get install -y prometheus"):
        monitoring.ensure_promtool()
