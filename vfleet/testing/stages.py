"""`make test`: the project's test tiers run as stages, in order, each its own pytest run.

- unit: tests/unit, no process and no network (its conftest refuses both);
- integration: tests/integration (child processes, a live vLLM server, Chromium, ansible-playbook on
  this machine), plus the tests that patches name by path in their Verified-By header and that therefore
  stay where they are: tests/kernels and tests/test_seed002_metadata_reuse.py;
- e2e: tests/e2e (dockerd, images, the Docker-in-Docker test fleet).

Every stage runs even when an earlier one failed (a failing unit test must not hide what e2e would
say). Each stage prints its wall time when it ends, a table of the stages follows, and the last line is
one plain `N passed, M failed` (`, K skipped` when any), summed over the stages. The exit status is 1
when any stage failed. A stage fails when its pytest fails, when it collected no test, or when it left
no counts (killed, or a test that ended the process): such a stage counts as one failure in the closing
line when no test of it failed, so that the line never reads clean when the run was not.

    python -m vfleet.testing.stages [STAGE ...] [-- PYTEST_ARGS]

STAGE is unit, integration or e2e (all three when none is given), or NAME=PATH[,PATH...] for other
folders. The counts are pytest's own (the figures of its summary line): this module is loaded into each
stage's pytest as a plugin (`-p vfleet.testing.stages`) and writes them to the file named by
VFLEET_STAGE_COUNTS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

__all__ = [
    "STAGES",
    "Counts",
    "Stage",
    "StageError",
    "StageResult",
    "closing_line",
    "counts_from_stats",
    "main",
    "parse_args",
    "run_stage",
    "table",
    "wall",
]

ROOT = Path(__file__).resolve().parent.parent.parent
COUNTS_ENV = "VFLEET_STAGE_COUNTS"
PLUGIN = "vfleet.testing.stages"  # not __name__: that is __main__ under `python -m`

#: The tiers, in the order `make test` runs them: folders relative to the checkout.
STAGES: dict[str, tuple[str, ...]] = {
    "unit": ("tests/unit",),
    "integration": ("tests/integration", "tests/kernels", "tests/test_seed002_metadata_reuse.py"),
    "e2e": ("tests/e2e",),
}


class StageError(ValueError):
    """A stage argument that names no stage."""


@dataclass(frozen=True)
class Stage:
    name: str
    paths: tuple[str, ...]


@dataclass
class Counts:
    """One pytest run's figures, as its summary line gives them."""

    collected: int = 0
    passed: int = 0  # and xpassed
    failed: int = 0  # failed tests and errors (collection, setup, teardown)
    skipped: int = 0  # and xfailed


@dataclass
class StageResult:
    stage: Stage
    returncode: int
    seconds: float
    counts: Counts | None  # None: the run left no counts

    @property
    def problem(self) -> str:
        """Why the stage failed ("" when it passed)."""
        if self.counts is None:
            return f"no counts: pytest exited {self.returncode} without its summary"
        if self.counts.collected == 0 and self.counts.failed == 0:
            return "collected no tests"
        if self.returncode != 0:
            return f"pytest exited {self.returncode}"
        return ""

    @property
    def failures(self) -> int:
        """The failed tests; a failed stage without any counts as one."""
        failed = self.counts.failed if self.counts else 0
        return failed or (1 if self.problem else 0)


# -- the plugin, inside each stage's pytest -------------------------------------------------------

_collected: list[int] = []


def pytest_collection_finish(session: pytest.Session) -> None:
    _collected.append(len(session.items))  # (testscollected is set only after this hook)


def counts_from_stats(stats: dict[str, list[Any]], collected: int) -> Counts:
    """pytest's terminal stats folded into Counts, counted as pytest's summary line counts them."""

    def n(key: str) -> int:
        return sum(1 for rep in stats.get(key, []) if getattr(rep, "count_towards_summary", True))

    return Counts(
        collected=collected,
        passed=n("passed") + n("xpassed"),
        failed=n("failed") + n("error"),
        skipped=n("skipped") + n("xfailed"),
    )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    path = os.environ.get(COUNTS_ENV)
    if path:
        counts = counts_from_stats(terminalreporter.stats, sum(_collected))
        Path(path).write_text(json.dumps(asdict(counts)))


# -- the runner -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> tuple[list[Stage], list[str]]:
    """The stages to run, in order, and the arguments for every stage's pytest (after `--`)."""
    args = list(argv)
    extra: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, extra = args[:cut], args[cut + 1 :]
    stages: list[Stage] = []
    for arg in args or list(STAGES):
        name, sep, paths = arg.partition("=")
        if sep:
            folders = tuple(p for p in paths.split(",") if p)
            if not name or not folders:
                raise StageError(f"stage {arg!r}: write NAME=PATH[,PATH...]")
            stages.append(Stage(name, tuple(str(Path(p).resolve()) for p in folders)))
        elif name in STAGES:
            stages.append(Stage(name, STAGES[name]))
        else:
            raise StageError(f"no stage {name!r}: the stages are {', '.join(STAGES)} (or NAME=PATH)")
    return stages, extra


def run_stage(stage: Stage, extra: Sequence[str]) -> StageResult:
    """One stage's pytest, its output straight to this terminal; the counts its plugin wrote."""
    with tempfile.TemporaryDirectory(prefix="vfleet-stage-") as tmp:
        counts_file = Path(tmp) / "counts.json"
        argv = [sys.executable, "-m", "pytest", "-q", "-p", PLUGIN, *stage.paths, *extra]
        print(f"== stage {stage.name}: {' '.join(stage.paths)}", flush=True)
        t0 = time.monotonic()
        proc = subprocess.run(argv, cwd=ROOT, env={**os.environ, COUNTS_ENV: str(counts_file)}, check=False)
        seconds = time.monotonic() - t0
        counts = Counts(**json.loads(counts_file.read_text())) if counts_file.is_file() else None
    return StageResult(stage, proc.returncode, seconds, counts)


def wall(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s"


def _figures(result: StageResult) -> str:
    c = result.counts
    if c is None:
        return "no counts"
    return f"{c.passed} passed, {c.failed} failed, {c.skipped} skipped"


def table(results: Sequence[StageResult]) -> str:
    rows = [("stage", "wall time", "passed", "failed", "skipped", "result")]
    for r in results:
        c = r.counts or Counts()
        figures = (str(c.passed), str(c.failed), str(c.skipped)) if r.counts else ("-", "-", "-")
        rows.append((r.stage.name, wall(r.seconds), *figures, f"FAILED: {r.problem}" if r.problem else "ok"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0]), row[1].rjust(widths[1])]
        cells += [cell.rjust(w) for cell, w in zip(row[2:5], widths[2:5], strict=True)]
        lines.append("  ".join([*cells, row[5]]).rstrip())
    return "\n".join(lines)


def closing_line(results: Sequence[StageResult]) -> str:
    passed = sum(r.counts.passed for r in results if r.counts)
    skipped = sum(r.counts.skipped for r in results if r.counts)
    line = f"{passed} passed, {sum(r.failures for r in results)} failed"
    return line + (f", {skipped} skipped" if skipped else "")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        stages, extra = parse_args(sys.argv[1:] if argv is None else argv)
    except StageError as exc:
        print(f"vfleet.testing.stages: {exc}", file=sys.stderr)
        return 2
    results: list[StageResult] = []
    for stage in stages:
        result = run_stage(stage, extra)
        results.append(result)
        verdict = f"FAILED: {result.problem}" if result.problem else "ok"
        print(f"== stage {stage.name} ended in {wall(result.seconds)}: {_figures(result)} ({verdict})", flush=True)
    print()
    print(table(results))
    print(closing_line(results), flush=True)
    return 1 if any(r.problem for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
