"""ruff and mypy are clean, and the imports keep the floors (configuration in pyproject.toml; the floors:
docs/architecture.md)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

LINTED = [p for p in ("vfleet", "tests", "smoke_tests", "benchmarks") if (REPO / p).is_dir()]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, check=False)


def test_ruff_is_clean() -> None:
    proc = _run("ruff", "check", *LINTED)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _ruff_stdin(path: str, text: str) -> subprocess.CompletedProcess[str]:
    """ruff on TEXT as if it were the file PATH of the checkout (its per-file settings apply)."""
    argv = [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "--stdin-filename", path]
    return subprocess.run([*argv, "-"], cwd=REPO, input=text, capture_output=True, text=True, check=False)


PLANTED = {
    # a function-local import of a vfleet module: it dodges the floors' order unless the line says why
    "local-import": ("def _planted() -> object:\n    from vfleet import paths\n\n    return paths\n", "PLC0415"),
    # a function past the branch ceiling of today's largest (pyproject.toml, [tool.ruff.lint.pylint])
    "branches": (
        "def _planted(x: int) -> int:\n"
        + "".join(f"    if x == {i}:\n        x += {i}\n" for i in range(30))
        + "    return x\n",
        "PLR0912",
    ),
}


@pytest.mark.parametrize("plant", sorted(PLANTED))
def test_ruff_refuses_a_planted_shape_fault(plant: str) -> None:
    """The shape rules hold: a module of the package with a planted fault fails lint, naming the rule; the same
    module without it passes."""
    path = "vfleet/waiting.py"
    original = (REPO / path).read_text()
    assert _ruff_stdin(path, original).returncode == 0
    code, rule = PLANTED[plant]
    proc = _ruff_stdin(path, original + "\n\n" + code)
    assert proc.returncode == 1 and rule in proc.stdout, proc.stdout + proc.stderr


def test_ruff_format_is_clean() -> None:
    proc = _run("ruff", "format", "--check", "--diff", "vfleet")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr


def test_mypy_is_clean() -> None:
    proc = _run("mypy")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr


LINT_IMPORTS = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the package under ROOT with ROOT's pyproject.toml (no cache: a copy is analysed
    afresh), its report unwrapped and uncoloured so that a contract's name and an import are one line."""
    env = dict(os.environ, PYTHONPATH=str(root), COLUMNS="400", NO_COLOR="1", TERM="dumb")
    return subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache", "--no-logo"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _broken(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """The names of the contracts the report calls broken."""
    return [m.group(1).strip() for m in re.finditer(r"^(.+?) BROKEN$", proc.stdout, re.MULTILINE)]


def test_imports_keep_the_floors() -> None:
    """Every import contract holds: imports point down the floors, no circle, no lab in the product."""
    proc = _lint_imports(REPO)
    assert proc.returncode == 0, f"broken import contracts: {_broken(proc)}\n{proc.stdout[-6000:]}{proc.stderr}"
    assert "0 broken" in proc.stdout, proc.stdout


# A planted fault, the contract that must name it, and what the report must say about it.
PLANTS = {
    # A ground-floor module that imports the cli: an arrow back up across every floor.
    "core imports cli": (
        "vfleet/errors.py",
        "import vfleet.commands",
        "floors:",
        "vfleet.errors -> vfleet.commands",
    ),
    # The two arrows issue 23 found: the profile schema reading boot-verify's check registry (core up into
    # judge), and the image build calling the supply chain (a room of build up into the one above it).
    "the profile schema imports boot-verify": (
        "vfleet/profile_schema.py",
        "import vfleet.verify.log.check",
        "floors:",
        "vfleet.profile_schema -> vfleet.verify.log.check",
    ),
    "the image build calls the supply chain": (
        "vfleet/images/build.py",
        "import vfleet.supply.attest",
        "rooms:",
        "vfleet.images.build -> vfleet.supply.attest",
    ),
    # build reaching up into judge.
    "build imports judge": (
        "vfleet/images/refs.py",
        "import vfleet.verify.record.model",
        "floors:",
        "vfleet.images.refs -> vfleet.verify.record.model",
    ),
    # Inside one floor: boot-verify importing the A/B, which imports boot-verify (a room's arrow up).
    "judge room up": (
        "vfleet/verify/metrics.py",
        "import vfleet.ab.stats",
        "rooms:",
        "vfleet.verify.metrics -> vfleet.ab.stats",
    ),
    # A circle inside one package, which no floor sees: the log parser importing the log checks.
    "circle in a package": (
        "vfleet/verify/log/parse.py",
        "import vfleet.verify.log.check",
        "no circles:",
        ".parse",
    ),
    # The product reaching for the lab: even the cli, which once drove the test fleet itself.
    "the product imports the lab": (
        "vfleet/commands/fleet.py",
        "import lab.testfleet",
        "lab:",
        "vfleet.commands.fleet -> lab.testfleet",
    ),
    # A new module with no floor.
    "a module without a floor": (
        "vfleet/newroom.py",
        "",
        "floors:",
        "newroom",
    ),
}


@pytest.fixture(scope="module")
def clean_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package, the lab and their contracts, copied: clean before anything is planted in a copy of it."""
    root = tmp_path_factory.mktemp("floors")
    for package in ("vfleet", "lab"):
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    proc = _lint_imports(root)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return root


@pytest.mark.parametrize("plant", PLANTS)
def test_lint_imports_catches_a_planted_fault(plant: str, clean_copy: Path, tmp_path: Path) -> None:
    """The contracts can fail: on a copy of the package with one planted import, lint-imports fails, names
    the contract that the import breaks, and names the import."""
    path, line, contract, named = PLANTS[plant]
    shutil.copytree(clean_copy, tmp_path, dirs_exist_ok=True)
    target = tmp_path / path
    target.write_text((target.read_text() if target.exists() else "") + f"\n{line}\n")
    proc = _lint_imports(tmp_path)
    assert proc.returncode != 0, proc.stdout[-4000:]
    assert any(b.startswith(contract) for b in _broken(proc)), (_broken(proc), proc.stdout[-4000:])
    assert named in proc.stdout, proc.stdout[-4000:]
