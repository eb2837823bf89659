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

DIGEST = "sha256:" + "ab" * 32
IMAGE = f"localhost:5000/vfleet-cpu@{DIGEST}"
ENV_DROP = ("VFLEET_REPORTS", "VFLEET_PROMOTIONS", "VFLEET_HOME")


def write_report(
    root: Path,
    profile: str = "tiny/cpu",
    digest: str = DIGEST,
    source: str = "reference",
    skipped: tuple[str, ...] = (),
    not_applicable: dict[str, str] | None = None,
    **extra: Any,
) -> Path:
    """A report as `vfleet verify` writes it: one passed check plus ``skipped`` checks."""
    tests = [{"id": "t::test_health", "name": "test_health", "outcome": "passed", "message": "", "duration_s": 0.1}]
    tests += [
        {"id": f"t::{s}", "name": s, "outcome": "skipped", "message": f"{s} did not run", "duration_s": 0.0}
        for s in skipped
    ]
    meta = {
        "profile": profile,
        "url": "http://node:8000",
        "image": {"ref": f"localhost:5000/vfleet-cpu@{digest}", "id": "sha256:" + "cd" * 32, "digest": digest,
                  "repo_digests": [f"localhost:5000/vfleet-cpu@{digest}"], "source": source, "reason": "test"},
        "wall_s": 1.0,
    }  # fmt: skip
    declared = {"not_applicable": not_applicable} if not_applicable else {}
    rep = report.build({"exitstatus": 0, "tests": tests}, {"vllm_version": "0.30.0"}, meta, **declared)
    rep["partial"] = False
    rep.update(extra)
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
