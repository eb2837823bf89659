"""Bootstrap install time, pip against uv, side by side.

Each round creates two fresh venvs and runs `python3 -m vfleet.bootstrap --installer pip|uv` into
each, in alternating order, with a cold cache each time (an empty PIP_CACHE_DIR / UV_CACHE_DIR of the
round), as on a fresh machine. It prints the install step's seconds (the bootstrap's own
"installed with X in N s" line) and the whole bootstrap's wall time per run, the medians and the
ratio pip/uv, and whether both venvs hold the same packages (uv's `pip freeze` of each).

    python3 benchmarks/bench_bootstrap.py --rounds 3      # about 6 minutes a round on 2 cores
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(installer: str, where: Path) -> tuple[float, float, list[str]]:
    venv = where / f"venv-{installer}"
    cache = where / f"cache-{installer}"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(where), "PIP_CACHE_DIR": str(cache), "UV_CACHE_DIR": str(cache)}
    for k in ("PIP_FIND_LINKS", "PIP_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_DISABLE_PIP_VERSION_CHECK"):
        if k in os.environ:
            env[k] = os.environ[k]
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet.bootstrap", "--venv", str(venv), "--installer", installer, "--force"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{installer} bootstrap failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    m = re.search(rf"installed with {installer} in (\d+) s", proc.stdout)
    if m is None:
        raise SystemExit(f"the {installer} run fell back or printed no time:\n{proc.stdout[-2000:]}")
    uv = shutil.which("uv", path=str(where / "venv-uv" / "bin")) or str(where / "venv-uv" / "bin" / "uv")
    freeze = subprocess.run(
        [uv, "pip", "freeze", "--python", str(venv / "bin" / "python")], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    packages = sorted(line for line in freeze if not line.startswith(("-e ", "uv ", "uv==")))
    shutil.rmtree(cache, ignore_errors=True)
    return float(m[1]), wall, packages


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows: dict[str, list[tuple[float, float]]] = {"pip": [], "uv": []}
    for r in range(args.rounds):
        order = ["uv", "pip"] if r % 2 == 0 else ["pip", "uv"]
        with tempfile.TemporaryDirectory(prefix="bench-bootstrap-") as tmp:
            where = Path(tmp)
            got: dict[str, list[str]] = {}
            for installer in order:
                install_s, wall_s, got[installer] = run_once(installer, where)
                rows[installer].append((install_s, wall_s))
                print(
                    f"round {r + 1} {installer:3s} install {install_s:6.0f} s   bootstrap {wall_s:6.0f} s", flush=True
                )
            same = set(got["pip"]) == set(got["uv"])
            print(f"round {r + 1} same packages: {same} ({len(got['uv'])} in the uv venv)", flush=True)
            if not same:
                print("  only pip:", sorted(set(got["pip"]) - set(got["uv"])))
                print("  only uv: ", sorted(set(got["uv"]) - set(got["pip"])))
    med = {k: statistics.median(i for i, _ in v) for k, v in rows.items()}
    wall = {k: statistics.median(w for _, w in v) for k, v in rows.items()}
    print(f"median install: pip {med['pip']:.0f} s, uv {med['uv']:.0f} s, ratio pip/uv {med['pip'] / med['uv']:.1f}x")
    print(f"median bootstrap: pip {wall['pip']:.0f} s, uv {wall['uv']:.0f} s ({args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
