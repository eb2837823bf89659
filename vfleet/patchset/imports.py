"""`vfleet patches verify --import-check`: import every patched module of a tree, as the image build does.

The modules are imported in one child process of this Python (vLLM and torch load once), each in its own
try, so that every module that fails is named. Where this Python has no torch (the GPU stand-in base) the
check cannot run and says so in a notice; on the CPU image a module that needs torchvision, which that
image leaves out on purpose, is a notice too. Anything else that fails to import is a problem.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

_CHILD = """
import importlib, json, sys
result = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        result[name] = ""
    except BaseException as exc:
        result[name] = f"{type(exc).__name__}: {exc}"
print("VFLEET-IMPORTS " + json.dumps(result))
"""


@dataclass
class ImportCheck:
    imported: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)


def module_name(rel: str) -> str:
    return rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


def import_check(root: Path, files: list[str], platform: str) -> ImportCheck:
    """Import the patched modules (files: paths under root) with root first on sys.path."""
    out = ImportCheck()
    modules = [module_name(rel) for rel in files if rel.endswith(".py")]
    if importlib.util.find_spec("torch") is None:
        out.notices.append("no torch in this base (a stand-in?): skipped the import check of the patched modules")
    elif modules:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, *modules],
            cwd=root,  # `python -c` puts the working directory first on sys.path: root's vllm/ is imported
            capture_output=True,
            text=True,
            check=False,
        )
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("VFLEET-IMPORTS ")), "")
        if not line:
            tail = (proc.stdout + proc.stderr).strip()[-800:]
            out.problems.append(f"the import check did not finish (exit {proc.returncode}): {tail}")
            return out
        for name, err in json.loads(line.removeprefix("VFLEET-IMPORTS ")).items():
            if not err:
                out.imported.append(name)
            elif platform == "cpu" and "No module named 'torchvision'" in err:
                # The CPU image removes torchvision on purpose (its CUDA build breaks transformers beside
                # torch+cpu); the GLM-5.3 package pulls in a vision model that needs it.
                out.notices.append(f"skipped the import of {name}: it needs torchvision, which the CPU image omits")
            else:
                out.problems.append(f"patched module {name} does not import: {err[-800:]}")
    if platform != "cpu":
        out.notices.append("no GPU at build time: GPU kernel checks of the patched code run at boot-verify on the node")
    return out
