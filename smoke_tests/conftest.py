"""Boot-verify: a pytest suite run against a live vLLM server (see docs/boot-verify.md).

`vfleet verify` runs it in its own process (vfleet.verify.suite): its Session plugin carries the inputs
(server URL, profile, served model, API key, log file or container, docker daemon) and collects each
check's outcome and the figures the checks write; nothing passes through files or the environment.
Run outside `vfleet verify`, the suite stops at once saying so.

The files are numbered so checks that read the log and the metrics run after the traffic. docker
calls (`docker logs`, `docker exec`) go to DOCKER_HOST, which `vfleet verify --docker-host` sets for
the run. A check that skips must be declared in the profile's `verify.not_applicable`, or the report
fails.
"""

from __future__ import annotations

from typing import Any

import pytest

from vfleet.verify.client import Client
from vfleet.verify.suite import SESSION_KEY, session_of
from vfleet.verify.target import Target


@pytest.fixture(scope="session")
def target(pytestconfig: pytest.Config) -> Target:
    session = session_of(pytestconfig)
    inputs = session.inputs
    assert inputs is not None  # session_of stops the run otherwise
    url = inputs.url.rstrip("/")
    t = Target(
        url=url,
        profile=inputs.profile,
        client=Client(url, api_key=inputs.api_key, model=inputs.model),
        log_file=inputs.log,
        container=inputs.container,
        figures=session.figures,
    )
    try:
        t.start_metrics = t.client.metrics()
    except Exception as exc:  # the endpoint checks report the details
        t.figures["start_metrics_error"] = str(exc)
    return t


@pytest.fixture
def figures(target: Target) -> dict[str, Any]:
    """A dict the tests write their figures into; it lands in the report."""
    return target.figures


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "load_level" in metafunc.fixturenames:
        session = metafunc.config.stash.get(SESSION_KEY, None)
        levels = session.inputs.profile.verify.load.levels if session and session.inputs else [1, 32]
        metafunc.parametrize("load_level", levels, ids=[f"C{c}" for c in levels])
