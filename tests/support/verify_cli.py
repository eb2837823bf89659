"""`vfleet verify` as the tests run it: the CLI in a child process, the signing and trusting of the tests'
controller key, a watch on every process's command line for a leaked secret, and a report's checks by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from support.reports import key_files


def signing() -> dict[str, str]:
    """The environment with which `vfleet verify` signs its summary with the tests' controller key."""
    return {"VFLEET_SIGN_KEY": str(key_files()[0])}


def trusting() -> list[str]:
    """The `vfleet promote` arguments that trust the tests' controller key."""
    return ["--trusted-key", f"verify,ab={key_files()[1]}"]


def vfleet(
    *args: str, env: dict[str, str] | None = None, timeout: int = 600, drop: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`python -m vfleet ARGS` with ``env`` added to this environment and the variables in ``drop`` removed."""
    return subprocess.run(
        [sys.executable, "-m", "vfleet", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**{k: v for k, v in os.environ.items() if k not in drop}, **(env or {})},
        check=False,
    )


class CmdlineWatch:
    """Reads every /proc/PID/cmdline every 50 ms while a command runs: whether the `vfleet verify`
    process (it runs the suite in-process) was seen, and every command line that held the secret."""

    def __init__(self, secret: str) -> None:
        self.secret = secret.encode()
        self.leaks: list[str] = []
        self.saw_suite = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    argv = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"vfleet\0verify\0" in argv:
                    self.saw_suite = True
                if self.secret in argv:
                    self.leaks.append(argv.replace(b"\0", b" ").decode(errors="replace"))
            time.sleep(0.05)

    def __enter__(self) -> CmdlineWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def assert_no_leak(secret: str, out: Path, proc: subprocess.CompletedProcess[str], watch: CmdlineWatch) -> None:
    assert watch.saw_suite, "the watcher never saw the `vfleet verify` process (nothing was checked)"
    assert not watch.leaks, f"the API key was on a command line: {watch.leaks[:1]}"
    for path in out.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"the API key leaked into {path}"
    assert secret not in proc.stdout + proc.stderr


def checks(out: Path) -> dict[str, dict[str, Any]]:
    rep = json.loads((out / "report.json").read_text())
    return {c["name"]: c for c in rep["checks"]}
