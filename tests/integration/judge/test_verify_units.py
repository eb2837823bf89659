"""Boot-verify parts that need no server: /metrics parsing (a real H200 /metrics), the report
writer, promotion rules, and the tiny model build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.reports import load_row, trusted, write_report

from vfleet import promotion, tinymodel
from vfleet.errors import VfleetError
from vfleet.profiles import IntegritySpec
from vfleet.verify import apikey, runner
from vfleet.verify.metrics import Metrics, finishes, prefix_hits, unexpected_finishes
from vfleet.verify.probe import integrity_rule as cacheprobe
from vfleet.verify.probe.integrity import IntegrityResult, ProbeSetupError, plan_fillers
from vfleet.verify.record import report
from vfleet.verify.record.model import Report

METRICS = Path(__file__).parents[2] / "fixtures" / "metrics" / "h200-graph.txt"
DIGEST = "sha256:" + "ab" * 32


def test_metrics_from_a_real_server() -> None:
    m = Metrics(METRICS.read_text())
    blocks, block = m.cache_pool()
    assert block == 16 and blocks * block >= 3_806_688  # the log said 3,806,688 KV tokens
    assert prefix_hits(m) == (77158.0, 29136.0)
    f = finishes(m)
    assert f["length"] == 220.0 and f["error"] == 0.0 and f["abort"] == 0.0


@pytest.mark.parametrize("reason", ["abort", "error"])
def test_finish_check_on_recorded_metrics(reason: str) -> None:
    text = METRICS.read_text()
    assert unexpected_finishes(Metrics(text)) is None
    line = f'vllm:request_success_total{{engine="0",finished_reason="{reason}",model_name="m"}} 0.0'
    assert line in text
    faulty = Metrics(text.replace(line, line.replace(" 0.0", " 3.0")))
    msg = unexpected_finishes(faulty, Metrics(text))
    assert msg is not None and "expected no error and no abort finishes" in msg
    assert ("saw 3 error and 0 abort" if reason == "error" else "saw 0 error and 3 abort") in msg, msg


def test_metrics_that_are_not_prometheus_text_are_an_error_not_an_empty_snapshot() -> None:
    # A proxy's HTML error page, or a cut-off exposition: read as "no samples", it would pass the
    # finish check (no error, no abort) without having read anything.
    with pytest.raises(ValueError, match="/metrics is not Prometheus text"):
        Metrics("<html><body>502 Bad Gateway</body></html>\n")
    cut = METRICS.read_text()[:5000].rsplit("\n", 1)[0] + '\nvllm:num_requests_running{engine="0'
    with pytest.raises(ValueError, match="/metrics is not Prometheus text"):
        Metrics(cut)


def test_cache_pool_missing_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="lacks num_gpu_blocks/block_size"):
        Metrics('vllm:cache_config_info{block_size="16"} 1.0\n').cache_pool()


def _report(tmp: Path, passed: bool = True, digest: str = DIGEST, profile: str = "tiny/cpu", **kw: Any) -> Path:
    figures = {"load": [load_row(c) for c in (1, 32)]}
    return write_report(tmp, profile, digest, suite_passed=passed, figures=figures, **kw)


def test_report_forms(tmp_path: Path) -> None:
    out = _report(tmp_path)
    rep = json.loads((out / "report.json").read_text())
    assert rep["passed"] and rep["vllm_version"] == "0.30.0" and rep["counts"]["passed"] == 1
    md = (out / "report.md").read_text()
    assert "Boot-verify PASS" in md and "| 32 | 8 | 8 | 320.0 |" in md and "![latency.png](latency.png)" in md
    for png in ("throughput_tpot.png", "latency.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_failed_suite_is_a_failed_report(tmp_path: Path) -> None:
    rep = json.loads((_report(tmp_path, passed=False) / "report.json").read_text())
    assert rep["passed"] is False and "FAIL" in (_report(tmp_path, passed=False) / "report.md").read_text()


def test_promotion_rules(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    reg = tmp_path / "promotions.jsonl"
    image = f"registry.test:5000/vfleet-cpu@{DIGEST}"
    failing = _report(reports, passed=False)
    partial = _report(reports, partial=True)
    other = _report(reports, profile="glm-5.3-flash/h200")
    for rdir, why in ((failing, "did not pass"), (partial, "partial run"), (other, "profile glm-5.3-flash/h200")):
        with pytest.raises(VfleetError, match=why):
            promotion.promote(image, "tiny/cpu", rdir, reg, keys=trusted())
    assert not reg.exists()
    with pytest.raises(VfleetError, match="was never promoted"):
        promotion.promoted_entry(image, "tiny/cpu", reg, keys=trusted())
    good = _report(reports)
    entry = promotion.promote(image, "tiny/cpu", good, reg, keys=trusted())
    assert entry["digest"] == DIGEST and promotion.promoted_entry(image, "tiny/cpu", reg, keys=trusted()) == entry
    with pytest.raises(VfleetError, match="was never promoted"):
        promotion.promoted_entry(f"registry.test:5000/vfleet-cpu@sha256:{'cd' * 32}", "tiny/cpu", reg, keys=trusted())
    promotion.promote(image, "tiny/cpu", good, reg, keys=trusted())
    assert len(reg.read_text().splitlines()) == 2  # append-only


def test_tiny_model_build_is_deterministic_and_idempotent(tmp_path: Path) -> None:
    a = tinymodel.build(tmp_path / "a")
    stamp = (a / tinymodel.STAMP).stat().st_mtime_ns
    assert tinymodel.build(tmp_path / "a") == a and (a / tinymodel.STAMP).stat().st_mtime_ns == stamp
    b = tinymodel.build(tmp_path / "b")
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    cfg = json.loads((a / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]) == (64, 2, 2)
    assert cfg["hidden_size"] // cfg["num_attention_heads"] >= 32  # vLLM CPU attention needs head size >= 32
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tiny-build-")]  # nothing half-built


def test_tiny_model_refuses_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(VfleetError, match="without a vfleet model stamp"):
        tinymodel.build(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_integrity_fillers_are_sized_from_the_pool() -> None:
    spec = IntegritySpec()
    # The real H200 pool (237,918 blocks x 16) with a 1M context: long fillers, within max_fillers.
    blocks, block = Metrics(METRICS.read_text()).cache_pool()
    pool = blocks * block
    size, count = plan_fillers(pool, block, 1_048_576, spec)
    assert count <= spec.max_fillers and size * count >= spec.pool_cycles * pool
    # The same pool with a 4k context cannot be cycled by 400 fillers: a clear error, not a weak probe.
    with pytest.raises(ProbeSetupError, match=r"needs \d+ fillers .* integrity.max_fillers is 400"):
        plan_fillers(pool, block, 4096, spec)
    # tiny/cpu: 64 x 128.
    size, count = plan_fillers(64 * 128, 128, 2048, spec)
    assert (size, count) == (512, 24)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--url", "http://127.0.0.1:9", "--profile", "tiny/nope"], "not served on 'nope'"),
        (["--url", "127.0.0.1:9", "--profile", "tiny/cpu"], "expected http://HOST:PORT"),
        (["--url", "http://127.0.0.1:9", "--profile", "tiny/cpu", "--log", "/nonexistent.log"], "no such file"),
    ],
)
def test_verify_bad_input_is_one_clear_line(args: list[str], words: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet", "verify", *args, "--out", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()  # nothing half-built


def test_verify_against_a_dead_server_fails_the_gate(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet", "verify", "--url", "http://127.0.0.1:9", "--profile", "tiny/cpu",
         "-k", "test_health", "--out", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert rep["passed"] is False and rep["counts"]["failed"] >= 1


def test_verify_refuses_an_out_dir_that_already_holds_a_report(tmp_path: Path) -> None:
    out = _report(tmp_path)
    before = (out / "report.json").read_bytes()
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet", "verify", "--url", "http://127.0.0.1:9", "--profile", "tiny/cpu",
         "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and "already holds a report; pass another --out" in proc.stderr, proc.stderr
    assert (out / "report.json").read_bytes() == before


KEY = "vf-unit-secret-5e1f"


def test_env_file_is_read_like_docker_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docker's rules (opts/envfile.go): BOM dropped, leading blanks trimmed, # comments, split at the
    first =, no quote processing, value kept as is, a bare KEY taken from the environment."""
    env = tmp_path / "secrets.env"
    env.write_bytes(
        b'\xef\xbb\xbfHF_TOKEN=hf_x\r\n# VLLM_API_KEY=commented\n\n   QUOTED="a b"\nEQ=a=b \nPASS\nGONE\n'
        + f"VLLM_API_KEY={KEY}\n".encode()
    )
    monkeypatch.setenv("PASS", "from-env")
    monkeypatch.delenv("GONE", raising=False)
    assert apikey.parse_env_file(env) == {
        "HF_TOKEN": "hf_x", "QUOTED": '"a b"', "EQ": "a=b ", "PASS": "from-env", "VLLM_API_KEY": KEY,
    }  # fmt: skip
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    key = apikey.resolve(env_file=env)
    assert key.value == KEY and key.source == f"VLLM_API_KEY from --env-file {env}" and KEY not in repr(key)


def test_api_key_sources_and_their_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    assert apikey.resolve().value == KEY  # the default, as vLLM's server reads it
    monkeypatch.setenv("OTHER_KEY", "other")
    assert apikey.resolve(api_key_env="OTHER_KEY").value == "other"
    monkeypatch.delenv("VLLM_API_KEY")
    assert apikey.resolve().value is None
    with pytest.raises(VfleetError, match="--api-key-env NOPE: that environment variable is empty or unset"):
        apikey.resolve(api_key_env="NOPE")
    bad = tmp_path / "bad.env"
    bad.write_text(f"VLLM_API_KEY {KEY}\n")
    with pytest.raises(VfleetError, match="line 1 is not KEY=VALUE") as exc:
        apikey.resolve(env_file=bad)
    assert KEY not in str(exc.value)
    (tmp_path / "nokey.env").write_text("HF_TOKEN=x\n")
    with pytest.raises(VfleetError, match=r"no VLLM_API_KEY=\.\.\. line"):
        apikey.resolve(env_file=tmp_path / "nokey.env")
    with pytest.raises(VfleetError, match="cannot read it"):
        apikey.resolve(env_file=tmp_path / "missing.env")


def test_a_key_handed_down_in_memory_is_used_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Staging hands the run the key it made for its container (runner.VerifyRequest.key): that key is used, not
    the environment's, and nothing else may name a source beside it. (tests/e2e/ops/test_staging.py runs the real
    path: a staging container that refuses any other key passes its boot-verify.)"""
    monkeypatch.setenv("VLLM_API_KEY", "the operator's own key")
    given = apikey.ApiKey(KEY, "the key staging made for container c1")
    assert apikey.resolve(given=given) is given
    assert os.environ["VLLM_API_KEY"] == "the operator's own key"
    assert KEY not in repr(runner.VerifyRequest(url="http://127.0.0.1:9", profile="tiny/cpu", out=tmp_path, key=given))
    with pytest.raises(VfleetError, match="takes no --api-key-env or --env-file as well"):
        apikey.resolve(api_key_env="VLLM_API_KEY", given=given)
    with pytest.raises(VfleetError, match="takes no --api-key-env or --env-file as well"):
        apikey.resolve(env_file=tmp_path / "node.env", given=given)


# -- the integrity probe's comparison (issue 11, part 3) ------------------------------------------


def _choice(ids: list[int], tops: list[dict[int, float]], cached: int | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": 600, "completion_tokens": len(ids)}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return {
        "text": "".join(f"<{i}>" for i in ids),
        "token_ids": ids,
        "prompt_token_ids": list(range(600)),
        "logprobs": {"top_logprobs": [{f"token_id:{k}": v for k, v in t.items()} for t in tops]},
        "usage": usage,
    }


TOPS = [{5: -0.5, 7: -1.25, 9: -2.0}, {3: -0.1, 4: -2.5, 8: -3.0}, {1: -0.75, 2: -0.8, 6: -4.0}]


def test_answers_are_compared_on_what_the_model_computed() -> None:
    ref = cacheprobe.parse_answer(_choice([5, 3, 1], TOPS), hits_delta=0.0)
    assert ref.cached_tokens == 0 and ref.hit_source == "metrics" and ref.top[0] == TOPS[0]
    same = cacheprobe.compare_answers(cacheprobe.parse_answer(_choice([5, 3, 1], TOPS), 512.0), ref, 0.0)
    assert same["ok"] and same["max_gap"] == 0.0 and same["compared_positions"] == 3
    # The same text and ids, one alternative of the first token moved by 1e-6 nats: a mismatch at
    # tolerance 0, none at 1e-3.
    moved = [dict(TOPS[0]), *TOPS[1:]]
    moved[0][9] -= 1e-6
    ans = cacheprobe.parse_answer(_choice([5, 3, 1], moved), 512.0)
    m = cacheprobe.compare_answers(ans, ref, 0.0)
    assert not m["ok"] and m["first_diff_position"] is None and m["gap_position"] == 0 and m["gap_token"] == 9
    assert abs(m["max_gap"] - 1e-6) < 1e-12
    assert cacheprobe.compare_answers(ans, ref, 1e-3)["ok"]
    line = cacheprobe.describe_mismatch({"question": "question 0", **m}, 0.0)
    assert line.startswith("question 0: token ids identical over 3 positions; max logprob gap 1e-06 nats "), line
    assert "at position 0, token id 9: cached -2.000001 vs salted -2.000000" in line, line


def test_a_differing_token_reports_its_position_and_the_gap_before_it() -> None:
    ref = cacheprobe.parse_answer(_choice([5, 3, 1], TOPS), 0.0)
    tops = [TOPS[0], {4: -0.2, 3: -0.3, 8: -3.0}, {0: -0.1}]
    m = cacheprobe.compare_answers(cacheprobe.parse_answer(_choice([5, 4, 0], tops), 512.0), ref, 0.5)
    # Position 1 has the same context on both paths: compared; position 2 follows different tokens: not.
    assert not m["ok"] and (m["first_diff_position"], m["cached_id"], m["salted_id"]) == (1, 4, 3)
    assert m["compared_positions"] == 2 and m["gap_position"] == 1 and m["gap_token"] == 4
    assert abs(m["max_gap"] - 2.3) < 1e-9  # token 4: -0.2 cached vs -2.5 salted
    line = cacheprobe.describe_mismatch({"question": "q", **m}, 0.5)
    assert "first differing token at position 1 (cached id 4 vs salted id 3); max logprob gap 2.3 nats" in line


def test_an_alternative_on_one_side_only_counts_at_least_its_distance() -> None:
    gap, tok, a, b = cacheprobe._position_gap({1: -0.1, 2: -0.5}, {1: -0.1, 3: -0.7})
    # token 2 is among the cached alternatives only: on the salted side it is below -0.7
    assert (tok, a, b) == (2, -0.5, None) and abs(gap - 0.2) < 1e-12


def test_hits_per_request_come_from_usage_when_the_server_reports_them() -> None:
    a = cacheprobe.parse_answer(_choice([5, 3, 1], TOPS, cached=384), hits_delta=999.0)
    assert (a.cached_tokens, a.hit_source) == (384, "usage")
    with pytest.raises(ValueError, match="expected token_ids and top_logprobs for every generated token"):
        cacheprobe.parse_answer({"text": "x", "token_ids": [1, 2], "logprobs": None}, 0.0)


def test_partial_cached_hits_and_salted_hits_are_problems() -> None:
    res = IntegrityResult(
        num_gpu_blocks=64, block_size=128, pool_tokens=8192, prompt_tokens=500, filler_tokens=512, fillers=24,
        filler_tokens_total=12288, pool_cycles=1.5, questions=2, hit_tokens_during_compare=640.0,
        hits=[
            {"question": "question 0", "prompt_tokens": 530, "cached_prefix": 501, "cached_expected": 384,
             "cached_hit": 384, "salted_hit": 0},
            {"question": "question 1", "prompt_tokens": 530, "cached_prefix": 501, "cached_expected": 384,
             "cached_hit": 256, "salted_hit": 128},
        ],
    )  # fmt: skip
    assert res.hit_problems() == [
        "question 1: the cached request hit 256 tokens of its 501-token cached prefix (expected 384: every full "
        "128-token block of it)",
        "question 1: the cache_salt reference hit 128 tokens of the prefix cache (expected 0: it must be computed "
        "on fresh blocks)",
    ]
    res.hits[1].update(cached_hit=384, salted_hit=0)
    assert res.hit_problems() == []


def test_report_carries_the_logprob_gap_and_the_tolerance(tmp_path: Path) -> None:
    integ = {
        "num_gpu_blocks": 64, "block_size": 128, "pool_tokens": 8192, "prompt_tokens": 500, "filler_tokens": 512,
        "fillers": 24, "filler_tokens_total": 24 * 512, "pool_cycles": 1.5, "questions": 1,
        "hit_tokens_during_compare": 512.0, "mismatches": [], "top_logprobs": 5, "max_logprob_gap": 0.0,
        "logprob_tolerance": 0.0, "hit_source": "metrics",
        "hits": [{"question": "question 0", "prompt_tokens": 520, "cached_prefix": 500, "cached_hit": 512,
                  "cached_expected": 384, "salted_hit": 0}],
    }  # fmt: skip
    md = (write_report(tmp_path, figures={"integrity": integ}) / "report.md").read_text()
    assert "max logprob gap cached vs cache_salt 0 nats, tolerance 0 (`verify.integrity.logprob_tolerance`)" in md
    assert "Prefix-cache hits per request (metrics): cached 512/384 (hit/expected), cache_salt 0 (expected 0)." in md


# -- the typed report model against report.json as it was written before it --------------------------

FIXTURES = Path(__file__).parents[2] / "fixtures"
RECORDED = sorted([FIXTURES / "verify-cpu" / "report.json", *FIXTURES.glob("h200-verify/run*/verify-*/report.json")])


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_a_recorded_report_loads_and_is_written_back_identically(path: Path, tmp_path: Path) -> None:
    """report.json keeps its schema: a report written by the code before the model (a CPU run with the image
    read from the container, and the H200 runs) goes through the model and the one writer byte for byte."""
    rep = Report.load(path)
    assert rep.figures.load and rep.figures.integrity and rep.checks  # typed all the way down
    written = report.write(rep, tmp_path / "r")
    assert written.read_text() == path.read_text()
    assert (
        f"# Boot-verify {'PASS' if rep.passed else 'FAIL'}: {rep.profile}" in (tmp_path / "r" / "report.md").read_text()
    )


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda d: d.update(verdict="ok"), "verdict: unknown key (value \"ok\")"),
        (lambda d: d["figures"].update(tokens_per_watt=3.5), "figures.tokens_per_watt: unknown key (value 3.5)"),
        (lambda d: d.update(passed="true"), 'passed: Input should be a valid boolean (value "true")'),
        (lambda d: d["figures"]["load"][0].update(completed="8"),
         'figures.load.0.completed: Input should be a valid integer (value "8")'),
        (lambda d: d["checks"][0].update(outcome="xfailed"),
         "checks.0.outcome: Input should be 'passed', 'failed' or 'skipped'"),
        (lambda d: d.pop("image"), "image: Field required"),
    ],
)  # fmt: skip
def test_a_report_that_does_not_fit_the_schema_names_the_key(edit: Any, words: str, tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "verify-cpu" / "report.json").read_text())
    edit(data)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    with pytest.raises(VfleetError) as err:
        Report.load(path)
    assert str(err.value).startswith(f"{path}: not a boot-verify report of schema 2: "), err.value
    assert words in str(err.value), err.value
