"""The boot-verify suite (smoke_tests/) run in this process: `pytest.main` with a `Session` plugin that
hands the suite its inputs and collects what it found.

smoke_tests/conftest.py reads the inputs from the session (`session_of(config)`) and the checks write
their figures into it; nothing goes through files, the environment or module globals. The suite's own
modules (conftest.py, test_*.py) are imported fresh for every run and dropped after it, so a second
run in the same process starts clean, and a `conftest` module already imported here (a pytest run's
tests/conftest.py) is put aside for the run and put back after.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from vfleet.errors import VfleetError
from vfleet.paths import suite_dir
from vfleet.profiles import Profile
from vfleet.verify.record.model import CheckResult

SESSION_KEY = pytest.StashKey["Session"]()


@dataclass
class Inputs:
    """What the suite runs against (checked by vfleet.verify.runner before the run)."""

    url: str
    profile: Profile
    model: str
    api_key: str | None = None  # the key itself: in memory only, never in a file, an argument or the report
    log: Path | None = None
    container: str | None = None
    docker_host: str | None = None  # every docker call of the suite goes to this daemon


@dataclass
class Session:
    """The pytest plugin of one run: the inputs, and the results and figures the suite reports."""

    inputs: Inputs | None
    results: list[CheckResult] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    exitstatus: int | None = None
    collected: list[str] = field(default_factory=list)

    def pytest_configure(self, config: pytest.Config) -> None:
        config.stash[SESSION_KEY] = self

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collected = [item.nodeid for item in session.items]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not (report.when == "call" or (report.when == "setup" and report.outcome != "passed")):
            return
        message = ""
        if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2]).removeprefix("Skipped: ")
        elif report.outcome == "failed":
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else str(report.longrepr)[-800:]
        parts = report.nodeid.split("::")
        self.results.append(
            CheckResult(
                id=report.nodeid,
                name=parts[-1],
                file=parts[0],
                outcome=report.outcome,
                message=message,
                duration_s=round(report.duration, 3),
                doc="",
            )
        )

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.exitstatus = int(exitstatus)
        self.figures["suite_finished_unix"] = time.time()


def session_of(config: pytest.Config) -> Session:
    """The run's session; outside `vfleet verify` there is none and the suite stops with a clear message."""
    found = config.stash.get(SESSION_KEY, None)
    if found is None or found.inputs is None:
        pytest.exit("the boot-verify suite runs under `vfleet verify` (it passes the server and profile)", returncode=4)
    return found


class _Lines(io.TextIOBase):
    """pytest's output (stdout and stderr, as `2>&1` gave it before), cut into lines: each to ``sink``
    (DIR/pytest-output.txt) and ``on_line``. ``on_line`` runs with the real stdout and stderr back in
    place, so `print` there goes to the terminal."""

    def __init__(self, sink: io.TextIOBase | Any, on_line: Callable[[str], None] | None) -> None:
        self._buf = ""
        self._sink, self._on_line = sink, on_line
        self._real = (sys.stdout, sys.stderr)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, s: str) -> int:
        self._sink.write(s)
        self._buf += s
        while "\n" in self._buf:
            line, self._buf = self._buf.split("\n", 1)
            self._emit(line)
        return len(s)

    def _emit(self, line: str) -> None:
        if self._on_line is not None:
            with contextlib.redirect_stdout(self._real[0]), contextlib.redirect_stderr(self._real[1]):
                self._on_line(line)

    def close_lines(self) -> None:
        if self._buf:
            self._emit(self._buf)
            self._buf = ""


@contextlib.contextmanager
def _suite_imports(suite: Path) -> Iterator[None]:
    """Import the suite's modules fresh, and leave none of them (nor its sys.path entry) behind."""
    names = {p.stem for p in suite.glob("*.py")}
    put_aside = {n: sys.modules.pop(n) for n in names if n in sys.modules}
    path = list(sys.path)
    try:
        yield
    finally:
        for name, mod in list(sys.modules.items()):
            file = getattr(mod, "__file__", None)
            if name in names or (file and Path(file).resolve().parent == suite.resolve()):
                del sys.modules[name]
        sys.modules.update(put_aside)
        sys.path[:] = path


@contextlib.contextmanager
def _docker_host(host: str | None) -> Iterator[None]:
    """DOCKER_HOST for the suite's docker calls (they inherit this process's environment), restored after."""
    before = os.environ.get("DOCKER_HOST")
    if host:
        os.environ["DOCKER_HOST"] = host
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = before


def run(session: Session, args: list[str], output: Path | None, on_line: Callable[[str], None] | None) -> int:
    """pytest over the suite with ``args`` (after the suite's own config); its output, line by line, goes
    to ``output`` and ``on_line``. Returns pytest's exit status."""
    suite = suite_dir()
    argv = [str(suite), "-p", "no:cacheprovider", "--color=no", f"--rootdir={suite}", "-c", str(suite / "pytest.ini")]
    host = session.inputs.docker_host if session.inputs else None
    with contextlib.ExitStack() as stack:
        sink: Any = stack.enter_context(output.open("w")) if output is not None else io.StringIO()
        lines = _Lines(sink, on_line)
        stack.enter_context(_suite_imports(suite))
        stack.enter_context(_docker_host(host))
        stack.enter_context(contextlib.redirect_stdout(lines))
        stack.enter_context(contextlib.redirect_stderr(lines))
        rc = pytest.main([*argv, *args], plugins=[session])
        lines.close_lines()
    return int(rc)


def collect(profile: Profile) -> list[str]:
    """The node ids the suite collects for ``profile`` (no server needed)."""
    session = Session(Inputs(url="http://127.0.0.1:9", profile=profile, model=profile.served_model_name()))
    rc = run(session, ["--collect-only", "-q"], None, None)
    if rc != 0:
        raise VfleetError(f"collecting the boot-verify suite for {profile.name} exited {rc}")
    return session.collected
