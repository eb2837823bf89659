"""Controller cost of a rollout as the fleet grows (issue 15): the stand-in fleet (light stand-in
images, stand-in boot-verify; tests/e2e/ops/test_ansible_fleet.py) at 8, 16 and 32 nodes, each rolled onto a
new image at two batch sizes, by one or more checkouts of vfleet side by side on the same fleet.

One fleet of the largest size is started; a run at N nodes rolls nodes 1..N (--limit) from one
stand-in image to the other with raw `ansible-playbook rollout.yml` of the checkout under test (its
ansible/ and its vfleet package, for `vfleet render`). For every run it prints the wall time, the
time before the canary (plan, preflight, pre-pull), the canary's time, the median batch time, the
CPU seconds of the controller's ansible process tree (and per node), and the CPU of the machine's
dockerd (which carries the docker-exec connections of the test fleet; a real fleet uses SSH). Then,
per checkout, a least-squares fit wall = a + b*groups + c*N over its runs, and the projection for
100 and 1,000 nodes. Runs of the checkouts alternate (A B, then B A) for each configuration.

    .venv/bin/python benchmarks/bench_fleet_scale.py                       # this checkout, 8/16/32 nodes
    git worktree add /tmp/vfleet-old b588aa9
    .venv/bin/python benchmarks/bench_fleet_scale.py --checkout old=/tmp/vfleet-old --checkout new=.
    .venv/bin/python benchmarks/bench_fleet_scale.py --show                # print the last saved run

Two checkouts took 30 minutes on 2 cores (b588aa9's runs 16 min, today's 8.5 min, the 32-node fleet
and its first deploy the rest). Figures go to .cache/fleet/scale.json; docs/fleet.md shows them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab import testfleet  # noqa: E402
from lab.images import build_fake_images, build_node_image, cache_dir  # noqa: E402
from vfleet.dockerd import ensure_dockerd  # noqa: E402
from vfleet.fleet.ansible import env as ansible_env  # noqa: E402

OUT = ROOT / ".cache" / "fleet" / "scale.json"
CALLBACKS = Path(__file__).resolve().parent / "fleet_scale"


def dockerd_cpu() -> float:
    """CPU seconds this machine's dockerd (the one /var/run/docker.pid names, not a fleet node's
    nested one) has used so far, 0 when it cannot be read."""
    try:
        t = psutil.Process(int(Path("/var/run/docker.pid").read_text().strip())).cpu_times()
        return float(t.user + t.system)
    except (OSError, ValueError, psutil.Error):
        return 0.0


def groups_of(timeline: list[dict[str, Any]]) -> tuple[float, list[tuple[str, float, float, list[str]]]]:
    """(start time, [(play name, start, end, hosts)]) for the canary and batch plays of a run."""
    plays = [r for r in timeline if r["kind"] in ("play", "end")]
    t0 = plays[0]["t"] if plays else 0.0
    out = []
    for i, p in enumerate(plays[:-1]):
        if p["kind"] != "play" or p["name"] not in ("Canary", "Batches"):
            continue
        end = plays[i + 1]["t"]
        seen = {r["host"] for r in timeline if r["kind"] == "result" and p["t"] <= r["t"] <= end}
        hosts = sorted(seen - {"localhost"})
        out.append((p["name"], p["t"], end, hosts))
    return t0, out


def rollout(checkout: Path, fleet: testfleet.Fleet, n: int, batch: str, image: str) -> dict[str, Any]:
    hosts = [node.name for node in fleet.nodes[:n]]
    extra = {**testfleet.STANDIN_FAST, "vfleet_image": image, "vfleet_batch_size": batch}
    argv = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        str(fleet.inventory),
        str(checkout / "ansible" / "rollout.yml"),
        "--extra-vars",
        json.dumps(extra),
        "--limit",
        ",".join(["localhost", *hosts]),
    ]
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as tl:
        env = ansible_env()
        env.update(
            ANSIBLE_CONFIG=str(checkout / "ansible" / "ansible.cfg"),
            ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS),
            ANSIBLE_CALLBACKS_ENABLED="vfleet_timeline",
            VFLEET_TIMELINE_FILE=tl.name,
            PYTHONPATH=str(checkout),
        )
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        d0 = dockerd_cpu()
        t0 = time.monotonic()
        proc = subprocess.run(
            argv, cwd=checkout / "ansible", env=env, capture_output=True, text=True, timeout=3600, check=False
        )
        wall = time.monotonic() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        dockerd = dockerd_cpu() - d0
        timeline = [json.loads(line) for line in tl.read().splitlines() if line.strip()]
    if proc.returncode != 0:
        log = cache_dir() / "scale-failed.log"
        log.write_text(proc.stdout + proc.stderr)
        raise SystemExit(f"rollout of {n} nodes at {batch} by {checkout} failed (exit {proc.returncode}); see {log}")
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    start, groups = groups_of(timeline)
    batch_s = [end - begin for name, begin, end, _ in groups if name == "Batches"]
    return {
        "nodes": n,
        "batch": batch,
        "groups": len(groups),
        "group_sizes": [len(h) for _, _, _, h in groups],
        "wall_s": round(wall, 1),
        "pre_canary_s": round(groups[0][1] - start, 1) if groups else None,
        "canary_s": round(groups[0][2] - groups[0][1], 1) if groups else None,
        "batch_median_s": round(statistics.median(batch_s), 1) if batch_s else None,
        "ansible_cpu_s": round(cpu, 1),
        "ansible_cpu_per_node_s": round(cpu / n, 2),
        "dockerd_cpu_s": round(dockerd, 1),
    }


def fit(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Least squares wall = a + b*groups + c*N."""
    x = np.array([[1.0, r["groups"], r["nodes"]] for r in runs])
    y = np.array([r["wall_s"] for r in runs])
    (a, b, c), *_ = np.linalg.lstsq(x, y, rcond=None)
    return {"a": float(a), "b": float(b), "c": float(c)}


def groups_for(n: int, batch: str) -> int:
    size = max(math.ceil(float(batch[:-1]) * n / 100), 1) if batch.endswith("%") else int(batch)
    return 1 + math.ceil((n - 1) / size)


def show(data: dict[str, Any]) -> None:
    cols = ["nodes", "batch", "groups", "wall_s", "pre_canary_s", "canary_s", "batch_median_s"]
    cols += ["ansible_cpu_s", "ansible_cpu_per_node_s", "dockerd_cpu_s"]
    heads = ["N", "batch", "groups", "wall", "pre-canary", "canary", "batch(med)", "ansible-CPU", "CPU/node"]
    heads += ["dockerd-CPU"]
    print(f"== fleet scale, stand-in images ({data.get('machine', '?')})")
    for label, runs in data["runs"].items():
        print(f"-- {label} ({data['checkouts'][label]})")
        print("  " + " ".join(f"{h:>11s}" for h in heads))
        for r in runs:
            print("  " + " ".join(f"{r[c] if r[c] is not None else '-'!s:>11s}" for c in cols))
    print("-- fit wall = a + b*groups + c*N (s), and projections at 25% batches (5 groups)")
    fits = {}
    for label, runs in data["runs"].items():
        if len({(r["nodes"], r["groups"]) for r in runs}) < 3:
            print(f"  {label}: too few distinct (N, groups) points for a fit")
            continue
        f = fits[label] = fit(runs)
        proj = {n: f["a"] + f["b"] * groups_for(n, "25%") + f["c"] * n for n in (100, 1000)}
        print(
            f"  {label:8s} a {f['a']:6.1f}  b {f['b']:5.2f}/group  c {f['c']:5.3f}/node   "
            f"100 nodes {proj[100] / 60:5.1f} min   1,000 nodes {proj[1000] / 60:6.1f} min"
        )
    labels = list(fits)
    for other in labels[1:]:
        print(f"  per-node term c: {other} / {labels[0]} = {fits[other]['c'] / fits[labels[0]]['c']:.2f}")
    by_cfg: dict[tuple[int, str], dict[str, float]] = {}
    for label, runs in data["runs"].items():
        for r in runs:
            by_cfg.setdefault((r["nodes"], r["batch"]), {})[label] = r["wall_s"]
    if len(labels) > 1:
        print("-- wall ratio per configuration, side by side")
        for (n, batch), walls in sorted(by_cfg.items()):
            ratios = ", ".join(
                f"{lb}/{labels[0]} {walls[lb] / walls[labels[0]]:.2f}" for lb in labels[1:] if lb in walls
            )
            print(f"  N {n:3d} {batch:>4s}: {ratios}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="8,16,32", help="fleet sizes (comma-separated; default 8,16,32)")
    ap.add_argument("--batch", default="25%,50%", help="batch sizes (comma-separated; default 25%%,50%%)")
    ap.add_argument(
        "--checkout",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="a vfleet checkout to measure (repeatable; default this one as 'this')",
    )
    ap.add_argument("--name", default="scale", help="test fleet name (default scale)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"figures file (default {OUT})")
    ap.add_argument("--show", action="store_true", help="print the saved figures and exit")
    ap.add_argument("--keep", action="store_true", help="leave the fleet up afterwards")
    args = ap.parse_args()
    if args.show:
        show(json.loads(args.out.read_text()))
        return 0
    checkouts = dict(c.split("=", 1) for c in args.checkout) if args.checkout else {"this": str(ROOT)}
    for label, path in checkouts.items():
        if not (Path(path) / "ansible" / "rollout.yml").is_file():
            raise SystemExit(f"--checkout {label}={path}: no ansible/rollout.yml there")
    sizes = [int(x) for x in args.nodes.split(",")]
    batches = args.batch.split(",")
    ensure_dockerd()
    build_node_image()
    local = build_fake_images()
    t0 = time.monotonic()
    print(f"starting a {max(sizes)}-node stand-in fleet {args.name} ...", flush=True)
    fleet = testfleet.up(args.name, nodes=max(sizes))
    data: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores",
        "checkouts": {k: str(Path(v).resolve()) for k, v in checkouts.items()},
        "fleet_up_s": 0.0,
        "runs": {k: [] for k in checkouts},
    }
    try:
        testfleet.write_inventory(fleet, extra_vars=testfleet.STANDIN_VARS)
        images = [fleet.push(local["good-1"]), fleet.push(local["good-2"])]
        data["fleet_up_s"] = round(time.monotonic() - t0, 1)
        print(f"fleet up in {data['fleet_up_s']} s; first deploy of all {max(sizes)} nodes ...", flush=True)
        first = next(iter(checkouts.values()))
        rollout(Path(first), fleet, max(sizes), "100%", images[0])
        order = list(checkouts.items())
        k = 0
        for n in sizes:
            for batch in batches:
                for label, path in order:
                    k += 1
                    r = rollout(Path(path), fleet, n, batch, images[k % 2])
                    data["runs"][label].append(r)
                    print(f"  {label}: {json.dumps(r)}", flush=True)
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    args.out.write_text(json.dumps(data, indent=2))
                order.reverse()
    finally:
        if not args.keep:
            testfleet.down(args.name)
    show(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
