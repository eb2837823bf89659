"""`vfleet demo --server image`: boot-verify of the CPU image under docker, when the image is built
(tests/e2e/conftest.py builds it once per run). The live-server tests it shares its
helpers with are tests/integration/judge/test_verify_live.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.verify_cli import checks, signing, trusting, vfleet

from vfleet import images
from vfleet.commands.demo import MODEL, PROFILE
from vfleet.models import build
from vfleet.profiles import Catalog

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return build.build(MODEL)


@pytest.mark.long  # a full smollm2 boot-verify, about 6 min on 2 cores: make test-long (tests/README.md, Long tests)
def test_demo_on_the_cpu_image(cpu_image: images.BuildResult, model_dir: Path, tmp_path: Path) -> None:
    """`vfleet demo --server image`: the CPU image under docker, verified through --container (docker
    logs, /etc/vfleet/versions.json in the container), its digest from docker, then promoted."""
    from vfleet.render import default_image

    image = default_image(Catalog().load(PROFILE))
    assert image == cpu_image.ref  # the demo's image is the one this run built (tests/e2e/conftest.py)
    out = tmp_path / "demo"
    proc = vfleet("demo", "--server", "image", "--out", str(out), env=signing())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["passed"] and rep["log"].startswith("docker logs vfleet-demo-")
    img = rep["image"]
    inspected = json.loads(subprocess.run(["docker", "image", "inspect", image], capture_output=True, text=True,
                                          check=True).stdout)[0]  # fmt: skip
    assert img["ref"] == image and img["source"] == "container" and img["id"] == inspected["Id"]
    assert img["repo_digests"] == sorted(inspected.get("RepoDigests") or [])
    c = checks(out)
    assert c["test_version"]["outcome"] == "passed" and c["test_log[kv_tokens]"]["outcome"] == "passed"
    # the real model's answers, run for real in the container and shown by the demo
    assert c["test_probes"]["outcome"] == "passed" and c["test_answers"]["outcome"] == "passed"
    assert "probe 'What is the capital of France?': " in proc.stdout and "Paris" in proc.stdout, proc.stdout[-3000:]
    assert f"answers: {rep['figures']['answers']['questions']}: {rep['figures']['answers']['right']} of" in proc.stdout
    assert "container.log" in proc.stdout and (out / "server" / "container.log").stat().st_size > 0
    # The people's page of this same run (the browser tests render it in tests/integration/judge/test_pages.py):
    # written by the real verify, with its verdict first and the image it verified.
    page = (out / "report.html").read_text()
    assert page.index('id="verdict"') < page.index('id="checks"'), page[:2000]
    assert "Boot-verify PASS" in page and img["id"] in page
    left = subprocess.run(["docker", "ps", "-aq", "--filter", "label=org.vfleet.demo=true"], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert left.stdout.strip() == "", f"demo containers left: {left.stdout}"
    reg = tmp_path / "promotions.jsonl"
    if not img["repo_digests"]:
        # Built here and never pushed: no registry digest names it, so it cannot be promoted by tag.
        assert img["digest"] is None and "never pushed to or pulled from a registry" in img["reason"]
        refused = vfleet(
            "promote", image, "--profile", PROFILE, "--report", str(out), "--registry", str(reg), *trusting()
        )
        assert refused.returncode == 2 and "names no registry" in refused.stderr, refused.stderr
        assert "push the image and name it as REGISTRY/REPO@sha256:DIGEST" in refused.stderr, refused.stderr
        assert not reg.exists()
        return
    assert img["digest"] in {d.rpartition("@")[2] for d in img["repo_digests"]}
    by_digest = img["repo_digests"][0].rpartition("@")[0] + "@" + img["digest"]
    assert f"signed verification summary: {out / 'verification.dsse.json'}" in proc.stdout, proc.stdout[-2000:]
    ok = vfleet("promote", by_digest, "--profile", PROFILE, "--report", str(out), "--registry", str(reg), *trusting())
    assert ok.returncode == 0, ok.stderr
    check = vfleet("promote", "--check", by_digest, "--profile", PROFILE, "--registry", str(reg), *trusting())
    assert check.returncode == 0, check.stdout
