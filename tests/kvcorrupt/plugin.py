"""Put the test-only KV-corruption plugin (vfleet_kvcorrupt.py) on a server's import path.

`plugin_path(dir)` writes a `vfleet_kvcorrupt_test-0.dist-info` with the `vllm.general_plugins`
entry point next to a copy of the module, and returns DIR: a server started with PYTHONPATH=DIR
(and VFLEET_KVCORRUPT set) loads it in every vLLM process. Nothing is installed in the venv.
"""

from __future__ import annotations

import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent


def plugin_path(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy2(HERE / "vfleet_kvcorrupt.py", root / "vfleet_kvcorrupt.py")
    info = root / "vfleet_kvcorrupt_test-0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vfleet-kvcorrupt-test\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[vllm.general_plugins]\nvfleet_kvcorrupt = vfleet_kvcorrupt:register\n")
    return root
