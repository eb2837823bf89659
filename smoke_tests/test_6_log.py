"""2.2: the server log (read after the traffic, so faults that fire mid-decode are in it).

One test per entry of the log-check registry (vfleet.verify.log.check.REGISTRY): test_log[NAME]."""

from __future__ import annotations

from typing import Any

import pytest

from vfleet.verify.log import check as logcheck
from vfleet.verify.log.parse import parse
from vfleet.verify.target import Target


@pytest.fixture(scope="module")
def log_text(target: Target) -> str:
    text = target.log_text()
    if text is None:
        pytest.skip("no server log given; pass --container NAME or --log FILE")
    return text


@pytest.mark.parametrize("check", logcheck.REGISTRY, ids=lambda c: c.name)
def test_log(target: Target, figures: dict[str, Any], log_text: str, check: logcheck.LogCheck) -> None:
    log = parse(log_text)
    verify = target.profile.verify
    f = check.run(log, verify, target.profile.production)
    # The check's figures land in the report whatever its outcome.
    figures.update(check.figures(log, verify))
    if f.skipped:
        pytest.skip(f.message)
    assert f.ok, f.message
