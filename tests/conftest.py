"""Shared fixtures for the project's own tests, in every tier (tests/unit, tests/integration, tests/e2e).

The helpers the tests share are tests/support/ (``from support.reports import key_files``) and kvcorrupt/;
tests/ and the tier folders are on sys.path (pyproject's `pythonpath`). No test module imports another
(tests/unit/test_test_imports.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.repo import REPO, ConfigTree

__all__ = ["REPO", "ConfigTree", "config_tree"]

# pytester runs a pytest session inside a test (tests/unit/test_unit_guard.py runs the unit tier's guard
# on tests written to fail it); plugins can only be named in this, the top conftest.
pytest_plugins = ["pytester"]


@pytest.fixture
def config_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ConfigTree]:
    root = tmp_path / "serve_configs"
    shutil.copytree(REPO / "serve_configs", root)
    monkeypatch.setenv("VFLEET_SERVE_CONFIGS", str(root))
    yield ConfigTree(root)
