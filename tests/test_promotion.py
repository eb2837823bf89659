"""Promotion rules on real report files (report.build + report.write, as `vfleet verify` writes them)
and the one absolute reports root: no server, no docker.

The registry digest of a tag (docker RepoDigests) is tested against a real local registry in
tests/test_verify_image_digest.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from vfleet.errors import VfleetError
from vfleet.verify import promotion, report
from vfleet.verify.model import CheckResult, Report

DIGEST = "sha256:" + "ab" * 32
IMAGE = f"localhost:5000/vfleet-cpu@{DIGEST}"
ENV_DROP = ("VFLEET_REPORTS", "VFLEET_PROMOTIONS", "VFLEET_HOME")


def load_row(c: int) -> dict[str, Any]:
    """A load level's figures (vfleet.verify.load.LevelResult) at concurrency ``c``."""
    return {"concurrency": c, "requests": 8, "output_tokens": 16, "completed": 8, "empty": 0, "short": 0,
            "errors": [], "problems": [], "wall_s": 1.5, "out_tok_per_s": 10.0 * c, "ttft_p50_ms": 5.0,
            "ttft_p90_ms": 6.0, "tpot_p50_ms": 2.0, "tpot_p90_ms": 3.0, "latency_p50_ms": 9.0,
            "latency_p90_ms": 12.0, "latencies_ms": [8.0, 9.0, 12.0]}  # fmt: skip


def write_report(
    root: Path,
    profile: str = "tiny/cpu",
    digest: str = DIGEST,
    source: str = "reference",
    skipped: tuple[str, ...] = (),
    not_applicable: dict[str, str] | None = None,
    suite_passed: bool = True,
    figures: dict[str, Any] | None = None,
    **extra: Any,
) -> Path:
    """A report as `vfleet verify` writes it (report.build + report.write): one check, passed (or failed
    when not ``suite_passed``), plus ``skipped`` checks; ``extra`` overrides report keys afterwards."""
    checks = [
        CheckResult(
            id="t::test_health",
            name="test_health",
            file="t",
            message="",
            duration_s=0.1,
            outcome="passed" if suite_passed else "failed",
        )
    ]
    checks += [
        CheckResult(id=f"t::{s}", name=s, file="t", outcome="skipped", message=f"{s} did not run", duration_s=0.0)
        for s in skipped
    ]
    meta = {
        "profile": profile, "production": profile != "tiny/cpu", "url": "http://node:8000", "served_model": "tiny",
        "image": {"ref": f"localhost:5000/vfleet-cpu@{digest}", "id": "sha256:" + "cd" * 32, "digest": digest,
                  "repo_digests": [f"localhost:5000/vfleet-cpu@{digest}"], "source": source, "reason": "test",
                  "container": None, "docker_host": None},
        "api_key": "none", "docker_host": None, "log": None, "selected": None,
        "started": "2026-12-02T00:00:00+00:00", "wall_s": 1.0,
    }  # fmt: skip
    figs = {"vllm_version": "0.30.0", **(figures or {})}
    rep = report.build(checks, 0 if suite_passed else 1, figs, meta, not_applicable=not_applicable)
    rep = Report.model_validate({**rep.dump(), **extra})
    out = root / f"verify-{len(list(root.iterdir())) if root.exists() else 0}"
    return report.write(rep, out).parent


def test_an_unexcused_skip_fails_the_report_and_is_listed(tmp_path: Path) -> None:
    rep = json.loads((write_report(tmp_path, skipped=("test_log[faults]",)) / "report.json").read_text())
    assert rep["passed"] is False
    assert rep["unexcused_skips"] == [{"id": "test_log[faults]", "message": "test_log[faults] did not run"}]
    assert "Not verified" in (tmp_path / "verify-0" / "report.md").read_text()
    excused = write_report(tmp_path, skipped=("test_probes",), not_applicable={"test_probes": "random weights here"})
    rep = json.loads((excused / "report.json").read_text())
    assert rep["passed"] is True and rep["unexcused_skips"] == []
    assert rep["not_applicable"] == {"test_probes": "random weights here"}


def test_promotion_refuses_a_report_with_unexcused_skips(tmp_path: Path) -> None:
    reg = tmp_path / "promotions.jsonl"
    rdir = write_report(tmp_path / "r", skipped=("test_gpu_health", "test_log[faults]"), passed=True)
    with pytest.raises(VfleetError, match=r"not verified \(skipped, not declared not applicable\): test_gpu_health"):
        promotion.promote(IMAGE, "tiny/cpu", rdir, reg)
    assert not reg.exists()


def test_production_promotion_needs_the_digest_read_from_the_container(tmp_path: Path) -> None:
    reg = tmp_path / "promotions.jsonl"
    from_ref = write_report(tmp_path / "r", profile="glm-5.3-flash/h200", source="reference")
    with pytest.raises(VfleetError, match=r"digest taken from reference, not read from the verified container"):
        promotion.promote(IMAGE, "glm-5.3-flash/h200", from_ref, reg)
    from_container = write_report(tmp_path / "r", profile="glm-5.3-flash/h200", source="container")
    entry = promotion.promote(IMAGE, "glm-5.3-flash/h200", from_container, reg)
    assert entry["digest"] == DIGEST and entry["digest_source"] == "container"
    # tiny/cpu is not a production profile: a digest from the operator's reference is enough.
    assert promotion.promote(IMAGE, "tiny/cpu", write_report(tmp_path / "t"), reg)["digest_source"] == "reference"


def test_reports_of_the_old_schema_are_refused(tmp_path: Path) -> None:
    old = write_report(tmp_path, schema=1)
    with pytest.raises(VfleetError, match="report schema 1 predates fail-closed gating"):
        promotion.promote(IMAGE, "tiny/cpu", old, tmp_path / "promotions.jsonl")


def test_a_report_that_does_not_fit_the_schema_is_never_promoted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: a report that says passed but carries a key the model does not know, or a value of the
    wrong type, promotes nothing; the refusal names the file and the key."""
    reg = tmp_path / "promotions.jsonl"
    for key, value, words in (
        ("gate", "skipped", "gate: unknown key"),
        ("partial", "no", 'partial: Input should be a valid boolean (value "no")'),
    ):
        rdir = write_report(tmp_path / key)
        data = json.loads((rdir / "report.json").read_text())
        assert data["passed"] is True
        (rdir / "report.json").write_text(json.dumps({**data, key: value}, indent=1))
        with pytest.raises(VfleetError, match="no passing boot-verify report") as err:
            promotion.promote(IMAGE, "tiny/cpu", rdir, reg)
        assert f"{rdir / 'report.json'}: not a boot-verify report of schema 2: {words}" in str(err.value)
        assert not reg.exists()
    # The search of the reports root skips them too, and says why.
    monkeypatch.setenv("VFLEET_REPORTS", str(tmp_path))
    with pytest.raises(VfleetError, match=r"gate: unknown key"):
        promotion.find_report(DIGEST, "tiny/cpu", None)


def test_a_bare_image_id_is_not_a_registry_digest(tmp_path: Path) -> None:
    with pytest.raises(VfleetError, match=r"a bare sha256 is ambiguous .* promote REPO@sha256:DIGEST"):
        promotion.promote(DIGEST, "tiny/cpu", write_report(tmp_path), tmp_path / "promotions.jsonl")


def _vfleet(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vfleet", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120,
        check=False,
    )  # fmt: skip


def test_promote_in_one_cwd_and_check_in_another_use_the_same_files(tmp_path: Path) -> None:
    """ansible-playbook runs in ansible/: its `promote --check` must read the registry `vfleet promote`
    wrote from the checkout root. Defaults only (no --report, no --registry), one reports root."""
    root = tmp_path / "reports"
    root.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROP} | {"VFLEET_REPORTS": str(root)}
    a, b = tmp_path / "operator", tmp_path / "ansible"
    a.mkdir()
    b.mkdir()
    # vfleet verify's default --out is under the same root (a dead server: the report fails, but exists).
    dead = _vfleet(
        "verify", "--url", "http://127.0.0.1:9", "--profile", "tiny/cpu", "-k", "test_health", cwd=b, env=env
    )
    assert dead.returncode == 1, dead.stdout[-1500:] + dead.stderr
    written = list(root.glob("verify-tiny-cpu-*/report.json"))
    assert len(written) == 1, f"expected vfleet verify to write under {root}: {list(root.rglob('*'))}"
    write_report(root)
    ok = _vfleet("promote", IMAGE, "--profile", "tiny/cpu", cwd=a, env=env)
    assert ok.returncode == 0, ok.stderr
    assert (root / "promotions.jsonl").is_file() and not (a / "reports").exists()
    check = _vfleet("promote", "--check", IMAGE, "--profile", "tiny/cpu", cwd=b, env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"promoted: {DIGEST} for tiny/cpu" in check.stdout


def test_the_default_reports_root_is_the_checkout_whatever_the_cwd(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROP}
    want = str(REPO / "reports" / "promotions.jsonl")
    for cwd in (tmp_path, REPO / "ansible"):
        out = _vfleet("promote", "--help", cwd=cwd, env=env).stdout
        assert want in " ".join(out.split()), f"from {cwd}: {out}"
