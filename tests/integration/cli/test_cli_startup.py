"""A run of one `vfleet` command imports that command only (vfleet/cli.py).

The fleet playbooks start the controller's `vfleet` once per gate and node (deploy-record sign and
check, render, promote --check) and once per run (fleet mark): several hundred processes in one test
tier. Building every subcommand's parser for each of them imported every command's dependencies
(pydantic, httpx, the verify and promotion modules), about half a second of CPU per call.
"""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

CHILD = """
import json, sys
from vfleet.cli import main
rc = main(sys.argv[1:])
mods = sorted(m for m in sys.modules if m.startswith("vfleet.commands.") or m.split(".")[0] in HEAVY)
print(json.dumps({"rc": rc, "modules": mods}))
"""
#: What the gate commands the playbooks run per node need none of.
HEAVY = ("pydantic", "httpx", "rich", "psutil")


def _modules(*argv: str, stdin: str = "") -> list[str]:
    code = f"HEAVY = {HEAVY!r}\n{CHILD}"
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rc"] == 0, proc.stdout[-3000:]
    mods: list[str] = out["modules"]
    return mods


def test_the_test_fleet_mark_imports_the_fleet_command_alone() -> None:
    hosts = json.dumps({"n1": {"ansible_connection": "ssh"}})
    assert _modules("fleet", "mark", "--hosts", hosts) == ["vfleet.commands.fleet"]


def test_a_render_imports_no_other_command() -> None:
    mods = _modules("render", "tiny/cpu", "--format", "json")
    assert [m for m in mods if m.startswith("vfleet.commands.")] == ["vfleet.commands.render"], mods
