"""What the model manifest costs (issue 34, item 6): `vfleet model manifest` of a multi-gigabyte model directory
made here, cold (no cache) and cached (what a node's second look reads), and the per-node weights check of a
rollout as the role runs it (ansible-playbook of roles/vfleet_node/tasks/weights.yml on this machine as the node,
the module vfleet_weights with its cache: the cached look plus the sampled blocks, and Ansible's own cost).

The directory is made once under .cache/bench/manifest (SHARDS files of SHARD_GB each, random bytes, and the small
files a checkpoint has). "Cold" here means no manifest cache; the kernel's page cache is not dropped (a container
cannot), so the figure is the hashing cost, not the disk's: on a node that reads its weights from disk the first
look takes at least the time to read them once.

    .venv/bin/python benchmarks/bench_model_manifest.py [--shards 4] [--shard-gb 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vfleet.fleet.ansible import env as ansible_env  # noqa: E402
from vfleet.models import manifest as mm  # noqa: E402

PLAY = """- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Check the weights as deploy.yml does
      ansible.builtin.include_role:
        name: vfleet_node
        tasks_from: weights
"""


def make_model(root: Path, shards: int, shard_gb: float) -> None:
    want = int(shard_gb * (1 << 30))
    root.mkdir(parents=True, exist_ok=True)
    for i in range(1, shards + 1):
        p = root / f"model-{i:05d}-of-{shards:05d}.safetensors"
        if p.is_file() and p.stat().st_size == want:
            continue
        with p.open("wb") as fh:
            left = want
            while left:
                n = min(left, 64 << 20)
                fh.write(os.urandom(n))
                left -= n
    for name, text in (("config.json", '{"hidden_size": 4096}'), ("tokenizer.json", "{}")):
        (root / name).write_text(text)


def timed(fn: object) -> float:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--shard-gb", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    root = ROOT / ".cache" / "bench" / "manifest" / f"{args.shards}x{args.shard_gb}g"
    print(f"making {root} ...", flush=True)
    make_model(root, args.shards, args.shard_gb)
    size = sum(p.stat().st_size for p in root.iterdir())
    out: dict[str, list[float]] = {"cold": [], "cached": [], "cached+samples": [], "role check (cached)": []}
    with tempfile.TemporaryDirectory(prefix="vfleet-bench-manifest-") as tmp:
        state = Path(tmp)
        promoted = mm.compute(root)
        weights = {"digest": promoted.digest, "entries": [[f.name, f.size, f.sha256] for f in promoted.files]}
        (state / "play.yml").write_text(PLAY)
        (state / "vars.json").write_text(
            json.dumps(
                {
                    "vfleet_node_model_dir": str(root),
                    "vfleet_node_state_dir": str(state / "node"),
                    "vfleet_node__promoted_weights": weights,
                    "ansible_python_interpreter": sys.executable,
                }
            )
        )
        argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(state / "play.yml")]
        argv += ["-e", f"@{state / 'vars.json'}"]
        for r in range(args.rounds):
            cache = state / f"cache-{r}.json"
            out["cold"].append(timed(lambda c=cache: mm.compute(root, c)))
            out["cached"].append(timed(lambda c=cache: mm.compute(root, c)))
            out["cached+samples"].append(timed(lambda c=cache: (mm.compute(root, c), mm.sample_check(root, c))))
            if r == 0:  # the role's own cache, written by a first look
                subprocess.run(argv, env=ansible_env(), capture_output=True, check=True)
            t0 = time.perf_counter()
            proc = subprocess.run(argv, env=ansible_env(), capture_output=True, text=True, check=False)
            out["role check (cached)"].append(time.perf_counter() - t0)
            if proc.returncode != 0:
                print(proc.stdout[-2000:])
                return 1
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in out.items()), flush=True)
    files = len(list(root.iterdir()))
    print(f"\n{files} files, {size / (1 << 30):.2f} GiB, {os.cpu_count()} CPUs, {args.rounds} rounds\n")
    print("| look | median | rounds |")
    print("|---|---:|---|")
    for k, v in out.items():
        print(f"| {k} | {statistics.median(v):.2f} s | {', '.join(f'{x:.2f}' for x in v)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
