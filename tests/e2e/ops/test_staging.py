"""`vfleet stage`: bad input is a clear error before anything starts, and a candidate that never
becomes healthy is an error that leaves no container behind and promotes nothing. The passing path
(real CPU image: boot, boot-verify with --container, promotion by registry digest) runs in
tests/e2e/ops/test_fleet_lifecycle.py through `make fleet-stage`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.supply import make_key

from lab.docker import ids_by_label
from lab.images import build_fake_images, build_node_image
from vfleet import tinymodel
from vfleet.errors import VfleetError
from vfleet.server import ServerError
from vfleet.staging import Candidate, stage

pytestmark = pytest.mark.long  # the whole file: make test-long (tests/README.md, Long tests)
VFLEET = [sys.executable, "-m", "vfleet"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*VFLEET, "stage", *args], capture_output=True, text=True, timeout=120, check=False)


def test_a_gpu_profile_needs_its_model_directory() -> None:
    proc = _cli("vfleet-rocm@sha256:" + "0" * 64, "--profile", "glm-5.3-flash/mi355x")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--model-dir is required for glm-5.3-flash/mi355x" in proc.stderr


def test_an_unknown_profile_and_a_missing_model_directory_are_named(tmp_path: Path) -> None:
    proc = _cli("x:1", "--profile", "nope/cpu", "--model-dir", str(tmp_path))
    assert proc.returncode == 2 and "nope" in proc.stderr, proc.stderr
    with pytest.raises(VfleetError, match=r"model directory .*missing.* does not exist"):
        stage([Candidate("x:1")], "tiny/cpu", tmp_path / "missing")
    with pytest.raises(VfleetError, match="nothing to stage"):
        stage([], "tiny/cpu", tmp_path)


def test_promoting_needs_a_signing_key_before_anything_starts(tmp_path: Path) -> None:
    """Promotion needs the boot-verify summary signed: no key, or a file that is no ed25519 key, is refused
    before a container starts (there is none to start: x:1 does not exist)."""
    with pytest.raises(VfleetError, match=r"staging promotes only a signed boot-verify result: .*--sign-key PRIV"):
        stage([Candidate("x:1")], "tiny/cpu", tmp_path)
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key\n")
    with pytest.raises(VfleetError, match=f"signing key {bad}"):
        stage([Candidate("x:1")], "tiny/cpu", tmp_path, sign_key=bad)
    env = {k: v for k, v in os.environ.items() if k != "VFLEET_SIGN_KEY"}
    proc = subprocess.run([*VFLEET, "stage", "x:1", "--profile", "tiny/cpu", "--model-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False, env=env)  # fmt: skip
    assert proc.returncode == 2 and "VFLEET_SIGN_KEY" in proc.stderr, proc.stderr


@pytest.mark.slow
@pytest.mark.injected_fault
def test_a_candidate_that_never_becomes_healthy_leaves_nothing_and_is_not_promoted(tmp_path: Path) -> None:
    from vfleet.dockerd import ensure_dockerd

    ensure_dockerd()
    build_node_image()
    # Injected fault: the `unhealthy` stand-in has no /health (404 forever) (a real vLLM that
    # hangs in its boot cannot be produced on purpose here).
    image = build_fake_images()["unhealthy"]
    registry = tmp_path / "promotions.jsonl"
    sign_key, _ = make_key(tmp_path, "controller")
    before = set(ids_by_label("container", "org.vfleet.role=staging"))
    with pytest.raises(ServerError, match=r"timed out after 8 s waiting for container \S+ to answer /health"):
        stage([Candidate(image)], "tiny/cpu", tinymodel.build(), out_root=tmp_path / "r", registry=registry,
              health_timeout_s=8, sign_key=sign_key)  # fmt: skip
    assert set(ids_by_label("container", "org.vfleet.role=staging")) == before, "a staging container was left"
    assert not registry.exists() or not registry.read_text().strip(), "something was promoted"
