"""Shared fixtures for the project's own tests."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent


class ConfigTree:
    """A writable copy of serve_configs/ for tests that break a profile on purpose."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def edit(self, rel: str, fn: Callable[[dict[str, Any]], None]) -> None:
        path = self.root / rel
        data = yaml.safe_load(path.read_text()) if path.exists() else {}
        data = data or {}
        fn(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False))

    def write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def config_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ConfigTree]:
    root = tmp_path / "serve_configs"
    shutil.copytree(REPO / "serve_configs", root)
    monkeypatch.setenv("VFLEET_SERVE_CONFIGS", str(root))
    yield ConfigTree(root)
