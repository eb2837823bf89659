"""The repository stands on its own (issue 23): nothing in it cites the team's private notes, and no test
reads a file from outside the checkout.

A user who clones vfleet has only the repository, so a citation of notes they cannot open is a dead end
(upstream facts and their sources go into docs/upstream.md instead), and a test that reads a folder
beside the checkout passes or skips differently from one machine to the next. Both checks walk the tree
with pathlib (the unit tier starts no process, so no `git ls-files`) and skip what .gitignore keeps out
of the repository. Each check is also run on a small planted tree, to show that it can fail.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from conftest import REPO

# The private notes' name, built so that this file does not cite them itself.
NOTES = "REFER" + "ENCE"
CITATION = re.compile(rf"\b{NOTES}\b")

#: Folders that .gitignore keeps out of the repository (by name anywhere, or by path from the root).
SKIP_NAMES = {
    ".git",
    ".venv",
    ".cache",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    "node_modules",
}
SKIP_PATHS = {"build", "reports", ".whl", ".gl", ".ci/run"}

# How a test builds a path: from its own file upwards, or from the repository root.
FILE_PARENTS = re.compile(r"__file__\)(?:\.resolve\(\))?\.parents\[(\d+)\]")
FILE_PARENT_CHAIN = re.compile(r"__file__\)(?:\.resolve\(\))?((?:\.parent\b)+)")
#: Built from parts, so that this file's own planted examples are not themselves outside reads.
SHARED = "sha" + "red"
OUTSIDE_LITERALS = re.compile(r"""REPO\.parent\b|REPO\s*/\s*["']\.\.|["'](?:\.\./)+shared\b|["']shared["']|/work/""")
#: Paths of the machine this project was written on, which no user has: its work folder and the shared
#: inputs beside the checkout (built from parts, like SHARED).
WORKSPACE_PATHS = re.compile("/" + "work/(?:" + SHARED + "|main)\\b|\\.\\./" + SHARED + "/")
#: This module: its planted examples of the faults above are data, not reads.
THIS = Path(__file__).resolve()


def repo_files(root: Path) -> list[Path]:
    """Every file of the tree at `root` that git would track (what .gitignore ignores is left out)."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel = here.relative_to(root).as_posix()
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in SKIP_NAMES
            and not d.endswith(".egg-info")
            and (d if rel == "." else f"{rel}/{d}") not in SKIP_PATHS
        )
        out += [here / f for f in sorted(filenames) if f != ".git" and not f.endswith(".pyc")]
    return out


def _text(path: Path) -> str | None:
    """The file's text, or None for a binary file (a NUL byte, or not UTF-8)."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def citations(root: Path) -> list[str]:
    """`path:line: text` for every line of a text file under `root` that names the private notes."""
    found = []
    for path in repo_files(root):
        text = _text(path)
        if text is None:
            continue
        for no, line in enumerate(text.splitlines(), 1):
            if CITATION.search(line):
                found.append(f"{path.relative_to(root)}:{no}: {line.strip()[:160]}")
    return found


def outside_reads(root: Path) -> list[str]:
    """`path:line: text` for every line of a test module under `root`/tests that builds a path outside `root`:
    a `Path(__file__)` climbed above the root, `REPO.parent`, or a parent-relative or absolute literal that
    names a sibling folder."""
    found = []
    top = root.resolve()
    for path in repo_files(root / "tests"):
        if path.suffix != ".py":
            continue
        here = path.resolve()
        if here == THIS:
            continue
        for no, line in enumerate(path.read_text().splitlines(), 1):
            depths = [int(m) for m in FILE_PARENTS.findall(line)]
            depths += [chain.count(".parent") - 1 for chain in FILE_PARENT_CHAIN.findall(line)]
            climbs = any(d >= len(here.parents) or not here.parents[d].is_relative_to(top) for d in depths)
            if climbs or OUTSIDE_LITERALS.search(line):
                found.append(f"{path.relative_to(root)}:{no}: {line.strip()[:160]}")
    return found


def workspace_paths(root: Path) -> list[str]:
    """`path:line: text` for every line of a text file under `root` (but this module, and the recorded
    outputs under tests/fixtures, which keep the paths they were recorded under) that names a path of the
    machine the project was written on (WORKSPACE_PATHS)."""
    found = []
    for path in repo_files(root):
        if path.is_relative_to(root / "tests" / "fixtures"):
            continue
        text = _text(path) if path.resolve() != THIS else None
        for no, line in enumerate((text or "").splitlines(), 1):
            if WORKSPACE_PATHS.search(line):
                found.append(f"{path.relative_to(root)}:{no}: {line.strip()[:160]}")
    return found


def test_nothing_in_the_repository_names_a_path_of_the_authors_machine() -> None:
    found = workspace_paths(REPO)
    assert not found, (
        f"{len(found)} line(s) name a folder only the authors' machine has; cite the upstream source, or a path "
        "inside the repository:\n" + "\n".join(found)
    )


def test_a_path_of_the_authors_machine_is_found(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "docs/a.md": "From (`/" + "work/" + SHARED + "/seeds/002.txt`).\n",
            "benchmarks/b.sh": "cd /" + "work/main && make\n",
            "docs/c.md": "see ../" + SHARED + "/fixtures\n",
            "docs/ok.md": "a shared folder; /workspace/main; tests/fixtures\n",
            "tests/fixtures/run/out.txt": "rootdir: /" + "work/main/smoke_tests\n",
        },
    )
    assert [f.split(":")[0] for f in workspace_paths(root)] == ["benchmarks/b.sh", "docs/a.md", "docs/c.md"]


def test_nothing_in_the_repository_cites_the_private_notes() -> None:
    found = citations(REPO)
    assert not found, (
        f"{len(found)} line(s) cite notes that users of the repository do not have; write the fact with its "
        "upstream source (release, vLLM file, pull request) into docs/upstream.md and point there:\n" + "\n".join(found)
    )


def test_no_test_reads_outside_the_repository() -> None:
    found = outside_reads(REPO)
    assert not found, (
        f"{len(found)} test line(s) build a path outside the checkout; copy the files the test needs into "
        "tests/fixtures/<name>/ (with a README saying where they come from) and read them there:\n" + "\n".join(found)
    )


def test_the_walk_sees_the_repository_and_skips_what_git_ignores() -> None:
    names = {p.relative_to(REPO).as_posix() for p in repo_files(REPO)}
    assert {"README.md", "docs/upstream.md", "tests/unit/test_self_contained.py"} <= names
    assert not any(n.startswith((".git/", ".venv/", ".cache/")) or "/__pycache__/" in n for n in names)


def _plant(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, body in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            p.write_bytes(body)
        else:
            p.write_text(body)
    return root


def test_a_citation_is_found_and_lookalikes_are_not(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "docs/a.md": f"Fine.\nThe flag set of {NOTES} section 6.\n",
            "vfleet/b.py": f"# see {NOTES} §1\nSOURCE_{NOTES} = 'reference'\n",
            "serve_configs/c.yaml": "# reference: the recipe\n",
            "img.png": b"\x89PNG\0" + NOTES.encode(),
            ".git/notes": NOTES,
            ".cache/x/y.txt": NOTES,
            ".venv/lib/z.py": NOTES,
            "build/out.txt": NOTES,
        },
    )
    assert citations(root) == [f"docs/a.md:2: The flag set of {NOTES} section 6.", f"vfleet/b.py:1: # see {NOTES} §1"]
    (root / "docs/a.md").write_text("Fine.\n")
    (root / "vfleet/b.py").write_text(f"SOURCE_{NOTES} = 'reference'\n")
    assert citations(root) == []


def test_a_test_reading_outside_the_checkout_is_found(tmp_path: Path) -> None:
    bad = {
        "tests/unit/test_a.py": 'S = Path(__file__).resolve().parents[3] / "' + SHARED + '" / "fixtures"\n',
        "tests/unit/test_b.py": "S = Path(__file__).parent.parent.parent.parent / 'x'\n",
        "tests/integration/test_c.py": 'S = Path("/' + "work/" + SHARED + '/fixtures/h200")\n',
        "tests/integration/test_d.py": 'S = REPO.parent / "fixtures"\n',
        "tests/test_e.py": 'S = Path("../' + SHARED + '/fixtures")\n',
    }
    good = {
        "tests/unit/test_ok.py": 'F = Path(__file__).resolve().parents[1] / "fixtures"\n'
        'G = Path(__file__).parent.parent / "fixtures"\nR = Path(__file__).resolve().parents[2]\n',
        "tests/unit/data.txt": "../" + SHARED + "\n",
    }
    root = _plant(tmp_path / "repo", {**bad, **good})
    assert sorted(f.split(":")[0] for f in outside_reads(root)) == sorted(bad)
    for rel in bad:
        (root / rel).unlink()
    assert outside_reads(root) == []
