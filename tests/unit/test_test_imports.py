"""No test module imports another (issue 35): what two tests share lives in tests/support/, so that a test
module is only ever a test module, and moving or renaming one breaks nothing else."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO


def cross_imports(root: Path) -> list[str]:
    """`FILE imports MODULE` for each import, anywhere in a .py file under ROOT, of a test module under ROOT
    (a file named test_*.py), at module level or inside a function."""
    tests = {p.stem for p in root.rglob("test_*.py")}
    out: list[str] = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            out += [f"{path.relative_to(root)} imports {n}" for n in names if n.split(".")[-1] in tests]
    return out


def test_no_test_module_imports_another() -> None:
    found = cross_imports(REPO / "tests")
    assert found == [], f"move what they share into tests/support/: {found}"


def test_an_import_of_a_test_module_is_named(tmp_path: Path) -> None:
    (tmp_path / "support").mkdir()
    (tmp_path / "support" / "keys.py").write_text("KEY = 1\n")
    (tmp_path / "test_a.py").write_text("from support.keys import KEY\n")
    assert cross_imports(tmp_path) == []
    (tmp_path / "test_b.py").write_text("def test_x():\n    from test_a import KEY\n")
    (tmp_path / "test_c.py").write_text("import test_b\n")
    assert cross_imports(tmp_path) == ["test_b.py imports test_a", "test_c.py imports test_b"]


def shared_basenames(root: Path) -> dict[str, list[str]]:
    """Test module names that more than one file under ROOT carries, with the files: with the tiers' folders
    on pytest's path (pyproject.toml), one session over two tiers cannot collect both."""
    seen: dict[str, list[str]] = {}
    for path in sorted(root.rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(root)))
    return {name: files for name, files in seen.items() if len(files) > 1}


def test_each_test_module_name_is_used_once() -> None:
    assert shared_basenames(REPO / "tests") == {}, "rename one of each pair"


def test_a_name_used_twice_is_named(tmp_path: Path) -> None:
    for tier in ("unit", "integration"):
        (tmp_path / tier).mkdir()
        (tmp_path / tier / "test_same.py").write_text("")
    (tmp_path / "unit" / "test_other.py").write_text("")
    assert shared_basenames(tmp_path) == {"test_same.py": ["integration/test_same.py", "unit/test_same.py"]}
