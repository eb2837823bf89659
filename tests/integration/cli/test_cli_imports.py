"""Building the CLI imports only what every image has.

Every vfleet image runs `vfleet --version` at build time, which builds every subcommand's parser, and
`vfleet serve` as its entrypoint (a run of one command imports that command's module only). The GPU
images carry vLLM's dependencies, not vfleet's test and controller tools (pytest, jinja2, tqdm,
matplotlib, the supply-chain libraries); the local GPU stand-in carries exactly `STANDIN_WHEELS`. A
module-level import of anything else breaks every image build, which only an image build used to show
(pytest, imported at load by the in-process boot-verify runner, did). This runs the CLI in a child
Python in which any other third-party import fails.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import REPO

from vfleet.images.base import STANDIN_WHEELS

# Import names of the stand-in's wheels where they differ from the distribution name.
IMPORT_NAMES = {"pyyaml": ["yaml", "_yaml"]}

CHILD = textwrap.dedent(
    """
    import importlib.abc, sys
    allowed = set(sys.argv[1].split(","))

    class OnlyTheImageHas(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in allowed or top == "vfleet" or top.startswith("_"):
                return None
            raise ModuleNotFoundError(f"not in the image: {name}", name=name)

    sys.meta_path.insert(0, OnlyTheImageHas())
    from vfleet.cli import main
    from vfleet.cli import build_parser
    build_parser()  # every subcommand's parser, as `vfleet --help` builds it (a run of one command imports only it)
    rc = main(sys.argv[2:])
    tops = {m.split(".")[0] for m in sys.modules if not m.startswith("_")}
    # cython_runtime: a module Cython extensions (PyYAML's _yaml) register, not a package.
    leaked = sorted(tops - sys.stdlib_module_names - allowed - {"vfleet", "cython_runtime"})
    print("LEAKED", ",".join(leaked))
    sys.exit(rc)
    """
)


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    allowed = [name for w in STANDIN_WHEELS for name in IMPORT_NAMES.get(w, [w])]
    return subprocess.run(
        [sys.executable, "-c", CHILD, ",".join(allowed), *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )


def test_the_cli_loads_with_only_what_the_images_carry() -> None:
    proc = _run("profiles")  # builds every subcommand's parser, then runs one command to the end
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "glm-5.3-flash/mi355x" in proc.stdout, proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1] == "LEAKED", proc.stdout


def test_the_guard_catches_an_import_outside_the_image() -> None:
    """The child really refuses a package the images lack: pytest, which this test process has."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD.replace("from vfleet.cli import main", "import pytest\nfrom vfleet.cli import main"),
            "pydantic",
            "--version",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    assert "not in the image: pytest" in proc.stderr
