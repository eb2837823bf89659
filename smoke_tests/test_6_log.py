"""2.2: the server log (read after the traffic, so faults that fire mid-decode are in it)."""

from __future__ import annotations

from typing import Any

import pytest

from vfleet.verify import logcheck
from vfleet.verify.checks import LOG_CHECKS
from vfleet.verify.logrules import FAMILY_IDS
from vfleet.verify.target import Target


@pytest.fixture(scope="module")
def log_text(target: Target) -> str:
    text = target.log_text()
    if text is None:
        pytest.skip("no server log given; pass --container NAME or --log FILE")
    return text


@pytest.mark.parametrize("check", LOG_CHECKS)
def test_log(target: Target, figures: dict[str, Any], log_text: str, check: str) -> None:
    findings = {
        f.check: f for f in logcheck.all_checks(log_text, target.profile.verify, production=target.profile.production)
    }
    f = findings[check]
    if check == "kv_tokens":
        figures["kv_tokens"] = logcheck.kv_tokens(log_text)
    if check == "attention_backend":
        figures["attention_backends"] = logcheck.attention_backends(log_text)
    if check == "faults":
        # what the deny-by-default fault check looked for, and what its allow-list excused
        scan = logcheck.scan_faults(log_text, graphs_expected=target.profile.verify.graph_mode)
        figures["log_families"] = list(FAMILY_IDS)
        figures["log_allowed"] = [{"entry": a.id, "line": ev.first.no} for ev, a in scan.allowed]
    if f.skipped:
        pytest.skip(f.message)
    assert f.ok, f.message
