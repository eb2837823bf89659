"""The checkout's root and a writable copy of its serve profiles, for the tests of every tier.

Tests import these as ``from conftest import REPO, ConfigTree``: each tier's folder may hold its own
conftest.py (tests/unit has the tier's guard), and pytest imports every one of them as ``conftest``, so
each conftest re-exports these two names from here and the import means the same whichever conftest
``conftest`` is when a test module is imported."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def load_file_module(rel: str, name: str) -> ModuleType:
    """A Python file of the checkout that is no package module (an Ansible module or plugin), imported as NAME."""
    spec = importlib.util.spec_from_file_location(name, REPO / rel)
    assert spec is not None and spec.loader is not None, rel
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
