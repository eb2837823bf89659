"""No module of the package is over 400 lines (issue 35): a module that grows past it is split into rooms
(as vfleet/verify/ was into log/, probe/ and record/), not left to grow. The lab (lab/) and the tests are
not the product and are not held to it."""

from __future__ import annotations

from pathlib import Path

from conftest import REPO

LIMIT = 400


def over_limit(root: Path, limit: int = LIMIT) -> dict[str, int]:
    """Modules under ROOT longer than LIMIT lines, with their line counts."""
    out: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        n = len(path.read_text().splitlines())
        if n > limit:
            out[str(path.relative_to(root.parent))] = n
    return out


def test_no_module_of_the_package_is_over_the_limit() -> None:
    assert over_limit(REPO / "vfleet") == {}, f"split these into rooms of {LIMIT} lines or fewer"


def test_a_module_over_the_limit_is_named(tmp_path: Path) -> None:
    pkg = tmp_path / "vfleet"
    (pkg / "room").mkdir(parents=True)
    (pkg / "room" / "ok.py").write_text("x = 1\n" * LIMIT)
    (pkg / "room" / "long.py").write_text("x = 1\n" * (LIMIT + 1))
    assert over_limit(pkg) == {"vfleet/room/long.py": LIMIT + 1}
