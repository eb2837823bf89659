"""The answers gate's A/A floors on a GPU (issue 32, part 4): one boot of smollm2-135m served by vLLM on the
device machine, measured as boot-verify's answers gate records it, idle and under client traffic; and, on a
boot with the test-only numerics-fault plugin (tests/numfault), the same records per fault setting.
benchmarks/h200_answers.sh stages vLLM and the model and runs this on the device; `report` runs here.

    python benchmarks/bench_answers_gpu.py boot --url URL --label graph-1 --out DIR [--repeats 3] [--traffic 16]
    python benchmarks/bench_answers_gpu.py faults --url URL --label eager-f --control FILE --out DIR
    python benchmarks/bench_answers_gpu.py report DIR... [--factor 2] [--json FILE]

`boot` writes DIR/LABEL.json: the reference text's log-probabilities REPEATS times on the idle server, then
REPEATS times while TRAFFIC streaming chat requests (sampled, 64 to 512 tokens, restarted as they end) run
beside them (vLLM's num_requests_running read before and after each), then the question set at each of
--levels (greedy, runner.run_set). `faults` writes DIR/LABEL.json with, per setting of --settings (the plugin's
`key=value,...`; fault=off first and last), the set at the highest level and one reference record; after each
setting the prefix cache is reset (the server runs with VLLM_SERVER_DEV_MODE=1).
`report` prints the drift of every pair (same boot, boot against boot, idle against traffic, graph against
eager), the accuracies and whether the answers are identical, the allowance FACTOR x the largest A/A value,
and each fault's verdict against the clean runs; --json writes the figures. The API key, if the server needs
one, is read from VLLM_API_KEY.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from itertools import combinations
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vfleet.profile_answers import AnswersSpec, DriftAllowance  # noqa: E402
from vfleet.verify.answers.drift import Drift, allowance_from_aa, drift  # noqa: E402
from vfleet.verify.answers.questions import QuestionSet, load_set  # noqa: E402
from vfleet.verify.answers.records import AnswerRecord, LogprobRecord  # noqa: E402
from vfleet.verify.answers.runner import reference_logprobs, run_set  # noqa: E402
from vfleet.verify.answers.verdict import judge  # noqa: E402
from vfleet.verify.client import HTTP, Client  # noqa: E402

TOPICS = ("the sea", "a train journey", "bread", "the moon", "a library", "winter", "bees", "a market", "rivers")


def client(url: str, model: str) -> Client:
    return Client(base_url=url, api_key=os.environ.get("VLLM_API_KEY") or None, model=model, timeout_s=300)


def running(c: Client) -> float | None:
    """vLLM's num_requests_running gauge (summed over its labels), or None when /metrics has none."""
    try:
        status, body = c.get("/metrics", timeout_s=10)
    except httpx.HTTPError:
        return None
    vals = [float(m) for m in re.findall(r"^vllm:num_requests_running\{[^}]*\} ([0-9.e+]+)$", body, re.M)]
    return sum(vals) if status == 200 and vals else None


class Traffic:
    """N threads, each streaming one sampled chat completion after another until stopped."""

    def __init__(self, c: Client, n: int, seed: int) -> None:
        self.c, self.n, self.rng = c, n, random.Random(seed)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.active = self.done = self.tokens = self.errors = 0
        self.threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(n)]

    def _loop(self, i: int) -> None:
        rng = random.Random(self.rng.random() + i)
        headers = {"Content-Type": "application/json"}
        if self.c.api_key:
            headers["Authorization"] = f"Bearer {self.c.api_key}"
        with httpx.Client(timeout=300) as http:
            while not self.stop.is_set():
                payload = {
                    "model": self.c.model,
                    "messages": [{"role": "user", "content": f"Write a long story about {rng.choice(TOPICS)}."}],
                    "max_tokens": rng.randint(64, 512),
                    "temperature": 0.8,
                    "seed": rng.randint(0, 1 << 30),
                    "stream": True,
                }
                with self.lock:
                    self.active += 1
                try:
                    url = self.c.base_url.rstrip("/") + "/v1/chat/completions"
                    with http.stream("POST", url, json=payload, headers=headers) as resp:
                        for line in resp.iter_lines():
                            if self.stop.is_set():
                                break
                            if line.startswith("data: {"):
                                with self.lock:
                                    self.tokens += 1
                except httpx.HTTPError:
                    with self.lock:
                        self.errors += 1
                finally:
                    with self.lock:
                        self.active -= 1
                        self.done += 1

    def __enter__(self) -> Traffic:
        for t in self.threads:
            t.start()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 30:  # until every stream has sent tokens
            with self.lock:
                if self.active == self.n and self.tokens >= 4 * self.n:
                    break
            time.sleep(0.2)
        time.sleep(1.0)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)

    def state(self) -> dict[str, int]:
        with self.lock:
            return {"active": self.active, "done": self.done, "tokens": self.tokens, "errors": self.errors}


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.monotonic()
    out = fn()
    return out, round(time.monotonic() - t0, 3)


def cmd_boot(args: argparse.Namespace) -> int:
    c = client(args.url, args.model)
    qset = load_set(args.set)
    c.post_json(
        "/v1/chat/completions", {"model": c.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    )
    out: dict[str, Any] = {"label": args.label, "url": args.url, "model": args.model, "set": args.set}
    idle = []
    for _ in range(args.repeats):
        rec, s = timed(lambda: reference_logprobs(c, args.reference))
        idle.append({"record": rec.as_dict(), "seconds": s, "running_before": running(c)})
    out["idle"] = idle
    busy = []
    with Traffic(c, args.traffic, seed=hash(args.label) & 0xFFFF) as traffic:
        out["traffic_start"] = traffic.state()
        for _ in range(args.repeats):
            before = running(c)
            rec, s = timed(lambda: reference_logprobs(c, args.reference))
            busy.append({"record": rec.as_dict(), "seconds": s, "running_before": before, "running_after": running(c)})
            time.sleep(0.3)
        out["traffic_end"] = traffic.state()
    out["traffic"] = busy
    out["traffic_streams"] = args.traffic
    out["answers"] = {}
    for level in (int(x) for x in args.levels.split(",")):
        rec, s = timed(partial(run_set, c, qset, level, args.max_tokens))
        out["answers"][str(level)] = {"record": rec.as_dict(), "seconds": s}
        print(f"{args.label}: c={level} {rec.right}/{len(rec.items)} right, {len(rec.errors)} errors, {s:.1f} s")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"{args.label}.json").write_text(json.dumps(out) + "\n")
    return 0


def apply(c: Client, control: Path, setting: str) -> dict[str, Any]:
    """Put SETTING in force through the plugin's control file (tests/numfault/harness.py's FaultServer.set)."""
    applied_path = control.with_name(control.name + ".applied")
    applied_path.unlink(missing_ok=True)
    control.write_text(setting)
    c.post_json("/v1/completions", {"model": c.model, "prompt": "Hello", "max_tokens": 1})
    applied: dict[str, Any] = json.loads(applied_path.read_text())
    if applied.get("setting") != setting or "error" in applied:
        raise RuntimeError(f"the plugin did not apply {setting!r}: {applied}")
    # KV blocks cached under the previous setting (the question set's system prompt) would be reused by the
    # next run: a fault would reach the answers only past the shared prefix, and fault=off would still carry
    # the last fault's KV. vLLM's dev endpoint (VLLM_SERVER_DEV_MODE=1) drops the cache.
    status = HTTP.post(c.base_url.rstrip("/") + "/reset_prefix_cache", timeout=30).status_code
    if status != 200:
        raise RuntimeError(f"POST /reset_prefix_cache answered {status}: start the server with VLLM_SERVER_DEV_MODE=1")
    return applied


def cmd_faults(args: argparse.Namespace) -> int:
    c = client(args.url, args.model)
    qset = load_set(args.set)
    level = max(int(x) for x in args.levels.split(","))
    runs = []
    for setting in ["fault=off", *args.settings, "fault=off"]:
        try:
            applied = apply(c, Path(args.control), setting)
        except (RuntimeError, OSError, ValueError) as exc:
            runs.append({"setting": setting, "error": str(exc)[:300]})
            print(f"{args.label}: {setting}: NOT APPLIED ({exc})")
            continue
        ans, s = timed(lambda: run_set(c, qset, level, args.max_tokens))
        ref = reference_logprobs(c, args.reference)
        runs.append(
            {"setting": setting, "applied": applied, "answers": ans.as_dict(), "logprobs": ref.as_dict(), "seconds": s}
        )
        print(f"{args.label}: {setting}: {ans.right}/{len(ans.items)} right")
    out = {"label": args.label, "model": args.model, "set": args.set, "level": level, "runs": runs}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"{args.label}.json").write_text(json.dumps(out) + "\n")
    return 0


# --- report (here) ---------------------------------------------------------------------------------------


def fmt(d: Drift) -> dict[str, float]:
    return {"mean_abs": d.mean_abs, "p99": d.p99, "max_abs": d.max_abs, "top1_share": d.top1_share}


def worst(ds: list[Drift]) -> dict[str, Any]:
    if not ds:
        return {"pairs": 0}
    return {
        "pairs": len(ds),
        "mean_abs": max(d.mean_abs for d in ds),
        "p99": max(d.p99 for d in ds),
        "max_abs": max(d.max_abs for d in ds),
        "top1_share": max(d.top1_share for d in ds),
    }


def load_boots(dirs: list[Path]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    boots, faults = {}, {}
    for d in dirs:
        for f in sorted(d.glob("*.json")):
            data = json.loads(f.read_text())
            if "runs" in data:
                faults[data["label"]] = data
            elif "idle" in data:
                boots[data["label"]] = data
    return boots, faults


def recs(boot: dict[str, Any], kind: str) -> list[LogprobRecord]:
    return [LogprobRecord.from_dict(r["record"]) for r in boot[kind]]


def subset(rec: AnswerRecord, qs: QuestionSet | None) -> AnswerRecord:
    """REC restricted to the items of QS (a set derived from the one asked), as if QS had been asked."""
    if qs is None:
        return rec
    ids = {i.id for i in qs.items}
    items = tuple(a for a in rec.items if a.id in ids)
    named = {"set_name": qs.name, "set_version": qs.version, "set_sha256": qs.sha256}
    return AnswerRecord(**{**rec.__dict__, **named, "items": items})


def cmd_report(args: argparse.Namespace) -> int:
    boots, faults = load_boots([Path(d) for d in args.dirs])
    mode = {label: label.split("-")[0] for label in boots}
    groups: dict[str, list[Drift]] = {}

    def add(name: str, d: Drift) -> None:
        groups.setdefault(name, []).append(d)

    for label, b in boots.items():
        m = mode[label]
        for x, y in combinations(recs(b, "idle"), 2):
            add(f"{m}: same boot, idle repeats", drift(x, y))
        for x, y in combinations(recs(b, "traffic"), 2):
            add(f"{m}: same boot, repeats under traffic", drift(x, y))
        for x in recs(b, "idle"):
            for y in recs(b, "traffic"):
                add(f"{m}: same boot, idle vs under traffic", drift(x, y))
    for la, lb in combinations(sorted(boots), 2):
        a, b = boots[la], boots[lb]
        if mode[la] == mode[lb]:
            for x in recs(a, "idle"):
                for y in recs(b, "idle"):
                    add(f"{mode[la]}: boot vs boot (A/A), idle", drift(x, y))
            for x in recs(a, "idle") + recs(a, "traffic"):
                for y in recs(b, "idle") + recs(b, "traffic"):
                    add(f"{mode[la]}: boot vs boot (A/A), idle or under traffic", drift(x, y))
        else:
            for x in recs(a, "idle"):
                for y in recs(b, "idle"):
                    add("graph vs eager, idle", drift(x, y))
            for x in recs(a, "idle") + recs(a, "traffic"):
                for y in recs(b, "idle") + recs(b, "traffic"):
                    add("graph vs eager, idle or under traffic", drift(x, y))
    table = {k: worst(v) for k, v in groups.items()}
    qs = load_set(args.items) if args.items else None
    answers = answer_table(boots, qs)
    within = [d for k, v in groups.items() for d in v if not k.startswith("graph vs eager")]
    allowance = allowance_from_aa(within, args.factor, args.measured_by)
    everything = allowance_from_aa([d for v in groups.values() for d in v], args.factor, args.measured_by)
    result = {
        "drift": table, "answers": answers, "factor": args.factor,
        "allowance_within_mode": allowance.model_dump(), "allowance_with_graph_vs_eager": everything.model_dump(),
    }  # fmt: skip
    result["traffic"] = {lab: traffic_seen(b) for lab, b in boots.items()}
    if faults:
        allowances = {"within_mode": allowance, "with_graph_vs_eager": everything}
        result["faults"] = fault_table(faults, boots, allowances, qs)
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def traffic_seen(boot: dict[str, Any]) -> dict[str, Any]:
    """The streams asked for, vLLM's running requests before each reference request, the streams' totals."""
    running_seen = [r["running_before"] for r in boot["traffic"]]
    return {"streams": boot["traffic_streams"], "running": running_seen, **boot["traffic_end"]}


def answer_table(boots: dict[str, dict[str, Any]], qs: QuestionSet | None) -> dict[str, Any]:
    runs = {
        f"{lab}@c{lvl}": subset(AnswerRecord.from_dict(r["record"]), qs)
        for lab, b in sorted(boots.items())
        for lvl, r in b["answers"].items()
    }
    first = next(iter(runs.values()))
    texts = {k: [a.response for a in r.items] for k, r in runs.items()}
    ref = texts[next(iter(runs))]
    return {
        "items": len(first.items),
        "runs": {
            k: {"right": r.right, "accuracy": r.right / len(r.items), "errors": len(r.errors)} for k, r in runs.items()
        },
        "differing_from_first": {k: sum(x != y for x, y in zip(t, ref, strict=True)) for k, t in texts.items()},
        "all_identical": all(t == ref for t in texts.values()),
    }


def fault_table(
    faults: dict[str, dict[str, Any]],
    boots: dict[str, dict[str, Any]],
    allowances: dict[str, DriftAllowance],
    qs: QuestionSet | None,
) -> list[dict[str, Any]]:
    """Each run of each fault boot judged (verdict.judge) against two clean baselines: the boot's own first
    fault=off run, and the first clean boot of the same mode (another server, as promotion compares), under
    each allowance of ALLOWANCES."""
    rows = []
    for label, f in faults.items():
        mode, level = label.split("-")[0], str(f["level"])
        clean = next((r for r in f["runs"] if r["setting"] == "fault=off" and "answers" in r), None)
        other = next(
            (boots[b] for b in sorted(boots) if b.split("-")[0] == mode and level in boots[b]["answers"]), None
        )
        bases: dict[str, tuple[AnswerRecord, LogprobRecord]] = {}
        if clean is not None:
            bases["same boot"] = (AnswerRecord.from_dict(clean["answers"]), LogprobRecord.from_dict(clean["logprobs"]))
        if other is not None:
            other_ans = AnswerRecord.from_dict(other["answers"][level]["record"])
            bases[f"{other['label']}"] = (other_ans, LogprobRecord.from_dict(other["idle"][0]["record"]))
        qset = qs or load_set(f["set"])
        for r in f["runs"]:
            row: dict[str, Any] = {"boot": label, "mode": mode, "setting": r["setting"]}
            if "answers" not in r:
                rows.append({**row, "error": r.get("error")})
                continue
            ans, lp = subset(AnswerRecord.from_dict(r["answers"]), qs), LogprobRecord.from_dict(r["logprobs"])
            row.update(right=ans.right, items=len(ans.items), against={})
            for base_name, (b_ans, b_lp) in bases.items():
                b_ans = subset(b_ans, qs)
                one: dict[str, Any] = {"drift": fmt(drift(b_lp, lp)), "base_right": b_ans.right}
                one["answers_differing"] = sum(
                    x.response != y.response for x, y in zip(ans.items, b_ans.items, strict=True)
                )
                for name, allowance in allowances.items():
                    v = judge(AnswersSpec(concurrency=f["level"], drift=allowance), qset, ans, lp, b_ans, b_lp)
                    one[name] = {
                        "ok": v.ok, "accuracy_ok": v.accuracy.ok if v.accuracy else None,
                        "drift_ok": v.drift.ok if v.drift else None, "reasons": list(v.reasons),
                    }  # fmt: skip
                row["against"][base_name] = one
            rows.append(row)
    return rows


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("boot", "faults"):
        s = sub.add_parser(name)
        s.add_argument("--url", required=True)
        s.add_argument("--label", required=True, help="MODE-N: graph-1, eager-2, ...")
        s.add_argument("--out", required=True)
        s.add_argument("--model", default="smollm2-135m")
        s.add_argument("--set", default="basic-v1")
        s.add_argument("--reference", default="reference-v1")
        s.add_argument("--levels", default="1,32")
        s.add_argument("--max-tokens", type=int, default=16)
    sub.choices["boot"].add_argument("--repeats", type=int, default=3)
    sub.choices["boot"].add_argument("--traffic", type=int, default=16)
    sub.choices["faults"].add_argument("--control", required=True, help="the plugin's VFLEET_NUMFAULT_FILE")
    sub.choices["faults"].add_argument("--settings", nargs="+", required=True)
    r = sub.add_parser("report")
    r.add_argument("dirs", nargs="+")
    r.add_argument("--factor", type=float, default=2.0)
    r.add_argument("--items", help="score only the items of this set (a subset of the asked set)")
    r.add_argument("--measured-by", default="benchmarks/bench_answers_gpu.py report")
    r.add_argument("--json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return {"boot": cmd_boot, "faults": cmd_faults, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())
