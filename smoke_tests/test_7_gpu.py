"""2.7: GPU health after the run, inside the serving container."""

from __future__ import annotations

from typing import Any

import pytest

from vfleet.verify.probe.gpuhealth import run_gpu_health
from vfleet.verify.target import Target


def test_gpu_health(target: Target, figures: dict[str, Any]) -> None:
    p = target.profile
    if p.platform.family == "cpu" or p.platform.gpus == 0:
        pytest.skip(f"platform {p.platform.platform} has no GPUs; GPU health does not apply")
    if not target.container:
        pytest.skip("GPU health runs inside the serving container: pass --container NAME")
    res = run_gpu_health(target.container, p.platform.vendor)
    figures["gpu_health"] = res
    assert res["ok"], f"expected allocation + matmul on every GPU and a clean diag; saw: {res['problems']}"
