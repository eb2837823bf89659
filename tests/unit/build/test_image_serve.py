"""`vfleet serve`, the image entrypoint: profile selection, secrets, preflight, banner, the vLLM argv.

These run the real entrypoint code on this machine (no image needed) up to the exec, with --dry-run.
A fresh process of it is tests/integration/ops/test_image_serve_process.py; the image tests
(tests/e2e/build/test_image_cpu.py) run it for real as PID 1 of the CPU image.
"""

from __future__ import annotations

import json
import shlex
import struct
from pathlib import Path

import pytest
import yaml
from conftest import ConfigTree

from vfleet.cli import main

KEY = "sk-test-serve-0123456789"


def safetensors(path: Path, payload: bytes = b"") -> None:
    header = json.dumps({"__metadata__": {"format": "pt"}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + payload)


def model_dir(root: Path, shards: int = 1, index: bool = False) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text("{}")
    names = (
        [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)] if index else ["model.safetensors"]
    )
    for n in names:
        safetensors(root / n)
    if index:
        wm = {f"layer{i}.weight": n for i, n in enumerate(names)}
        (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    return root


@pytest.fixture
def serve_env(config_tree: ConfigTree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tiny/cpu with its model path pointed at a complete model directory under tmp_path."""
    model = model_dir(tmp_path / "model")
    config_tree.edit("models/tiny/model.yaml", lambda d: d["vllm"].__setitem__("model", str(model)))
    for var in ("VLLM_API_KEY", "HF_TOKEN", "VFLEET_MODEL", "VFLEET_PLATFORM", "VFLEET_ALLOW_NO_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("VFLEET_PROFILE", "tiny/cpu")
    monkeypatch.setenv("VFLEET_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("VFLEET_SECRETS_DIR", str(tmp_path / "secrets"))
    return model


def test_dry_run_renders_the_profile_and_passes_extra_args_last(
    serve_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    assert main(["serve", "--dry-run", "--", "--max-num-seqs", "4"]) == 0
    out, err = capsys.readouterr()
    argv = shlex.split(out.strip().splitlines()[-1])
    config = tmp_path / "run" / "vllm-config.yaml"
    assert argv[:4] == ["vllm", "serve", "--config", str(config)]
    assert argv[-2:] == ["--max-num-seqs", "4"], "extra docker-run arguments must come last, so they win"
    rendered = yaml.safe_load(config.read_text())
    assert rendered["model"] == str(serve_env) and rendered["served-model-name"] == "tiny"
    assert "profile   tiny/cpu (VFLEET_PROFILE)" in err
    assert "required (VLLM_API_KEY from environment)" in err
    assert "1 shard(s) complete" in err
    assert KEY not in out + err, "the API key must never be printed"


def test_api_key_is_required_by_default(serve_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--dry-run"]) == 3
    err = capsys.readouterr().err
    assert "no API key" in err and "VLLM_API_KEY" in err and "--env-file" in err


def test_api_key_from_a_secret_file(serve_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "vllm_api_key").write_text(KEY + "\n")
    assert main(["serve", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert f"secret file {tmp_path / 'secrets' / 'vllm_api_key'}" in err
    assert KEY not in out + err


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("drop-shard", "the index names 3 shards, the directory has 2"),
        ("extra-shard", "not in the index 1"),
        ("truncate", "truncated safetensors shard"),
        ("no-config", "has no config.json"),
    ],
)
def test_incomplete_model_is_refused(
    serve_env: Path,
    config_tree: ConfigTree,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    damage: str,
    message: str,
) -> None:
    model = model_dir(tmp_path / "sharded", shards=3, index=True)
    config_tree.edit("models/tiny/model.yaml", lambda d: d["vllm"].__setitem__("model", str(model)))
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    assert main(["serve", "--dry-run"]) == 0, "the intact sharded model must pass"
    capsys.readouterr()
    if damage == "drop-shard":
        (model / "model-00002-of-00003.safetensors").unlink()
    elif damage == "extra-shard":
        safetensors(model / "model-00009-of-00009.safetensors")
    elif damage == "truncate":
        safetensors(model / "model-00003-of-00003.safetensors")
        data = (model / "model-00003-of-00003.safetensors").read_bytes()
        (model / "model-00003-of-00003.safetensors").write_bytes(data[:-5])
    else:
        (model / "config.json").unlink()
    assert main(["serve", "--dry-run"]) == 3
    assert message in capsys.readouterr().err


def test_shm_too_small_is_refused(
    serve_env: Path, config_tree: ConfigTree, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config_tree.edit("platforms/cpu.yaml", lambda d: d["runtime"].__setitem__("min_shm_bytes", 2**50))
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    assert main(["serve", "--dry-run"]) == 3
    err = capsys.readouterr().err
    assert "/dev/shm is" in err and "--shm-size 1g" in err


def test_gpu_profile_on_a_host_without_gpus_is_refused(
    serve_env: Path, config_tree: ConfigTree, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """This machine has no GPU: a ROCm profile must stop at preflight, naming the device options."""
    config_tree.edit("models/glm-5.3-flash/model.yaml", lambda d: d["vllm"].__setitem__("model", str(serve_env)))
    config_tree.edit("platforms/mi355x.yaml", lambda d: d.setdefault("runtime", {}).__setitem__("min_shm_bytes", 0))
    monkeypatch.setenv("VFLEET_PROFILE", "glm-5.3-flash/mi355x")
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    if Path("/dev/kfd").exists():
        pytest.skip("this host has /dev/kfd")
    assert main(["serve", "--dry-run"]) == 3
    err = capsys.readouterr().err
    assert "no /dev/kfd" in err and "--device /dev/kfd --device /dev/dri --group-add video" in err


def test_no_profile_chosen_is_a_clear_error(
    serve_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("VFLEET_PROFILE")
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    assert main(["serve", "--dry-run"]) == 3
    assert "set VFLEET_PROFILE=MODEL/PLATFORM" in capsys.readouterr().err


def test_a_container_serves_only_the_profiles_its_line_was_rendered_from(
    serve_env: Path,
    config_tree: ConfigTree,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`vfleet render` names its serve profiles in the docker run line (VFLEET_PROFILES_DIGEST); the
    entrypoint refuses a copy that differs: a node never serves another profile than the controller
    rendered and boot-verifies."""
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    assert main(["render", "tiny/cpu", "--format", "docker", "--image", "img"]) == 0
    line = shlex.split(capsys.readouterr().out.strip())
    pinned = [a for a in line if a.startswith("VFLEET_PROFILES_DIGEST=")]
    assert len(pinned) == 1 and pinned[0].split("=", 1)[1].startswith("sha256:"), line
    digest = pinned[0].split("=", 1)[1]
    monkeypatch.setenv("VFLEET_PROFILES_DIGEST", digest)
    assert main(["serve", "--dry-run"]) == 0, capsys.readouterr().err
    capsys.readouterr()

    # The image's copy changes (another release): refused before anything else is checked.
    config_tree.edit("models/tiny/model.yaml", lambda d: d["vllm"].__setitem__("max-num-seqs", 3))
    assert main(["serve", "--dry-run"]) == 3
    err = capsys.readouterr().err
    assert "are not the ones this container was rendered from" in err and digest in err, err

    # A hand-written docker run line without the variable is not checked.
    monkeypatch.delenv("VFLEET_PROFILES_DIGEST")
    assert main(["serve", "--dry-run"]) == 0


@pytest.mark.parametrize(("env_base", "refused"), [(None, True), ("0.30.0", True), ("0.34.0", False)])
def test_the_profiles_base_must_be_the_patched_one(
    serve_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env_base: str | None,
    refused: bool,
) -> None:
    """Injected fault: the venv's vLLM is unpatched, so a manifest of a 0.34.0 image stands in for the
    real one (tests/e2e/build/test_image_gpu.py checks that a built image's manifest and VFLEET_VLLM_BASE agree)."""
    from vfleet import preflight

    manifest = (Path("/x/vfleet_patch_manifest.json"), {"base_version": "0.34.0"})
    monkeypatch.setattr(preflight, "patch_manifest", lambda: manifest)
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    if env_base:
        monkeypatch.setenv("VFLEET_VLLM_BASE", env_base)
    code = main(["serve", "--dry-run"])
    err = capsys.readouterr().err
    if refused:
        assert code == 3 and "patched for base 0.34.0" in err and "remove VFLEET_VLLM_BASE" in err, err
    else:
        assert "patched for base" not in err, err
