"""docs/ holds how things work; dated measurements live under benchmarks/results/ (issue 23, item 7).

A figure measured on one day, on one machine, at one commit is a record of that run, not a fact of the
product: it goes into a file `benchmarks/results/YYYY-MM-DD-<topic>.md` that names the date, the command,
the commit and the machine, and the page that cites it links there. So a line of a docs/*.md page that
carries a date (YYYY-MM-DD) is a lab note left behind, unless it is a date of the product itself, which
ALLOWED names with the reason. A link to a results file carries the file's date in its name; that is the
pointer, not a note, and is not counted. The checks read files only, and each is also run on a planted
tree to show that it can fail.
"""

from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO

DATE = re.compile(r"(?<![\w-])\d{4}-\d{2}-\d{2}(?![\w])")
#: The name of a results file (in a link to it, or its link text): the date is part of the file's name.
RESULT_NAME = re.compile(r"\d{4}-\d{2}-\d{2}-[\w.-]+\.md")
#: A relative link from a docs page to a results file.
RESULT_LINK = re.compile(r"\]\((\.\./benchmarks/results/[^)#\s]+)")

#: Lines of docs/ whose date is a fact of the product, by (file, text on the line, why).
ALLOWED: list[tuple[str, str, str]] = [
    (
        "docs/supply-chain.md",
        "expires: 2027-02-28",
        "an allow entry of vulnerability-policy.yaml, shown as an example: its expiry is a field of the format",
    ),
    (
        "docs/supply-chain.md",
        "set its expires to 2027-03-06 or sooner",
        "the message the gate gives for an allow entry that expires too far away, quoted with example dates",
    ),
    (
        "docs/supply-chain.md",
        "(ignored by the production policy until 2027-01-15:",
        "the result line the gate prints for a finding a production ignore rule excuses, with an example expiry",
    ),
    (
        "docs/supply-chain.md",
        "expired on 2026-11-30",
        "the message the gate gives for an expired allow entry, quoted with an example date",
    ),
    (
        "docs/supply-chain.md",
        "(until 2027-02-28:",
        "the summary line the gate prints for an allowed vulnerability, quoted with the example's expiry",
    ),
]


def dated_lines(root: Path, allowed: list[tuple[str, str, str]] = ALLOWED) -> list[str]:
    """`path:line: text` for every line of root/docs/*.md that carries a date and is not allowed."""
    found = []
    for page in sorted((root / "docs").glob("*.md")):
        rel = page.relative_to(root).as_posix()
        texts = [text for f, text, _ in allowed if f == rel]
        for n, line in enumerate(page.read_text().splitlines(), 1):
            if any(text in line for text in texts):
                continue
            if DATE.search(RESULT_NAME.sub("", line)):
                found.append(f"{rel}:{n}: {line.strip()}")
    return found


def broken_result_links(root: Path) -> list[str]:
    """`path:line: target` for every link of root/docs/*.md to a results file that does not exist."""
    found = []
    for page in sorted((root / "docs").glob("*.md")):
        rel = page.relative_to(root).as_posix()
        for n, line in enumerate(page.read_text().splitlines(), 1):
            for target in RESULT_LINK.findall(line):
                if not (page.parent / target).is_file():
                    found.append(f"{rel}:{n}: {target}")
    return found


def test_no_docs_page_carries_a_dated_measurement() -> None:
    found = dated_lines(REPO)
    assert not found, (
        "dated lines in docs/: move the measurement (figures, date, command, commit, machine) into "
        "benchmarks/results/YYYY-MM-DD-<topic>.md and leave an undated sentence that links there, or, for "
        "a date of the product itself, add the line to ALLOWED with the reason:\n" + "\n".join(found)
    )


def test_every_allowed_line_is_still_there() -> None:
    for rel, text, why in ALLOWED:
        assert why, f"{rel}: {text!r} is allowed without a reason"
        assert text in (REPO / rel).read_text(), f"{rel}: no line with {text!r}: remove it from ALLOWED"


def test_every_link_to_a_results_file_resolves() -> None:
    assert not broken_result_links(REPO)
    linked = {page for page in (REPO / "docs").glob("*.md") if RESULT_LINK.search(page.read_text())}
    assert linked, "no docs page links to benchmarks/results/: the check above would pass on nothing"


def test_a_planted_dated_line_is_caught(tmp_path: Path) -> None:
    """The check can fail: a copy of docs/ with one lab note planted in it is caught, on that line only."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for page in sorted((REPO / "docs").glob("*.md")):
        (docs / page.name).write_text(page.read_text())
    assert dated_lines(tmp_path) == []
    fleet = docs / "fleet.md"
    lines = fleet.read_text().splitlines()
    note = "Measured 2027-01-15 on the 2-core machine: roll out B took 182.0 s."
    lines.insert(3, note)
    fleet.write_text("\n".join(lines) + "\n")
    assert dated_lines(tmp_path) == [f"docs/fleet.md:4: {note}"]
    # A link to a results file is the pointer, not a note; a date beside it still counts.
    (docs / "x.md").write_text(
        "Figures: [2027-01-15-x.md](../benchmarks/results/2027-01-15-x.md).\n"
        "On 2027-01-15, see [2027-01-15-x.md](../benchmarks/results/2027-01-15-x.md).\n"
    )
    assert [f.split(": ")[0] for f in dated_lines(tmp_path)] == ["docs/fleet.md:4", "docs/x.md:2"]
    # An allowed line is passed by its text, and only in its own file.
    allowed = [*ALLOWED, ("docs/x.md", "On 2027-01-15, see", "planted")]
    assert [f.split(": ")[0] for f in dated_lines(tmp_path, allowed)] == ["docs/fleet.md:4"]


def test_a_planted_broken_link_is_caught(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "2027-01-15-x.md").write_text("# x\n")
    (tmp_path / "docs" / "a.md").write_text(
        "[ok](../benchmarks/results/2027-01-15-x.md)\n[gone](../benchmarks/results/2027-01-16-y.md)\n"
    )
    assert broken_result_links(tmp_path) == ["docs/a.md:2: ../benchmarks/results/2027-01-16-y.md"]
