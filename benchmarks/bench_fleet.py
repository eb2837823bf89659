"""Print the fleet figures that the fleet tests record.

* stand-in images, 4 nodes (tests/e2e/ops/test_ansible_fleet.py): wall time per scenario, swap time per node,
  bytes pulled per node for an upgrade that changes one small layer;
* the lifecycle on the real CPU image, 2 nodes (a canary and a batch), HAProxy and live traffic
  (tests/e2e/ops/test_fleet_lifecycle.py):
  wall time per step, client requests sent/completed/failed/truncated/empty per step, and per node
  and step the drain time, the swap time (stop to healthy), the boot-verify time and the out-of-pool
  window (balancer drain to ready).

    .venv/bin/python benchmarks/bench_fleet.py            # print what the last test runs recorded
    .venv/bin/python benchmarks/bench_fleet.py --run      # run both fleet tests first (about 26 min on 2 cores)
    .venv/bin/python benchmarks/bench_fleet.py --dir /tmp/ci/.cache/fleet   # what another checkout recorded
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIG = ROOT / ".cache" / "fleet"
TESTS = ["tests/e2e/ops/test_ansible_fleet.py", "tests/e2e/ops/test_fleet_lifecycle.py"]


def standin(data: dict[str, Any]) -> None:
    print("== stand-in images (4 nodes, tests/e2e/ops/test_ansible_fleet.py)")
    for scenario, secs in data.get("wall_s", {}).items():
        print(f"  wall   {scenario:34s} {secs:8.1f} s")
    for scenario, per_node in data.get("swap_s", {}).items():
        for node, secs in per_node.items():
            print(f"  swap   {scenario:34s} {node.rsplit('-', 1)[-1]:6s} {float(secs):6.1f} s")
    for scenario, per_node in data.get("pull_bytes", {}).items():
        for node, size in per_node.items():
            print(f"  pulled {scenario:34s} {node.rsplit('-', 1)[-1]:6s} {int(size):>12,d} bytes")


def lifecycle(data: dict[str, Any]) -> None:
    print("== lifecycle, real vfleet CPU image (2 nodes, HAProxy, live traffic; tests/e2e/ops/test_fleet_lifecycle.py)")
    print(f"  {'step':36s} {'wall s':>8s}")
    for step, secs in data.get("wall_s", {}).items():
        print(f"  {step:36s} {secs:8.1f}")
    req = data.get("requests", {})
    if req:
        print(f"  {'client requests by step':36s} {'sent':>6s} {'ok':>6s} {'failed':>6s} {'trunc':>6s} {'empty':>6s}")
        for step, c in {**req.get("steps", {}), "TOTAL": req.get("total", {})}.items():
            print(
                f"  {step:36s} {c['sent']:6d} {c['completed']:6d} {c['failed']:6d} {c['truncated']:6d} {c['empty']:6d}"
            )
        print(f"  served by node: {req.get('by_backend')}")
        for p in req.get("problems", []):
            print(f"  PROBLEM {p}")
    cols = ("drain_seconds", "swap_seconds", "verify_seconds", "out_of_pool_seconds")
    print(f"  {'node timings (s)':36s} {'node':6s} {'drain':>7s} {'swap':>7s} {'verify':>7s} {'out':>7s}")
    every: dict[str, list[float]] = {c: [] for c in cols}
    for step, per_node in data.get("nodes", {}).items():
        for node, rec in per_node.items():
            vals = [float(rec.get(c) or 0) for c in cols]
            for c, v in zip(cols, vals, strict=True):
                every[c].append(v)
            print(f"  {step:36s} {node.rsplit('-', 1)[-1]:6s} " + " ".join(f"{v:7.1f}" for v in vals))
    if every["swap_seconds"]:
        print(
            "  median over nodes and steps: "
            + ", ".join(f"{c.split('_')[0]} {statistics.median(v):.1f} s" for c, v in every.items())
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="store_true", help="run the fleet tests first")
    ap.add_argument("--dir", type=Path, default=FIG, help=f"where the figures are (default {FIG})")
    args = ap.parse_args()
    if args.run:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", *TESTS], cwd=ROOT, check=False)
        if proc.returncode != 0:
            print(f"fleet tests failed (exit {proc.returncode}); figures below are from what ran")
    found = False
    for name, show in (("figures.json", standin), ("figures-lifecycle.json", lifecycle)):
        path = args.dir / name
        if not path.exists():
            print(f"{name}: no figures yet ({path}); run the fleet tests first (--run)")
            continue
        found = True
        show(json.loads(path.read_text()))
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
