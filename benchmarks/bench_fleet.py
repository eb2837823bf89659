"""Print the fleet rollout figures that the fleet tests record: wall time per scenario, swap time per
node (stop -> healthy) and bytes pulled per node for an upgrade that changes one small layer.

    .venv/bin/python -m pytest -q tests/test_ansible_fleet.py tests/test_ansible_real_image.py
    .venv/bin/python benchmarks/bench_fleet.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = {"stand-in images (4 nodes)": "figures.json", "real vfleet CPU image (3 nodes)": "figures-real.json"}


def main() -> int:
    found = False
    for title, name in FILES.items():
        path = ROOT / ".cache" / "fleet" / name
        if not path.exists():
            print(f"{title}: no figures yet ({path}); run the fleet tests first")
            continue
        found = True
        data = json.loads(path.read_text())
        print(f"== {title}")
        for scenario, secs in data.get("wall_s", {}).items():
            print(f"  wall   {scenario:28s} {secs:8.1f} s")
        for scenario, per_node in data.get("swap_s", {}).items():
            if isinstance(per_node, dict):
                for node, secs in per_node.items():
                    print(f"  swap   {scenario:28s} {node.rsplit('-', 1)[-1]:6s} {float(secs):6.1f} s")
            else:
                print(f"  swap   {scenario:28s} {float(per_node):6.1f} s")
        for scenario, per_node in data.get("pull_bytes", {}).items():
            for node, size in per_node.items():
                print(f"  pulled {scenario:28s} {node.rsplit('-', 1)[-1]:6s} {int(size):>12,d} bytes")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
