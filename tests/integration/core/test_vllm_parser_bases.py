"""Every serve profile through the `vllm serve` parser of every vLLM base of versions.json (issue 24,
item 3): the default base's from the venv's vLLM, 0.34.0's from its pinned wheel's Python tree (fetched
and checked against its sha256, the cache the rebase report uses). `vfleet check --parsers` runs the same
code; these tests show it passing on the checkout and catching a key one base's parser does not know."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from vfleet.patchset.fetch import fetch_base
from vfleet.pins import load as load_pins
from vfleet.profiles import Catalog
from vfleet.vllm_tree import parse_with_tree

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.long,
]  # the whole file: make test-long (tests/README.md, Long tests)
PINS = load_pins(REPO / "versions.json")
OTHER = [b for b in PINS.bases if b != PINS.vllm_version]


def test_vfleet_check_parsers_reads_every_profile_with_every_base() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet", "check", "--parsers"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = len(Catalog().profile_names())
    for base in PINS.bases:
        assert f"{n} of {n} profiles parse as meant with vLLM {base}'s parser" in proc.stdout, proc.stdout


def test_without_parsers_check_says_they_did_not_run() -> None:
    proc = subprocess.run([sys.executable, "-m", "vfleet", "check"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "vLLM parsers: not run" in proc.stdout


@pytest.mark.parametrize("base", OTHER)
def test_each_base_is_read_by_its_own_parser(base: str, tmp_path: Path) -> None:
    """0.34's layer drops gpu-memory-utilization (unset means 1.0 with the extensible KV cache there): its
    own parser then reads the GLM profile as meant, while the default base still gets the model's 0.9.
    And `enable-mamba-fine-grained-prefix-cache`, an option of 0.30.0's parser and not of 0.34.0's: a
    profile that sets it passes the default base's parser and fails the other one, naming the key (one
    child Python per base: each import of a vLLM tree takes seconds)."""
    tree = fetch_base(base, say=lambda m: None)
    glm = "glm-5.3-flash/h200"
    on_default = Catalog(base=PINS.vllm_version).load(glm)
    on_base = Catalog(base=base).load(glm)
    assert on_default.vllm["gpu-memory-utilization"] == 0.9
    assert "gpu-memory-utilization" not in on_base.vllm and f"bases/{base}.yaml" in on_base.sources

    configs = tmp_path / "serve_configs"
    shutil.copytree(REPO / "serve_configs", configs)
    shutil.copy(REPO / "versions.json", tmp_path / "versions.json")
    model = configs / "models" / "tiny" / "model.yaml"
    data = yaml.safe_load(model.read_text())
    data["vllm"]["enable-mamba-fine-grained-prefix-cache"] = True
    model.write_text(yaml.safe_dump(data, sort_keys=False))
    default = parse_with_tree([Catalog(configs, PINS.vllm_version).load("tiny/cpu")], tmp_path / "a")
    assert default == {"tiny/cpu": []}
    other = parse_with_tree([on_base, Catalog(configs, base).load("tiny/cpu")], tmp_path / "b", tree)
    assert other[glm] == []
    assert other["tiny/cpu"], "the base without the option must fail the profile"
    assert any("enable-mamba-fine-grained-prefix-cache" in p or "refused" in p for p in other["tiny/cpu"]), other
