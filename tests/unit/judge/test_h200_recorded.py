"""The recorded H200 boot-verify run (tests/fixtures/h200-verify, made with benchmarks/h200_verify.sh
on one H200 with vLLM 0.26.0) keeps its verdicts under today's code: the log checks pass the real
CUDA-graph boot of the 1B model under its profile and fail the `--enforce-eager` boot on graph mode
alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from vfleet.profiles import Catalog, Profile
from vfleet.verify.log import check as logcheck

H200 = Path(__file__).resolve().parents[2] / "fixtures" / "h200-verify"


@pytest.fixture(scope="module")
def profile() -> Profile:
    return Catalog(H200 / "serve_configs").load("llama-1b-random/h200")


@pytest.mark.parametrize("run", ["run1", "run2"])
def test_graph_boot_passes_every_log_check(profile: Profile, run: str) -> None:
    text = (H200 / run / "boot-graph.log").read_text()
    failed = [f for f in logcheck.all_checks(text, profile.verify) if f.ok is False]
    assert not failed, [f"{f.check}: {f.message}" for f in failed]


@pytest.mark.parametrize("run", ["run1", "run2"])
def test_eager_boot_fails_graph_mode_only(profile: Profile, run: str) -> None:
    text = (H200 / run / "boot-eager.log").read_text()
    failed = {f.check: f.message for f in logcheck.all_checks(text, profile.verify) if f.ok is False}
    assert set(failed) == {"graph_mode"}, failed
    assert "eager mode" in failed["graph_mode"] and "Enforce eager set" in failed["graph_mode"], failed
