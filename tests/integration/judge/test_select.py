"""`vfleet select`: platform detection from amd-smi / rocm-smi / nvidia-smi output, and profile choice.

No GPU is reachable from CI, so the vendor tools are injected: each test puts a stand-in executable on PATH that
prints an output of the real tool (tests/fixtures/smi/README.md says which were recorded). Everything after the
tool (subprocess, parsing, matching, selection, CLI) is the real code path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vfleet.cli import main
from vfleet.detect import parse_amd_smi, parse_nvidia_smi, parse_rocm_smi, select
from vfleet.errors import SelectError
from vfleet.gpus import detect_host
from vfleet.profiles import Catalog

SMI = Path(__file__).parents[2] / "fixtures" / "smi"


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Install stand-in vendor tools: tools(amd_smi=..., nvidia_smi=...) with fixture file names."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", str(bindir))  # hides any real tool of this host
    monkeypatch.delenv("VFLEET_PROFILE", raising=False)
    monkeypatch.delenv("VFLEET_PLATFORM", raising=False)

    def install(**outputs: str) -> None:
        for tool, fixture in outputs.items():
            exe = bindir / tool.replace("_", "-")
            exe.write_text(f"#!/bin/sh\nexec /bin/cat {SMI / fixture}\n")
            exe.chmod(0o755)

    return install


@pytest.mark.parametrize(
    ("outputs", "model", "profile", "described"),
    [
        (
            {"amd_smi": "mi355x.amd-smi.json"},
            "glm-5.3-flash",
            "glm-5.3-flash/mi355x",
            "8 x AMD Instinct MI355X (vendor amd, arch gfx950, via amd-smi)",
        ),
        ({"amd_smi": "mi355x.amd-smi.json"}, "kimi-k3", "kimi-k3/mi355x", None),
        (
            {"rocm_smi": "mi350x.rocm-smi.json"},
            "glm-5.3-flash",
            "glm-5.3-flash/mi350x",
            "8 x AMD Instinct MI350X (vendor amd, arch gfx950, via rocm-smi)",
        ),
        (
            {"nvidia_smi": "b200.nvidia-smi.csv"},
            "glm-5.3-flash",
            "glm-5.3-flash/b200",
            "8 x NVIDIA B200 (vendor nvidia, arch sm_100, via nvidia-smi)",
        ),
        ({"nvidia_smi": "gb300.nvidia-smi.csv"}, "kimi-k3", "kimi-k3/gb300", None),
        (
            {"nvidia_smi": "h200.nvidia-smi.csv"},
            "glm-5.3-flash",
            "glm-5.3-flash/h200",
            "8 x NVIDIA H200 (vendor nvidia, arch sm_90, via nvidia-smi)",
        ),
        ({}, "tiny", "tiny/cpu", "no GPU found"),
    ],
)
def test_select_picks_the_profile(tools, outputs, model, profile, described, capsys) -> None:  # type: ignore[no-untyped-def]
    tools(**outputs)
    host = detect_host()
    if described:
        assert host.describe().startswith(described)
    assert select(Catalog(), model, host=host).name == profile
    assert main(["select", "--model", model]) == 0
    assert capsys.readouterr().out.strip() == profile


def test_no_profile_fits_lists_what_was_detected(tools, capsys) -> None:  # type: ignore[no-untyped-def]
    tools(nvidia_smi="h200.nvidia-smi.csv")
    assert main(["select", "--model", "kimi-k3"]) == 2
    err = capsys.readouterr().err
    assert (
        "no kimi-k3 profile fits this host: detected 8 x NVIDIA H200 (vendor nvidia, arch sm_90, via "
        "nvidia-smi); kimi-k3 has profiles for mi355x, b200, gb300. Set VFLEET_PLATFORM=<platform>"
    ) in err


def test_no_gpu_host_for_a_gpu_model(tools, capsys) -> None:  # type: ignore[no-untyped-def]
    tools()
    assert main(["select", "--model", "glm-5.3-flash"]) == 2
    err = capsys.readouterr().err
    assert "no glm-5.3-flash profile fits this host: detected no GPU found (vendor cpu" in err


def test_too_few_gpus(tools) -> None:  # type: ignore[no-untyped-def]
    tools(nvidia_smi="h200x2.nvidia-smi.csv")
    with pytest.raises(SelectError, match=r"profile glm-5\.3-flash/h200 needs 8 GPUs but this host has 2"):
        select(Catalog(), "glm-5.3-flash", host=detect_host)


def test_environment_overrides_detection(tools, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    tools(nvidia_smi="h200.nvidia-smi.csv")
    monkeypatch.setenv("VFLEET_PLATFORM", "b200")
    assert select(Catalog(), "glm-5.3-flash", host=detect_host).name == "glm-5.3-flash/b200"
    monkeypatch.setenv("VFLEET_PROFILE", "kimi-k3/gb300")
    assert select(Catalog(), "", host=detect_host).name == "kimi-k3/gb300"
    with pytest.raises(SelectError, match=r"VFLEET_PROFILE=kimi-k3/gb300 is for model kimi-k3, not glm-5\.3-flash"):
        select(Catalog(), "glm-5.3-flash", host=detect_host)


def test_select_json(tools, capsys) -> None:  # type: ignore[no-untyped-def]
    tools(amd_smi="mi355x.amd-smi.json")
    assert main(["select", "--model", "glm-5.3-flash", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["profile"] == "glm-5.3-flash/mi355x"
    assert doc["host"]["arch"] == "gfx950" and len(doc["host"]["gpus"]) == 8


def test_parsers_reject_garbage() -> None:
    assert parse_nvidia_smi("NVIDIA-SMI has failed because it couldn't communicate with the driver\n") is None
    assert parse_amd_smi("not json") is None
    assert parse_amd_smi("[]") is None
    assert parse_rocm_smi('{"system": {"Driver version": "6.8"}}') is None
    assert os.path.exists(SMI / "README.md")


def test_a_failing_tool_falls_through_to_the_next(tools, tmp_path) -> None:  # type: ignore[no-untyped-def]
    tools(nvidia_smi="b200.nvidia-smi.csv")
    broken = tmp_path / "bin" / "amd-smi"
    broken.write_text("#!/bin/sh\necho 'amdgpu driver not loaded' >&2\nexit 1\n")
    broken.chmod(0o755)
    assert detect_host().vendor == "nvidia"


def test_recorded_h200_device_output(tools) -> None:  # type: ignore[no-untyped-def]
    """nvidia-smi as recorded on the one-GPU H200 machine of the device tool."""
    tools(nvidia_smi="h200-device.nvidia-smi.csv")
    host = detect_host()
    assert host.describe() == "1 x NVIDIA H200 (vendor nvidia, arch sm_90, via nvidia-smi)"
    with pytest.raises(SelectError, match=r"profile glm-5\.3-flash/h200 needs 8 GPUs but this host has 1"):
        select(Catalog(), "glm-5.3-flash", host=host)
