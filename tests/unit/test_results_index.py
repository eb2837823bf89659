"""benchmarks/results/ has an index, README.md there: one row per file or folder (what it measured, the
command, the date), and no row for an entry that is not there (issue 35, item 9)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO

RESULTS = REPO / "benchmarks" / "results"
INDEX = "README.md"
#: A row of the index's table: | [entry](entry) | what | command | date |
ROW = re.compile(r"^\| \[(?P<name>[^\]]+)\]\((?P<link>[^)]+)\) \|(?P<rest>.*)\|\s*$")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def index_problems(results: Path) -> list[str]:
    """Every way RESULTS/README.md and the entries of RESULTS disagree, named."""
    index = results / INDEX
    if not index.is_file():
        return [f"{index}: missing; write the index of {results.name}/ (one row per entry)"]
    rows = [m for line in index.read_text().splitlines() if (m := ROW.match(line))]
    listed: list[str] = []
    out: list[str] = []
    for row in rows:
        name = row["name"].rstrip("/")
        listed.append(name)
        cells = [c.strip() for c in row["rest"].split("|")]
        if row["link"].rstrip("/") != name:
            out.append(f"{INDEX}: {name}: links to {row['link']}")
        if len(cells) != 3 or not all(cells):
            out.append(f"{INDEX}: {name}: a row needs what it measured, the command and the date")
        elif not DATE.search(cells[2]):
            out.append(f"{INDEX}: {name}: no date (YYYY-MM-DD) in {cells[2]!r}")
        if not (results / name).exists():
            out.append(f"{INDEX}: {name}: listed, but {results.name}/{name} does not exist; remove its row")
    out += [f"{INDEX}: {name}: listed twice" for name in sorted({n for n in listed if listed.count(n) > 1})]
    for entry in sorted(p.name for p in results.iterdir() if p.name != INDEX and not p.name.startswith(".")):
        if entry not in listed:
            out.append(f"{results.name}/{entry}: not in {INDEX}; add its row (what it measured, the command, the date)")
    return out


def test_every_result_is_in_the_index_and_every_row_is_a_result() -> None:
    assert index_problems(RESULTS) == []


def test_an_unlisted_result_and_a_row_without_its_file_are_named(tmp_path: Path) -> None:
    (tmp_path / "2027-01-15-x.md").write_text("# x\n")
    (tmp_path / "2027-01-16-y").mkdir()
    (tmp_path / INDEX).write_text(
        "| entry | what | command | date |\n|---|---|---|---|\n"
        "| [2027-01-15-x.md](2027-01-15-x.md) | x | `bench_x.py` | 2027-01-15 |\n"
        "| [2027-01-17-gone.md](2027-01-17-gone.md) | gone | `bench_gone.py` | 2027-01-17 |\n"
    )
    assert index_problems(tmp_path) == [
        f"{INDEX}: 2027-01-17-gone.md: listed, but {tmp_path.name}/2027-01-17-gone.md does not exist; remove its row",
        f"{tmp_path.name}/2027-01-16-y: not in {INDEX}; add its row (what it measured, the command, the date)",
    ]
    (tmp_path / INDEX).unlink()
    assert index_problems(tmp_path) == [
        f"{tmp_path / INDEX}: missing; write the index of {tmp_path.name}/ (one row per entry)"
    ]
