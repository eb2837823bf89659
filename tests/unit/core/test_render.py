"""`vfleet render` and `vfleet profiles`: what a node gets, taken from the profile and the platform only."""

from __future__ import annotations

import json
import shlex

import pytest

from vfleet.cli import main
from vfleet.paths import versions


def test_render_rocm_docker_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "render",
                "glm-5.3-flash/mi355x",
                "--format",
                "docker",
                "--image",
                "reg.local/vfleet-rocm@sha256:ab",
                "--model-dir",
                "/data/glm",
                "--host-port",
                "9000",
            ]
        )
        == 0
    )
    argv = shlex.split(capsys.readouterr().out)
    line = " ".join(argv)
    for part in (
        "--device /dev/kfd",
        "--device /dev/dri",
        "--group-add video",
        "--ipc=host",
        "--shm-size 64g",
        "--volume /data/glm:/models/GLM-5.3-Flash-FP8:ro",
        "--volume vfleet-cache:/root/.cache",
        "--publish 9000:8000",
        "--env-file /etc/vfleet/secrets.env",
        "--env VFLEET_PROFILE=glm-5.3-flash/mi355x",
        "--label org.vfleet.profile=glm-5.3-flash/mi355x",
    ):
        assert part in line, part
    assert "--gpus" not in argv
    assert argv[-1] == "reg.local/vfleet-rocm@sha256:ab"
    # The environment is applied by the image from the same profile, never copied onto the command line.
    assert "VLLM_ROCM_USE_AITER" not in line


def test_render_cuda_uses_gpus_and_no_rocm_devices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "kimi-k3/b200", "--format", "docker", "--env-file", ""]) == 0
    line = capsys.readouterr().out
    assert "--gpus all" in line and "/dev/kfd" not in line and "--env-file" not in line
    assert f"vfleet-cuda:{versions()['vllm']['version']}-vfleet" in line
    assert "--volume /srv/models-draft:/models/Kimi-K3-DSpark:ro" in line


def test_render_json_and_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "kimi-k3/mi355x", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["env"] == {"VLLM_USE_BREAKABLE_CUDAGRAPH": "0"}
    assert doc["vllm_negative_flags"] == ["--no-enable-prefix-caching"]
    assert "enable-prefix-caching" not in doc["vllm_config_yaml"]
    assert doc["verify"]["prefix_cache"] is False
    assert main(["render", "tiny/cpu", "--format", "env"]) == 0
    assert "VLLM_CPU_KVCACHE_SPACE=1" in capsys.readouterr().out.splitlines()


def test_render_text_has_every_part(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "glm-5.3-flash/h200"]) == 0
    out = capsys.readouterr().out
    for heading in ("## vLLM config", "## vLLM command", "## environment", "## docker run"):
        assert heading in out
    assert "kv-cache-dtype: bfloat16" in out


def test_profiles_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles", "--json"]) == 0
    rows = {r["profile"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["glm-5.3-flash/gb300"]["gpus"] == 4
    assert rows["tiny/cpu"]["production"] is False
