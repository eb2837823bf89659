"""GPU health after a boot-verify run, inside the serving container.

Allocation plus a matmul on every visible GPU (torch, which the serving image has), then the vendor
diagnostic where installed: `dcgmi diag -r 1` on NVIDIA, `amd-smi metric` on AMD.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

MATMUL = r"""
import json, torch
out = {"devices": 0, "problems": []}
n = torch.cuda.device_count()
out["devices"] = n
if n == 0:
    out["problems"].append("torch sees no GPU")
for i in range(n):
    try:
        with torch.cuda.device(i):
            a = torch.randn(4096, 4096, device=f"cuda:{i}", dtype=torch.float32)
            b = torch.randn(4096, 4096, device=f"cuda:{i}", dtype=torch.float32)
            c = a @ b
            ref = (a[:64].double() @ b.double()).float()
            err = (c[:64] - ref).abs().max().item() / max(1e-6, ref.abs().max().item())
            torch.cuda.synchronize()
            if not (err < 1e-2):
                out["problems"].append(f"GPU {i}: matmul relative error {err:.3g}")
            del a, b, c, ref
    except Exception as exc:
        out["problems"].append(f"GPU {i}: {type(exc).__name__}: {exc}")
print(json.dumps(out))
"""


def _exec(prefix: list[str], cmd: list[str], timeout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=timeout, check=False)


def run_gpu_health(container: str | None, vendor: str, python: str = "python3") -> dict[str, Any]:
    """Run the checks in ``container`` (or on this host when None). Returns ok, problems and details."""
    prefix = ["docker", "exec", container] if container else []
    problems: list[str] = []
    details: dict[str, Any] = {}
    proc = _exec(prefix, [python, "-c", MATMUL], timeout=300)
    if proc.returncode != 0:
        problems.append(f"matmul script exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    else:
        try:
            data = json.loads(proc.stdout.strip().splitlines()[-1])
            details["devices"] = data["devices"]
            problems.extend(data["problems"])
        except (ValueError, IndexError, KeyError):
            problems.append(f"matmul script printed no result: {proc.stdout[-300:]!r}")
    tool = ["dcgmi", "diag", "-r", "1"] if vendor == "nvidia" else ["amd-smi", "metric"]
    have = _exec(prefix, ["sh", "-c", f"command -v {tool[0]}"], timeout=30)
    if have.returncode == 0:
        diag = _exec(prefix, tool, timeout=600)
        details["diag"] = {"command": " ".join(tool), "rc": diag.returncode, "tail": diag.stdout[-2000:]}
        if diag.returncode != 0 or "Fail" in diag.stdout:
            problems.append(f"`{' '.join(tool)}` reported a failure (rc {diag.returncode})")
    else:
        details["diag"] = {"command": " ".join(tool), "skipped": f"{tool[0]} not installed"}
    return {"ok": not problems, "problems": problems, **details}
