"""2.3: wide-margin correctness probes, read from the text (not the status code)."""

from __future__ import annotations

from typing import Any

import pytest

from vfleet.verify.answers.figure import measure, problems
from vfleet.verify.answers.records import RecordError
from vfleet.verify.client import HttpError
from vfleet.verify.target import Target


def test_probes(target: Target, figures: dict[str, Any]) -> None:
    probes = target.profile.verify.probes
    if not probes:
        pytest.skip("the profile lists no correctness probes (a random-weight model has no right answers)")
    bad: list[str] = []
    seen: list[dict[str, Any]] = []
    for probe in probes:
        out = target.client.chat(probe.prompt, max_tokens=probe.max_tokens)
        text, reason = out["text"], out["finish_reason"]
        seen.append({"prompt": probe.prompt, "expect": probe.expect, "text": text, "finish_reason": reason})
        if reason != "stop" or not text.strip() or probe.expect not in text:
            bad.append(
                f"{probe.prompt!r}: expected {probe.expect!r} with finish_reason stop; "
                f"saw {text[:120]!r} (finish_reason {reason})"
            )
    figures["probes"] = seen
    assert not bad, "probe answers wrong:\n  " + "\n  ".join(bad)


def test_answers(target: Target, figures: dict[str, Any]) -> None:
    """The profile's question set asked greedily, and the reference text's log-probabilities read; both land
    in the report for promotion to compare with the promoted build (docs/answers.md)."""
    spec = target.profile.verify.answers
    if spec is None:
        pytest.skip("the profile sets no verify.answers (a random-weight model has no right answers)")
    try:
        fig = measure(target.client, spec)
    except (HttpError, RecordError) as exc:
        pytest.fail(
            f"expected the question set {spec.questions} and the reference text {spec.reference} to be answered "
            f"(verify.answers); saw: {str(exc)[:400]}"
        )
    figures["answers"] = fig
    bad = problems(fig, spec)
    assert not bad, "; ".join(bad)
