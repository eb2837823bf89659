"""Put the test-only numerics-fault plugin (vfleet_numfault.py) on a server's import path.

`plugin_path(dir)` writes a `vfleet_numfault_test-0.dist-info` with the `vllm.general_plugins` entry point
next to a copy of the module, and returns DIR: a server started with PYTHONPATH=DIR (and VFLEET_NUMFAULT_FILE
set) loads it in every vLLM process. Nothing is installed in the venv.
"""

from __future__ import annotations

import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent


def plugin_path(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy2(HERE / "vfleet_numfault.py", root / "vfleet_numfault.py")
    info = root / "vfleet_numfault_test-0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vfleet-numfault-test\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[vllm.general_plugins]\nvfleet_numfault = vfleet_numfault:register\n")
    return root
