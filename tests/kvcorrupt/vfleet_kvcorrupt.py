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
cache blocks of that prefix corrupted. The KV tensors are the ones vLLM's CPU runner zeroes in
`_zero_block_ids` (block index first).
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
    for group in runner.kv_cache_config.kv_cache_groups:
        for name in group.layer_names:
            ctx = runner.compilation_config.static_forward_context.get(name)
            kv = getattr(ctx, "kv_cache", None)
            if isinstance(kv, torch.Tensor) and kv.data_ptr() not in seen:
                seen.add(kv.data_ptr())
                out.append(kv)
    return out


def register() -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    if getattr(GPUModelRunner.execute_model, "_vfleet_kvcorrupt", False):
        return
    original = GPUModelRunner.execute_model
    done: set[tuple[int, int]] = set()

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
            with torch.no_grad():
                for kv in _kv_tensors(self):
                    for b in blocks:
                        block = kv[b]
                        before = block.clone()
                        if cfg["mode"] == "zeros":
                            block.zero_()
                        else:
                            noise = torch.randn(block.shape, generator=gen, dtype=torch.float32)
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
    GPUModelRunner.execute_model = execute_model  # type: ignore[method-assign]
