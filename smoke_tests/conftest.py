"""Boot-verify: a pytest suite run against a live vLLM server (see docs/boot-verify.md).

Inputs (pytest options, normally passed by `vfleet verify`):
  --vf-url URL            base URL of the server
  --vf-profile P          serve profile whose expectations apply (MODEL/PLATFORM)
  --vf-api-key-env VAR    name of the environment variable that holds the API key (never the key;
                          `vfleet verify` passes VFLEET_VERIFY_API_KEY, set in this process's environment)
  --vf-model NAME         served model name (default: the profile's)
  --vf-log FILE | --vf-container NAME   the server log, from a file or from `docker logs`
  --vf-out DIR            where results.json and figures.json go

The files are numbered so checks that read the log and the metrics run after the traffic. docker
calls (`docker logs`, `docker exec`) go to DOCKER_HOST when it is set (`vfleet verify --docker-host`).
A check that skips must be declared in the profile's `verify.not_applicable`, or the report fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from vfleet.profiles import Catalog
from vfleet.verify.client import Client
from vfleet.verify.target import Target


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("vfleet", "boot-verify")
    g.addoption("--vf-url", default=os.environ.get("VFLEET_VERIFY_URL"))
    g.addoption("--vf-profile", default=os.environ.get("VFLEET_VERIFY_PROFILE"))
    g.addoption("--vf-api-key-env", default=None)
    g.addoption("--vf-model", default=None)
    g.addoption("--vf-log", default=None)
    g.addoption("--vf-container", default=None)
    g.addoption("--vf-out", default=None)


_RESULTS: list[dict[str, Any]] = []
_TARGET: list[Target] = []


def pytest_configure(config: pytest.Config) -> None:
    _RESULTS.clear()
    _TARGET.clear()


@pytest.fixture(scope="session")
def target(pytestconfig: pytest.Config) -> Target:
    url = pytestconfig.getoption("--vf-url")
    prof_name = pytestconfig.getoption("--vf-profile")
    if not url or not prof_name:
        pytest.exit("boot-verify needs --vf-url and --vf-profile (use `vfleet verify`)", returncode=4)
    profile = Catalog().load(prof_name)
    key_env = pytestconfig.getoption("--vf-api-key-env")
    api_key = None
    if key_env:
        api_key = os.environ.get(key_env)
        if not api_key:
            pytest.exit(f"--api-key-env {key_env}: that environment variable is empty or unset", returncode=4)
    model = pytestconfig.getoption("--vf-model") or profile.served_model_name()
    log = pytestconfig.getoption("--vf-log")
    out = pytestconfig.getoption("--vf-out")
    t = Target(
        url=url.rstrip("/"),
        profile=profile,
        client=Client(url.rstrip("/"), api_key=api_key, model=model),
        log_file=Path(log) if log else None,
        container=pytestconfig.getoption("--vf-container"),
        out=Path(out) if out else None,
    )
    try:
        t.start_metrics = t.client.metrics()
    except Exception as exc:  # the endpoint checks report the details
        t.figures["start_metrics_error"] = str(exc)
    _TARGET.append(t)
    return t


@pytest.fixture
def figures(target: Target) -> dict[str, Any]:
    """A dict the tests write their figures into; it lands in the report."""
    return target.figures


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "load_level" in metafunc.fixturenames:
        levels: list[int] = [1, 32]
        name = metafunc.config.getoption("--vf-profile")
        if name:
            with contextlib.suppress(Exception):  # a bad profile is reported by the target fixture
                levels = Catalog().load(name).verify.load.levels
        metafunc.parametrize("load_level", levels, ids=[f"C{c}" for c in levels])


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        message = ""
        if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2]).removeprefix("Skipped: ")
        elif report.outcome == "failed":
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else str(report.longrepr)[-800:]
        doc = ""
        _RESULTS.append(
            {
                "id": report.nodeid,
                "name": report.nodeid.split("::")[-1],
                "file": report.nodeid.split("::")[0],
                "outcome": report.outcome,
                "message": message,
                "duration_s": round(report.duration, 3),
                "doc": doc,
            }
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    out = session.config.getoption("--vf-out")
    if not out:
        return
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.json").write_text(json.dumps({"exitstatus": int(exitstatus), "tests": _RESULTS}, indent=1))
    figs = _TARGET[0].figures if _TARGET else {}
    figs["suite_finished_unix"] = time.time()
    (path / "figures.json").write_text(json.dumps(figs, indent=1, default=str))
