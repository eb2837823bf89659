"""Measuring a model on a question set, run by a person against a live server (docs/answers.md, "Choosing
the stable items"), not by boot-verify:

    python -m vfleet.verify.answers.select stable --url URL --model NAME --set basic-v1 --runs 3 \
        --concurrency 1,8 --name basic-smollm2 --out DIR
    python -m vfleet.verify.answers.select aa --url URL [--url URL2] --model NAME --runs 3 --out DIR

``stable`` asks the set RUNS times at each concurrency and writes a derived set of the items whose response
was the same text every time (right or wrong), with the counts, to DIR/NAME.jsonl and DIR/NAME.selection.json;
the file is then copied into sets/ under review. ``aa`` records the reference text's log-probabilities RUNS
times on each URL (the same image) and prints the drift between every two records and the allowance a profile
may declare from them, with the command line as ``measured_by``. The API key is read from VLLM_API_KEY or
``--api-key-env VAR``, never from the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from datetime import UTC, datetime
from itertools import combinations
from pathlib import Path
from typing import Any

from vfleet.verify.answers.drift import allowance_from_aa, drift
from vfleet.verify.answers.questions import QuestionSet, load_set
from vfleet.verify.answers.records import AnswerRecord, LogprobRecord
from vfleet.verify.answers.runner import reference_logprobs, run_set
from vfleet.verify.client import Client


def stable_ids(runs: list[AnswerRecord]) -> list[str]:
    """The ids, in set order, whose response text was the same in every run and that no run left unanswered."""
    if not runs:
        return []
    texts: dict[str, set[str]] = {}
    failed: set[str] = set()
    for run in runs:
        for a in run.items:
            texts.setdefault(a.id, set()).add(a.response.strip())
            if a.error:
                failed.add(a.id)
    return [a.id for a in runs[0].items if len(texts[a.id]) == 1 and a.id not in failed]


def derived_set(qset: QuestionSet, keep: list[str], name: str, about: str) -> str:
    """The JSON Lines text of the set NAME holding QSET's items KEEP, in QSET's order."""
    wanted = set(keep)
    lines = [json.dumps({"set": name, "version": 1, "scoring": qset.scoring, "about": about})]
    for item in qset.items:
        if item.id in wanted:
            row = {"id": item.id, "category": item.category, "question": item.question, "answer": item.answer}
            lines.append(json.dumps({**row, "aliases": list(item.aliases)}, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def _client(args: argparse.Namespace, url: str) -> Client:
    return Client(base_url=url, api_key=os.environ.get(args.api_key_env) or None, model=args.model)


def cmd_stable(args: argparse.Namespace) -> int:
    qset = load_set(args.set)
    levels = [int(c) for c in args.concurrency.split(",")]
    client = _client(args, args.url[0])
    runs = [run_set(client, qset, c, args.max_tokens) for c in levels for _ in range(args.runs)]
    keep = stable_ids(runs)
    right = {a.id for a in runs[0].items if a.correct}
    about = (
        f"the items of {args.set} (sha256 {qset.sha256}) whose answer from {args.model} was the same in "
        f"{args.runs} runs at each concurrency {levels}"
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.jsonl").write_text(derived_set(qset, keep, args.name, about))
    note: dict[str, Any] = {
        "from": args.set, "sha256": qset.sha256, "model": args.model, "runs": args.runs, "concurrency": levels,
        "items": len(qset.items), "stable": len(keep), "stable_right": len(right & set(keep)),
        "accuracy_per_run": [r.right / len(r.items) for r in runs],
        "unstable": [i.id for i in qset.items if i.id not in keep],
        "command": _command(), "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }  # fmt: skip
    (out / f"{args.name}.selection.json").write_text(json.dumps(note, indent=2) + "\n")
    print(json.dumps({k: note[k] for k in ("items", "stable", "stable_right")}))
    return 0


def cmd_aa(args: argparse.Namespace) -> int:
    records: list[LogprobRecord] = []
    for url in args.url:
        records += [reference_logprobs(_client(args, url), args.reference) for _ in range(args.runs)]
    runs = [drift(a, b) for a, b in combinations(records, 2)]
    allowance = allowance_from_aa(runs, args.factor, f"{_command()} ({datetime.now(UTC).date()})")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"pairs": [r.as_dict() for r in runs], "allowance": allowance.model_dump()}
    (out / "aa-drift.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["allowance"], indent=2))
    return 0


def _command() -> str:
    return "python -m vfleet.verify.answers.select " + shlex.join(sys.argv[1:])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vfleet.verify.answers.select", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("stable", "aa"):
        s = sub.add_parser(name)
        s.add_argument("--url", action="append", required=True, help="the server (aa: give one per node)")
        s.add_argument("--model", required=True, help="the served model name")
        s.add_argument("--api-key-env", default="VLLM_API_KEY", help="the variable holding the API key")
        s.add_argument("--runs", type=int, default=3)
        s.add_argument("--out", required=True)
    stable = sub.choices["stable"]
    stable.add_argument("--set", default="basic-v1")
    stable.add_argument("--concurrency", default="1,8", help="comma-separated concurrencies")
    stable.add_argument("--max-tokens", type=int, default=16)
    stable.add_argument("--name", required=True, help="the derived set's name, e.g. basic-smollm2")
    aa = sub.choices["aa"]
    aa.add_argument("--reference", default="reference-v1")
    aa.add_argument("--factor", type=float, default=2.0, help="allowance = factor x the largest A/A value")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return cmd_stable(args) if args.cmd == "stable" else cmd_aa(args)


if __name__ == "__main__":
    raise SystemExit(main())
