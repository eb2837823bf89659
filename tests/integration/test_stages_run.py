"""`python -m lab.stages` (what `make test` runs) on stages made here: every stage runs even
after one failed, each prints its wall time as it ends, and the last line is the closing count, with a
stage that collected nothing or ended without its summary counted as a failure and the exit status 1;
healthy stages end 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = {
    "ok": """
        import pytest

        def test_one():
            pass

        def test_two():
            pass

        def test_not_here():
            pytest.skip("nothing to check on this machine")
        """,
    "bad": """
        def test_fine():
            pass

        def test_broken():
            assert 1 + 1 == 3
        """,
    "mixed": """
        import pytest

        def test_quick():
            pass

        @pytest.mark.long
        def test_slow():
            assert 1 + 1 == 3  # fails whenever it runs
        """,
    "dies": """
        import os

        def test_ends_the_process():
            os._exit(0)  # exit status 0, and no summary
        """,
}


def stages_dir(tmp_path: Path) -> dict[str, Path]:
    dirs = {}
    for name in (*TESTS, "empty"):
        d = tmp_path / name
        d.mkdir()
        if name in TESTS:
            (d / f"test_{name}.py").write_text(textwrap.dedent(TESTS[name]))
        dirs[name] = d
    return dirs


def run(tmp_path: Path, *names: str, pytest_args: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    dirs = stages_dir(tmp_path)
    argv = [sys.executable, "-m", "lab.stages", *(f"{n}={dirs[n]}" for n in names)]
    # --rootdir: the stages made here, not this checkout's pytest settings.
    argv += ["--", "-p", "no:cacheprovider", f"--rootdir={tmp_path}", *pytest_args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


def test_healthy_stages_end_zero_with_the_summed_line(tmp_path: Path) -> None:
    proc = run(tmp_path, "ok")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "2 passed, 0 failed, 1 skipped"
    assert any(ln.startswith("== stage ok ended in ") and ln.endswith("(ok)") for ln in lines), proc.stdout


@pytest.mark.parametrize("order", [("bad", "empty", "dies", "ok"), ("ok", "dies", "empty", "bad")])
def test_every_stage_runs_and_a_failed_one_fails_the_run(tmp_path: Path, order: tuple[str, ...]) -> None:
    proc = run(tmp_path, *order)
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-2000:]
    ended = [ln.split()[2] for ln in out.splitlines() if ln.startswith("== stage ") and " ended in " in ln]
    assert ended == list(order), out
    assert "== stage bad ended in " in out and "1 passed, 1 failed, 0 skipped (FAILED: pytest exited 1)" in out
    assert "(FAILED: collected no tests)" in out
    assert "no counts (FAILED: no counts: pytest exited 0 without its summary)" in out
    table = out.splitlines()[-6:-1]
    assert table[0].split()[:3] == ["stage", "wall", "time"] and [row.split()[0] for row in table[1:]] == list(order)
    # ok: 2 passed 1 skipped; bad: 1 passed 1 failed; empty and dies: one failure each
    assert out.splitlines()[-1] == "3 passed, 3 failed, 1 skipped"


def test_a_test_marked_long_runs_only_when_asked_for(tmp_path: Path) -> None:
    """make test leaves the long tests out (here the failing one would fail the run); a `-m` of the caller's
    replaces that: `-m long` runs them alone, and make test-long's `-m ""` the whole file."""
    for d in ("default", "asked", "whole"):
        (tmp_path / d).mkdir()
    proc = run(tmp_path / "default", "mixed")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1] == "1 passed, 0 failed", proc.stdout[-2000:]
    proc = run(tmp_path / "asked", "mixed", pytest_args=("-m", "long"))
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert proc.stdout.splitlines()[-1] == "0 passed, 1 failed", proc.stdout[-2000:]
    proc = run(tmp_path / "whole", "mixed", pytest_args=("-m", ""))
    assert proc.stdout.splitlines()[-1] == "1 passed, 1 failed", proc.stdout[-2000:]


LANES_CHILD = """
import json, sys
from pathlib import Path
from lab import stages as st

root, named = Path(sys.argv[1]), sys.argv[2]
st.ROOT = root
st.STAGES = {"x": ("tests",)}
st.LANES = {"x": (("tests/test_" + named + ".py",),)}
st.ALONE = {}
r = st.run_stage(st.Stage("x", ("tests",)), ["-m", "not long", "-p", "no:cacheprovider", f"--rootdir={root}"])
print(json.dumps({"code": r.returncode, "problem": r.problem}))
"""


@pytest.mark.parametrize(("named", "code"), [("ok", 0), ("long", 5)])
def test_a_named_lane_that_runs_nothing_fails_and_the_lane_of_the_rest_may(
    tmp_path: Path, named: str, code: int
) -> None:
    """Real lanes (pytest processes side by side) on files made here: one holds only a test marked long. As the lane
    of the rest (the files no lane names), it runs nothing and the stage passes, as e2e's image and supply files do
    under `make test`; as a lane LANES names, running nothing fails the stage (a lifecycle marked long by mistake
    must not pass unseen)."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_ok.py").write_text("def test_one():\n    pass\n")
    (tests / "test_long.py").write_text("import pytest\n\n@pytest.mark.long\ndef test_slow():\n    pass\n")
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", LANES_CHILD, str(tmp_path), named],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},  # the lanes run in tmp_path and load lab.stages as a plugin
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["code"] == code, proc.stdout[-3000:]
    assert (result["problem"] == "") is (code == 0), result
