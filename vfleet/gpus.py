"""This machine's GPUs as amd-smi, rocm-smi and nvidia-smi report them: the tools run here, their output read by
vfleet.detect (plain data, on the core floor). Kept apart from vfleet.host, which every fleet gate's `vfleet`
process imports (through dockerd) and which must stay light: detect reads profiles and settings (pydantic)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable

from vfleet.detect import HostInfo, parse_amd_smi, parse_nvidia_smi, parse_rocm_smi

#: Runs a detection tool: its output, or None when it is absent or fails.
Runner = Callable[[list[str]], str | None]


def run_tool(argv: list[str]) -> str | None:
    """Run a detection tool; None when it is absent or fails."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def detect_host(runner: Runner = run_tool) -> HostInfo:
    """Ask amd-smi, then rocm-smi, then nvidia-smi. A host with none of them is a CPU host."""
    probes: list[tuple[list[str], Callable[[str], HostInfo | None]]] = [
        (["amd-smi", "static", "--asic", "--json"], parse_amd_smi),
        (["rocm-smi", "--showproductname", "--json"], parse_rocm_smi),
        (["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"], parse_nvidia_smi),
    ]
    for argv, parse in probes:
        out = runner(argv)
        if out:
            info = parse(out)
            if info is not None:
                return info
    return HostInfo("cpu", os.uname().machine, [], "amd-smi, rocm-smi, nvidia-smi: none found")
