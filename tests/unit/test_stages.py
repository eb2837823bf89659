"""The stage runner of `make test` (lab.stages), its parts that run no pytest: which stages,
how a stage's figures are read and judged, the table and the closing line. Running real stages is
tests/integration/test_stages_run.py."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import REPO

from lab import stages
from lab.stages import STAGES, Counts, Stage, StageResult, closing_line, counts_from_stats, parse_args


def result(name: str, rc: int, counts: Counts | None, seconds: float = 1.0) -> StageResult:
    return StageResult(Stage(name, (f"tests/{name}",)), rc, seconds, counts)


def test_the_tiers_run_in_order_by_default_and_as_named() -> None:
    assert [s.name for s in parse_args([])[0]] == ["unit", "integration", "e2e"]
    assert parse_args(["e2e", "unit"])[0] == [Stage("e2e", STAGES["e2e"]), Stage("unit", STAGES["unit"])]
    chosen, extra = parse_args(["unit", "--", "-k", "guard", "-x"])
    assert [s.name for s in chosen] == ["unit"] and extra == ["-k", "guard", "-x", "-m", "not long"]
    assert [s.name for s in parse_args(["--", "-x"])[0]] == list(STAGES)


def test_the_long_tests_are_left_out_unless_a_marker_expression_is_given() -> None:
    assert parse_args([])[1] == ["-m", stages.DEFAULT_MARKS] and stages.DEFAULT_MARKS == "not long"
    assert parse_args(["e2e", "--", "-m", "long"])[1] == ["-m", "long"]
    assert parse_args(["e2e", "--", "-mlong", "-x"])[1] == ["-mlong", "-x"]


def test_another_folder_is_a_stage_by_name_and_path(tmp_path: Path) -> None:
    (stage,) = parse_args([f"mine={tmp_path / 'a'},{tmp_path / 'b'}"])[0]
    assert stage == Stage("mine", (str(tmp_path / "a"), str(tmp_path / "b")))


@pytest.mark.parametrize("arg", ["units", "=tests/unit", "x=", "x=,"])
def test_a_stage_that_names_nothing_is_refused(arg: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(stages.StageError, match=r"the stages are unit, integration, e2e|NAME=PATH"):
        parse_args([arg])
    assert stages.main([arg]) == 2  # refused before any stage runs
    assert "lab.stages:" in capsys.readouterr().err


def test_every_test_file_is_in_exactly_one_stage() -> None:
    """`make test` runs every stage (and `make test-long` the long tests of some): a test file outside every stage
    would never run."""
    paths = [REPO / p for tier in STAGES.values() for p in tier]
    assert all(p.exists() for p in paths), [str(p) for p in paths if not p.exists()]
    files = [f for f in (REPO / "tests").rglob("test_*.py") if "fixtures" not in f.relative_to(REPO).parts]
    assert len(files) > 50
    homes = {f: [p for p in paths if f == p or p in f.parents] for f in files}
    assert {str(f): h for f, h in homes.items() if len(h) != 1} == {}


#: How a test file marks tests long: the module's pytestmark (the whole file; on one line or a list over several), a
#: decorator, or a parameter's marks.
LONG_FILE = re.compile(r"^pytestmark = (?:\[[^\]]*|[^\n]*)\bpytest\.mark\.long\b", re.MULTILINE)
LONG_MARK = re.compile(rf"{LONG_FILE.pattern}|^@pytest\.mark\.long\b|\bmarks=pytest\.mark\.long\b", re.MULTILINE)


def test_every_long_test_is_where_make_test_long_looks_and_named_in_the_tests_page() -> None:
    """`make test-long` runs the files that hold a long test, whole and by tier; tests/README.md ("Long tests")
    names each, with what still covers its path in `make test`."""
    makefile = (REPO / "Makefile").read_text()
    assert 'long-integration=$(LONG_INTEGRATION) long-e2e=$(LONG_E2E) -- -m ""' in makefile
    listed = {
        tier: re.search(rf"^LONG_{tier.upper()} := (\S+)$", makefile, re.MULTILINE) for tier in ("integration", "e2e")
    }
    named = {tier: set(m.group(1).split(",")) if m else set() for tier, m in listed.items()}
    page = (REPO / "tests" / "README.md").read_text().split("## Long tests", 1)[1]
    holders = [f.relative_to(REPO) for f in (REPO / "tests").rglob("test_*.py") if LONG_MARK.search(f.read_text())]
    assert len(holders) >= 3, holders
    assert [str(f) for f in holders if f.parts[1] not in ("integration", "e2e")] == []
    assert [str(f) for f in holders if str(f) not in page] == []
    assert named == {t: {str(f) for f in holders if f.parts[1] == t} for t in ("integration", "e2e")}, named


def test_figures_are_counted_as_pytests_summary_line_counts_them() -> None:
    rep = SimpleNamespace
    stats: dict[str, list[object]] = {
        "passed": [rep(), rep(), rep(count_towards_summary=False)],
        "xpassed": [rep()],
        "failed": [rep()],
        "error": [rep(), rep()],
        "skipped": [rep()],
        "xfailed": [rep()],
        "deselected": [rep()],
        "warnings": [rep()],
    }
    assert counts_from_stats(stats, 9) == Counts(collected=9, passed=3, failed=3, skipped=2)
    assert counts_from_stats({}, 0) == Counts()


def test_a_stage_passes_only_when_pytest_passed_and_ran_tests() -> None:
    ok = result("unit", 0, Counts(collected=5, passed=4, skipped=1))
    assert ok.problem == "" and ok.failures == 0
    failing = result("integration", 1, Counts(collected=5, passed=3, failed=2))
    assert failing.problem == "pytest exited 1" and failing.failures == 2
    empty = result("e2e", 5, Counts())
    assert empty.problem == "collected no tests" and empty.failures == 1
    broken = result("e2e", 2, Counts(failed=1))  # a collection error: nothing collected, one error
    assert broken.problem == "pytest exited 2" and broken.failures == 1
    killed = result("e2e", -9, None)
    assert killed.problem.startswith("no counts: pytest exited -9") and killed.failures == 1
    silent = result("e2e", 0, None)  # exited 0, but without its summary: not a pass
    assert silent.problem and silent.failures == 1


def test_the_closing_line_sums_the_stages_and_counts_a_broken_stage_as_a_failure() -> None:
    ok = result("unit", 0, Counts(collected=3, passed=3))
    assert closing_line([ok]) == "3 passed, 0 failed"
    skips = result("integration", 0, Counts(collected=4, passed=2, skipped=2))
    assert closing_line([ok, skips]) == "5 passed, 0 failed, 2 skipped"
    failing = result("integration", 1, Counts(collected=4, passed=2, failed=2))
    empty = result("e2e", 5, Counts())
    assert closing_line([ok, failing, empty]) == "5 passed, 3 failed"


def test_the_table_has_a_row_per_stage_with_its_time_and_verdict() -> None:
    rows = stages.table(
        [result("unit", 0, Counts(collected=3, passed=3), 7.25), result("e2e", -9, None, 3725)]
    ).splitlines()
    assert rows[0].split() == ["stage", "wall", "time", "passed", "failed", "skipped", "result"]
    assert rows[1].split() == ["unit", "7.2", "s", "3", "0", "0", "ok"]
    assert rows[2].startswith("e2e") and "62 min 05 s" in rows[2] and "FAILED: no counts" in rows[2]
    assert stages.wall(59.94) == "59.9 s" and stages.wall(60) == "1 min 00 s"


ANSWERS_GATE = "tests/integration/judge/test_answers_gate_live.py"


def test_the_e2e_lanes_run_the_two_required_walks_side_by_side_and_every_other_file_is_long() -> None:
    """e2e's lanes: the lifecycle in one, the answers gate (an integration file) and the stand-in scenarios in the
    other; every other e2e file is in the lane of the rest or runs alone, never both, and each of those is long as a
    whole (make test runs none of it). The demo image runs alone after them, and test_newcomer, which stops
    dockerd, last."""
    from lab import stages as st

    (stage,), _ = st.parse_args(["e2e"])
    lanes, alone = st._lanes(stage)
    assert len(lanes) == len(st.LANES["e2e"]) + 1 and all(lanes), lanes
    assert lanes[0] == ("tests/e2e/ops/test_fleet_lifecycle.py",) and lanes[1][0] == ANSWERS_GATE, lanes
    files = [p for lane in lanes for p in lane] + list(alone)
    assert len(files) == len(set(files)), files
    e2e = {str(f.relative_to(st.ROOT)) for f in (st.ROOT / "tests/e2e").rglob("test_*.py")}
    assert set(files) == e2e | {ANSWERS_GATE}, set(files) ^ (e2e | {ANSWERS_GATE})
    assert alone == ("tests/e2e/cli/test_demo_image.py", "tests/e2e/cli/test_newcomer.py")
    assert [p for p in [*lanes[-1], alone[1]] if not LONG_FILE.search((st.ROOT / p).read_text())] == []
    (unit,), _ = st.parse_args(["unit"])
    assert st._lanes(unit) == ([], ())


def test_the_integration_lanes_take_every_file_once_and_leave_the_ab_tests_alone() -> None:
    """Every file of the integration stage, the single file it names included, is in one lane or runs alone;
    the files no lane names form one more lane; the A/B tests, which measure latency, run alone after the lanes.
    The answers gate, which e2e runs beside the lifecycle (lab/stages.py), is in none of them."""
    from lab import stages as st

    (stage,), _ = st.parse_args(["integration"])
    lanes, alone = st._lanes(stage)
    assert len(lanes) == len(st.LANES["integration"]) + 1 and all(lanes), lanes
    files = [p for lane in lanes for p in lane] + list(alone)
    assert len(files) == len(set(files)), files
    want = {
        str(f.relative_to(st.ROOT))
        for folder in ("tests/integration", "tests/kernels")
        for f in (st.ROOT / folder).rglob("test_*.py")
    } | {"tests/test_seed002_metadata_reuse.py"}
    assert ANSWERS_GATE in want
    assert set(files) == want - {ANSWERS_GATE}, set(files) ^ (want - {ANSWERS_GATE})
    assert alone == ("tests/integration/judge/test_ab.py",)
    assert "tests/integration/judge/test_alerts.py" in lanes[-1]
    assert all((st.ROOT / p).is_file() for tier in ("integration", "e2e") for lane in st.LANES[tier] for p in lane)


@pytest.mark.parametrize(
    ("text", "long"),
    [
        ("@pytest.mark.long\ndef test_x() -> None: ...\n", True),
        ("pytestmark = [pytest.mark.slow, pytest.mark.long]  # why\n", True),
        ('pytestmark = [\n    pytest.mark.filterwarnings("ignore::X"),\n    pytest.mark.long,\n]\n', True),
        ("pytestmark = [pytest.mark.slow]\nLONG = pytest.mark.long\n", False),
        ("TREES = [A, pytest.param(B, marks=pytest.mark." + "long)]\n", True),  # split: this file marks nothing
        ("pytestmark = pytest.mark.slow\n", False),
        (
            '    text = """\n        @pytest.mark.long\n        def test_x(): ...\n"""\n',
            False,
        ),  # a test file in a string
    ],
)
def test_long_marks_are_found_in_each_form_a_file_uses(text: str, long: bool) -> None:
    assert bool(LONG_MARK.search(text)) is long


@pytest.mark.parametrize(
    ("returncode", "counts", "may_be_empty", "code"),
    [
        (5, Counts(), True, 0),  # the lane of the rest: every test of its files deselected by the marks
        (5, Counts(), False, 5),  # a named lane (the lifecycle's) that ran nothing fails its stage
        (5, None, True, 5),  # no counts: pytest did not get as far as its summary
        (1, Counts(collected=3, passed=2, failed=1), True, 1),
        (0, Counts(collected=3, passed=3), False, 0),
        (5, Counts(collected=0, failed=1), True, 5),  # a collection error
    ],
)
def test_only_the_lane_of_the_rest_and_the_alone_files_may_run_nothing(
    returncode: int, counts: Counts | None, may_be_empty: bool, code: int
) -> None:
    from lab import stages as st

    assert st._code(returncode, counts, may_be_empty=may_be_empty) == code


def test_a_file_the_stage_names_itself_runs_in_the_lane_of_the_rest_when_no_lane_takes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lab import stages as st

    single = "tests/test_seed002_metadata_reuse.py"
    lanes = tuple(tuple(p for p in lane if p != single) for lane in st.LANES["integration"])
    monkeypatch.setitem(st.LANES, "integration", lanes)
    (stage,), _ = st.parse_args(["integration"])
    got, alone = st._lanes(stage)
    assert single in got[-1] and single not in alone, (got, alone)


def test_a_lane_that_names_a_missing_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test file moved without its lane entry is named, before any stage runs, not left to run elsewhere."""
    from lab import stages as st

    moved = "tests/e2e/test_moved_away.py"
    monkeypatch.setitem(st.LANES, "e2e", (*st.LANES["e2e"], (moved,)))
    with pytest.raises(st.StageError, match=f"LANES or ALONE names {moved}, no such file"):
        st.parse_args(["e2e"])
    monkeypatch.setitem(st.ALONE, "integration", (moved,))
    with pytest.raises(st.StageError, match=moved):
        st.parse_args(["integration"])
    assert st.parse_args(["unit"])[0][0].name == "unit"
