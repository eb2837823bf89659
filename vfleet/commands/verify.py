"""`vfleet verify`: run the boot-verify suite (smoke_tests/) against a live server; the exit code is
the gate (0 pass). Writes DIR/report.json, report.xml (JUnit), report.md and PNG plots."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vfleet.verify import runner


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="boot-verify a live server (the promotion gate)", description=__doc__
    )
    p.add_argument("--url", required=True, help="server base URL, e.g. http://node1:8000")
    p.add_argument("--profile", required=True, help="serve profile whose expectations apply (MODEL/PLATFORM)")
    p.add_argument("--api-key-env", metavar="VAR", help="environment variable that holds the API key")
    p.add_argument("--model", help="served model name (default: the profile's)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--log", type=Path, help="the server log file")
    src.add_argument("--container", help="read the log with `docker logs NAME` (and run GPU health in it)")
    p.add_argument("--image", help="image reference (NAME:TAG or NAME@sha256:...) recorded with its digest")
    p.add_argument("--out", type=Path, help="report directory (default reports/verify-<profile>-<time>)")
    p.add_argument(
        "-k",
        dest="select",
        metavar="EXPR",
        help="run only the checks matching EXPR (pytest -k); the report is then partial",
    )
    return p


def run(args: argparse.Namespace) -> int:
    out = args.out or runner.default_out(args.profile)
    res = runner.run(
        url=args.url,
        profile=args.profile,
        out=out,
        api_key_env=args.api_key_env,
        model=args.model,
        log=args.log,
        container=args.container,
        image=args.image,
        select=args.select,
    )
    print(summary(res.report, res.out))
    return res.rc


def summary(rep: dict[str, Any], out: Path) -> str:
    c = rep["counts"]
    lines = [
        f"boot-verify {'PASS' if rep['passed'] else 'FAIL'}{' (partial)' if rep.get('partial') else ''}: "
        f"{rep['profile']} at {rep['url']} (vLLM {rep.get('vllm_version')}), "
        f"{c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped in {rep['wall_s']:.0f} s",
    ]
    for t in rep["checks"]:
        if t["outcome"] == "failed":
            lines.append(f"  FAILED {t['id']}: {t['message'].splitlines()[0] if t['message'] else ''}")
    f = rep["figures"]
    if f.get("integrity"):
        i = f["integrity"]
        lines.append(
            f"  integrity probe: pool {i['num_gpu_blocks']} blocks x {i['block_size']} = "
            f"{i['pool_tokens']:,} tokens, {i['fillers']} fillers ({i['pool_cycles']}x)"
        )
    for r in sorted(f.get("load") or [], key=lambda r: r["concurrency"]):
        tpot = r["tpot_p50_ms"]
        lines.append(
            f"  C{r['concurrency']}: {r['out_tok_per_s']:.1f} out tok/s, TTFT p50 "
            f"{r['ttft_p50_ms'] or 0:.0f} ms, TPOT p50 {tpot or 0:.2f} ms, {r['completed']}/{r['requests']} ok"
        )
    lines.append(f"report: {out / 'report.md'} (also report.json, report.xml)")
    return "\n".join(lines)
