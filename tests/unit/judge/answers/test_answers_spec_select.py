"""The profile's verify.answers section, the drift figures and the stable-item selection."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pydantic import ValidationError

from vfleet.profile_answers import AnswersSpec
from vfleet.verify.answers.drift import Drift, allowance_from_aa, nearest_rank
from vfleet.verify.answers.questions import load_set, parse_set
from vfleet.verify.answers.records import AnswerRecord, ItemAnswer
from vfleet.verify.answers.scoring import RULE
from vfleet.verify.answers.select import derived_set, stable_ids


def test_spec_defaults_and_bounds() -> None:
    spec = AnswersSpec.model_validate({})
    assert (spec.questions, spec.margin, spec.confidence, spec.drift) == ("basic-v1", 0.05, 0.95, None)
    for bad in ({"margin": 0.5}, {"confidence": 0.5}, {"concurrency": 0}, {"questions": "../x"}, {"sets": "x"}):
        with pytest.raises(ValidationError):
            AnswersSpec.model_validate(bad)
    with pytest.raises(ValidationError, match="measured_by"):
        AnswersSpec.model_validate({"drift": {"mean_abs": 0.1, "p99": 0.2, "top1_share": 0.01}})


def test_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert nearest_rank(values, 0.99) == 99.0
    assert nearest_rank(values, 1.0) == 100.0
    assert nearest_rank([3.0], 0.99) == 3.0


def test_allowance_from_aa_is_factor_times_the_worst_pair() -> None:
    runs = [Drift(10, 0.01, 0.05, 0.06, 0.0), Drift(10, 0.02, 0.03, 0.04, 0.6)]
    a = allowance_from_aa(runs, 2.0, "python -m vfleet.verify.answers.select aa ...")
    assert (a.mean_abs, a.p99, a.top1_share) == (0.04, 0.1, 1.0)
    with pytest.raises(ValueError, match="factor"):
        allowance_from_aa(runs, 0.5, "x" * 10)


def _run(responses: dict[str, str]) -> AnswerRecord:
    items = tuple(ItemAnswer(i, r, "stop", False) for i, r in responses.items())
    return AnswerRecord("basic", 1, "s", RULE, "p", "m", 16, 1, items)


def test_stable_ids_keep_what_every_run_answered_alike() -> None:
    runs = [_run({"a": "Paris", "b": "12", "c": "x"}), _run({"a": "Paris ", "b": "13", "c": "x"})]
    errored = dataclasses.replace(runs[0], items=(*runs[0].items[:2], dataclasses.replace(runs[0].items[2], error="e")))
    assert stable_ids(runs) == ["a", "c"]
    assert stable_ids([*runs, errored]) == ["a"]


def test_derived_set_is_a_valid_set_of_the_kept_items(tmp_path: Path) -> None:
    qset = load_set("basic-v1")
    keep = [qset.items[3].id, qset.items[0].id]
    path = tmp_path / "basic-smol.jsonl"
    path.write_text(derived_set(qset, keep, "basic-smol", "test"))
    derived = parse_set(path)
    assert [i.id for i in derived.items] == [qset.items[0].id, qset.items[3].id]
    assert derived.items[0] == qset.items[0] and derived.name == "basic-smol"
