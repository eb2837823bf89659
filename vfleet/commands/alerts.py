"""`vfleet alerts`: write the Prometheus alert rules, their promtool tests and the Grafana dashboard.

The three files under monitoring/ are generated from vfleet/monitoring/ (metric names and bounds) and
the serve profiles (served model names, which serve with prefix caching). `--check` compares instead of
writing and exits 1 when a committed file is out of date. Details: docs/monitoring.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from vfleet import monitoring
from vfleet.paths import home


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="write the Prometheus alert rules and Grafana dashboard", description=__doc__
    )
    p.add_argument("--out", type=Path, help="directory to write (default: monitoring/ of the vfleet checkout)")
    p.add_argument(
        "--metrics",
        type=Path,
        help="a recorded vLLM /metrics to shape the promtool test series "
        "(default: tests/fixtures/metrics/h200-graph.txt of the checkout)",
    )
    p.add_argument("--check", action="store_true", help="compare with the files there instead of writing them")
    p.add_argument(
        "--promtool",
        action="store_true",
        help="then run `promtool check rules` and `promtool test rules` on them (installs Debian's prometheus as root)",
    )
    return p


def _promtool(out: Path) -> int:
    rc = 0
    for argv in (("check", "rules", monitoring.RULES_FILE), ("test", "rules", monitoring.TESTS_FILE)):
        proc = monitoring.promtool(*argv, cwd=out)
        print(f"$ promtool {' '.join(argv)}  (in {out})\n{proc.stdout}{proc.stderr}", end="")
        rc = rc or proc.returncode
    return rc


def run(args: argparse.Namespace) -> int:
    root = home()
    out: Path = args.out or root / "monitoring"
    recorded = monitoring.load_recorded(args.metrics or monitoring.recorded_metrics_path(root))
    files = monitoring.generate(monitoring.Fleet.from_profiles(), recorded)
    if args.check:
        stale = [n for n, text in files.items() if not (out / n).is_file() or (out / n).read_text() != text]
        for n in stale:
            print(f"out of date: {out / n} (run `vfleet alerts`)", file=sys.stderr)
        if stale:
            return 1
        print(f"up to date: {', '.join(str(out / n) for n in files)}")
    else:
        out.mkdir(parents=True, exist_ok=True)
        for n, text in files.items():
            (out / n).write_text(text)
            print(f"wrote {out / n}")
    return _promtool(out) if args.promtool else 0
