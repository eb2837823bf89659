"""Shared fixtures for the project's own tests, in every tier (tests/unit, tests/integration, tests/e2e).

The helper modules beside this file (repo_helpers, image_helpers, supply_helpers, page_browser,
kvcorrupt) and the tier folders themselves are on sys.path (pyproject's `pythonpath`), so a test of any
tier imports them, and another tier's test module (``from test_promotion import key_files``), by name."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from repo_helpers import REPO, ConfigTree

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
