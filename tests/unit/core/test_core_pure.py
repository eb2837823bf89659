"""The core floor is plain data and the code that reads it (docs/architecture.md): no module of it starts a process.
The modules that ask the machine (vfleet.host: its lock and packages; vfleet.gpus: its GPU tools) or a vLLM tree in
a child Python (vfleet.vllm_tree) sit on the build floor. The core's modules are read from the floors contract in
pyproject.toml, so a module added to the core is held to this too."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from conftest import REPO

#: Modules that start processes, and the os functions that do.
PROCESS_MODULES = {"subprocess", "multiprocessing", "psutil", "pty", "asyncio.subprocess", "concurrent.futures.process"}
OS_CALLS = {"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp"}
OS_PREFIXES = ("exec", "spawn")


def core_modules(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    """The core floor: the last layer of the floors contract."""
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    floors = next(c for c in contracts if c["id"] == "floors")
    return [m.strip() for m in floors["layers"][-1].split(":")]


def process_starts(path: Path) -> list[str]:
    """Where the module at PATH imports a process module or calls an os function that starts one."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [f"{path.name}:{node.lineno} import {a.name}" for a in node.names if a.name in PROCESS_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module in PROCESS_MODULES:
            out.append(f"{path.name}:{node.lineno} from {node.module} import")
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and (node.attr in OS_CALLS or node.attr.startswith(OS_PREFIXES))
        ):
            out.append(f"{path.name}:{node.lineno} os.{node.attr}")
    return out


def files_of(package: Path, module: str) -> list[Path]:
    path = package / module
    return sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]


def test_no_core_module_starts_a_process() -> None:
    modules = core_modules()
    assert "detect" in modules and "vllm_args" in modules and not {"host", "gpus"} & set(modules), modules
    found = [hit for m in modules for f in files_of(REPO / "vfleet", m) for hit in process_starts(f)]
    assert found == [], f"the core floor starts no process; move this to the floor that owns it: {found}"


def test_a_process_started_in_the_core_is_named(tmp_path: Path) -> None:
    (tmp_path / "plain.py").write_text("import json\nimport os\nx = os.path.join('a', 'b')\n")
    assert process_starts(tmp_path / "plain.py") == []
    (tmp_path / "runs.py").write_text("import subprocess\nimport os\nos.system('x')\nos.execvp('a', ['a'])\n")
    (tmp_path / "lazy.py").write_text("def f():\n    from psutil import Process\n")
    assert process_starts(tmp_path / "runs.py") == [
        "runs.py:1 import subprocess",
        "runs.py:3 os.system",
        "runs.py:4 os.execvp",
    ]
    assert process_starts(tmp_path / "lazy.py") == ["lazy.py:2 from psutil import"]
