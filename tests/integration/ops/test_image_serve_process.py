"""`vfleet serve` as the image runs it: a fresh process with the real CLI (tests/unit/build/test_image_serve.py
runs the same entrypoint in this process with --dry-run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import REPO, ConfigTree

KEY = "sk-test-serve-0123456789"


def test_missing_model_fails_before_anything_else(config_tree: ConfigTree, tmp_path: Path) -> None:
    """As the image runs it: a fresh process, the real CLI, no weights mounted at the profile's path."""
    missing = tmp_path / "not-mounted"
    config_tree.edit("models/tiny/model.yaml", lambda d: d["vllm"].__setitem__("model", str(missing)))
    env = {
        "PATH": "/usr/bin:/bin",
        "VFLEET_SERVE_CONFIGS": str(config_tree.root),
        "VFLEET_PROFILE": "tiny/cpu",
        "VLLM_API_KEY": KEY,
        "VFLEET_RUN_DIR": str(tmp_path / "run"),
        "HOME": str(tmp_path),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet", "serve"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 3, proc.stderr
    assert f"model path {missing} does not exist" in proc.stderr
    assert "--volume HOST_DIR:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists(), "nothing may be rendered before the preflight passes"
