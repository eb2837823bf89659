"""The integrity probe's noise rule under client traffic: clean false alarms, the noise floor and the
cached-vs-salted gap per question, with N concurrent client streams beside the probe.

    python3 benchmarks/bench_probe_noise.py --url http://127.0.0.1:8000 --profile P --streams 4 --runs 10 \\
        --label graph-c4 --out DIR

Starts --streams client loops (each sends one completion at a time: a unique prompt of about
--prompt-words words, --output-tokens tokens, ignore_eos; no two share a prefix block, so they add no
prefix-cache hits), waits until each has finished one request, then runs the probe
(vfleet.verify.probe.integrity.integrity_probe, the profile's own spec) --runs times back to back, and stops
the streams. Writes DIR/LABEL.jsonl: one line per probe with each question's verdict, its noise (the gap
between its two cache_salt answers), the probe's floor and allowance, the gap to the nearer cache_salt
answer, flips, and the raw answers (token ids, top logprobs) of every question; and a last summary line
(false alarms, too-noisy questions, medians and maxima, the streams' completed requests and output
tokens per second over the probe window). Prints the summary.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from vfleet.profiles import Catalog
from vfleet.verify.client import Client
from vfleet.verify.probe.cache import NAMES as WORDS
from vfleet.verify.probe.integrity import integrity_probe


class Streams:
    """N client loops, each one request at a time, counting what completed."""

    def __init__(self, client: Client, n: int, prompt_words: int, output_tokens: int) -> None:
        self.client, self.n, self.prompt_words, self.output_tokens = client, n, prompt_words, output_tokens
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.done = 0
        self.tokens = 0
        self.errors: list[str] = []
        self.started = [threading.Event() for _ in range(n)]
        self.threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(n)]

    def _loop(self, i: int) -> None:
        k = 0
        while not self.stop.is_set():
            words = " ".join(WORDS[(i * 7 + k + j * j) % len(WORDS)] for j in range(self.prompt_words))
            prompt = f"[stream {i} {k} {uuid.uuid4().hex}] {words}"
            try:
                out = self.client.complete(prompt, max_tokens=self.output_tokens, ignore_eos=True)
                n = int((out.get("usage") or {}).get("completion_tokens") or 0) if isinstance(out, dict) else 0
                with self.lock:
                    self.done += 1
                    self.tokens += n
            except Exception as exc:  # a stream error is recorded, not fatal: the summary counts it
                with self.lock:
                    self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
            self.started[i].set()
            k += 1

    def __enter__(self) -> Streams:
        for t in self.threads:
            t.start()
        for e in self.started:
            e.wait(timeout=120)
        return self

    def snapshot(self) -> tuple[int, int]:
        with self.lock:
            return self.done, self.tokens

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)


def probe_row(res: Any, label: str, run: int, seconds: float) -> dict[str, Any]:
    qs = res.questions_judged
    return {
        "label": label,
        "run": run,
        "probe_s": round(seconds, 1),
        "noise_factor": res.noise_factor,
        "noise_bound": res.noise_bound,
        "tolerance": res.logprob_tolerance,
        "floor": res.noise_floor,
        "allowance": res.allowance,
        "rounds": res.noise_rounds,
        "salted_answers": [q["salted_answers"] for q in qs],
        "verdicts": [q["verdict"] for q in qs],
        "noise": [q["noise"] for q in qs],
        "noise_flip": [q["noise_flip"] for q in qs],
        "gap": [q["max_gap"] for q in qs],
        "cached_flip": [q["first_diff_position"] for q in qs],
        "hit_problems": res.hit_problems(),
        "records": res.records,
    }


def summary(
    rows: list[dict[str, Any]], label: str, streams: int, window_s: float, done: int, tokens: int
) -> dict[str, Any]:
    noise = [n for r in rows for n in r["noise"]]
    gaps = [g for r in rows for g in r["gap"]]
    verdicts = [v for r in rows for v in r["verdicts"]]
    return {
        "summary": label,
        "streams": streams,
        "probes": len(rows),
        "questions": len(verdicts),
        "false_alarms": verdicts.count("mismatch"),
        "probes_failed": sum(1 for r in rows if "mismatch" in r["verdicts"]),
        "probes_with_rounds": sum(1 for r in rows if r["rounds"]),
        "max_rounds": max((r["rounds"] for r in rows), default=0),
        "too_noisy": verdicts.count("too noisy"),
        "questions_with_noise": sum(1 for n in noise if n > 0),
        "questions_with_gap": sum(1 for g in gaps if g > 0),
        "median_noise": statistics.median(noise) if noise else None,
        "max_noise": max(noise, default=None),
        "median_gap": statistics.median(gaps) if gaps else None,
        "max_gap": max(gaps, default=None),
        "median_floor": statistics.median(r["floor"] for r in rows) if rows else None,
        "salted_flips": sum(1 for r in rows for f in r["noise_flip"] if f is not None),
        "cached_flips": sum(1 for r in rows for f in r["cached_flip"] if f is not None),
        "probes_with_hit_problems": sum(1 for r in rows if r["hit_problems"]),
        "window_s": round(window_s, 1),
        "client_requests": done,
        "client_req_per_s": round(done / window_s, 3) if window_s else None,
        "client_out_tok_per_s": round(tokens / window_s, 1) if window_s else None,
    }


def _answer(r: dict[str, Any]) -> dict[str, Any]:
    # float32 logprobs round-trip exactly through 9 significant digits; the text is not needed by the rule
    return {"token_ids": r["token_ids"], "top": [{k: float(f"{v:.9g}") for k, v in t.items()} for t in r["top"]]}


def fixture(src: Path, dst: Path, note: str) -> None:
    """A recorded LABEL.jsonl as a small fixture: per probe, each question's cached and salted answers."""
    rows = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    probes = []
    for r in rows:
        if "records" not in r:
            continue
        qs = []
        for q in r["records"]:
            salted = q.get("salted") or [q["salted_a"], q["salted_b"]]  # the first recording named the pair
            qs.append({"cached": _answer(q["cached"]), "salted": [_answer(a) for a in salted]})
        probes.append({"run": r["run"], "hit_problems": len(r["hit_problems"]), "questions": qs})
    summ: dict[str, Any] = next((r for r in rows if "summary" in r), {})
    dst.write_text(json.dumps({"note": note, "summary": summ, "probes": probes}, separators=(",", ":")) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--fixture", nargs=2, type=Path, metavar=("JSONL", "JSON"), help="write a recorded run as a fixture"
    )
    ap.add_argument("--note", default="")
    ap.add_argument("--url")
    ap.add_argument("--profile")
    ap.add_argument("--streams", type=int, default=0)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--label")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--prompt-words", type=int, default=64)
    ap.add_argument("--output-tokens", type=int, default=64)
    args = ap.parse_args()
    if args.fixture:
        fixture(args.fixture[0], args.fixture[1], args.note)
        return
    if not (args.url and args.profile and args.label and args.out):
        ap.error("--url, --profile, --label and --out are required to measure")
    profile = Catalog().load(args.profile)
    client = Client(args.url, api_key=os.environ.get("VLLM_API_KEY"), model=profile.served_model_name())
    spec = profile.verify.integrity
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    with (
        (args.out / f"{args.label}.jsonl").open("w") as f,
        Streams(client, args.streams, args.prompt_words, args.output_tokens) as streams,
    ):
        d0, k0 = streams.snapshot()
        t0 = time.monotonic()
        for i in range(args.runs):
            t = time.monotonic()
            res = integrity_probe(
                client, spec, profile.verify.max_model_len, tag=f"noise-{args.label}-{i}-{time.time_ns()}"
            )
            row = probe_row(res, args.label, i, time.monotonic() - t)
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(json.dumps({k: v for k, v in row.items() if k != "records"}), flush=True)
            rows.append(row)
        window = time.monotonic() - t0
        d1, k1 = streams.snapshot()
        s = summary(rows, args.label, args.streams, window, d1 - d0, k1 - k0)
        s["stream_errors"] = streams.errors[:5]
        s["stream_error_count"] = len(streams.errors)
        f.write(json.dumps(s) + "\n")
    print(json.dumps(s), flush=True)


if __name__ == "__main__":
    main()
