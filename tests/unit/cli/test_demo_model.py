"""The demo serves the real small model that the bootstrap builds, under a profile that runs the answers check."""

from __future__ import annotations

from vfleet import bootstrap
from vfleet.commands import demo
from vfleet.profiles import Catalog


def test_the_bootstrap_builds_the_model_the_demo_serves() -> None:
    assert bootstrap.DEMO_MODEL == demo.MODEL


def test_the_demo_profile_serves_that_model_and_asks_it_questions() -> None:
    prof = Catalog().load(demo.PROFILE)
    assert prof.served_model_name() == demo.MODEL and prof.production is False
    assert prof.verify.answers is not None and prof.verify.probes
    assert "test_answers" not in prof.verify.not_applicable and "test_probes" not in prof.verify.not_applicable
