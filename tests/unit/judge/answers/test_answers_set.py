"""The question sets and the reference text of vfleet/verify/answers/ keep their rules."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from vfleet.verify.answers.questions import PROSE_DIR, SETS, SetError, load_reference, load_set, parse_set, set_path
from vfleet.verify.answers.scoring import RULE, normalize, score

SET_NAMES = sorted(p.stem for p in SETS.glob("*.jsonl"))


def test_basic_v1_has_at_least_200_items_in_several_categories() -> None:
    qset = load_set("basic-v1")
    assert len(qset.items) >= 200
    assert len({i.category for i in qset.items}) >= 6
    assert qset.scoring == RULE


@pytest.mark.parametrize("name", SET_NAMES)
def test_every_accepted_form_is_scored_right_and_the_echo_is_not(name: str) -> None:
    """Each answer and alias, given as the response, is right (and normalizes to something: 'a' would not);
    the question echoed back is wrong (an answer that the question contains could not be told apart)."""
    bad = []
    for item in load_set(name).items:
        for form in item.accepted:
            if not normalize(form) or not score(item, form):
                bad.append(f"{item.id}: {form!r} is not scored right")
        if score(item, item.question):
            bad.append(f"{item.id}: the question echoed back is scored right")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", SET_NAMES)
def test_no_two_items_ask_the_same_question(name: str) -> None:
    """parse_set refuses repeated ids and questions; this also catches two wordings that normalize alike."""
    seen: dict[tuple[str, ...], str] = {}
    for item in load_set(name).items:
        key = normalize(item.question)
        assert key not in seen, f"{item.id} asks what {seen[key]} asks"
        seen[key] = item.id


def test_every_set_has_its_recorded_sha256() -> None:
    """A published set is never edited in place (runs are paired on its sha256): a change is a new version,
    recorded in sets/SHA256SUMS."""
    rows = [line.split() for line in (SETS / "SHA256SUMS").read_text().splitlines() if line.strip()]
    recorded = {name: digest for digest, name in rows}
    assert sorted(recorded) == sorted(f"{n}.jsonl" for n in SET_NAMES)
    for name in SET_NAMES:
        assert load_set(name).sha256 == recorded[f"{name}.jsonl"], f"{name} changed: give it a new version instead"


def test_the_reference_text_is_a_few_thousand_tokens_of_plain_prose() -> None:
    text, sha = load_reference("reference-v1")
    assert sha == hashlib.sha256((PROSE_DIR / "reference-v1.txt").read_bytes()).hexdigest()
    assert len(text.split()) >= 1800  # about 2,400 tokens of SmolLM2's tokenizer
    assert text.isascii()


def _write(tmp_path: Path, lines: list[object]) -> Path:
    path = tmp_path / "x-v1.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


HEADER = {"set": "x", "version": 1, "scoring": RULE, "about": "test"}
ITEM = {"id": "a-1", "category": "c", "question": "What is 1 plus 1?", "answer": "2", "aliases": []}


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([{**HEADER, "scoring": "exact"}], r"x-v1.jsonl:1: scoring 'exact' is not the rule"),
        ([HEADER, "{not json"], r"x-v1.jsonl:2: not JSON"),
        ([HEADER, {**ITEM, "answer": ""}], r"x-v1.jsonl:2: answer must be a non-empty string"),
        ([HEADER, {**ITEM, "aliases": "two"}], r"x-v1.jsonl:2: aliases must be a list"),
        ([HEADER, {**ITEM, "extra": 1}], r"x-v1.jsonl:2: an item has the keys"),
        ([HEADER, ITEM, {**ITEM, "question": "Other?"}], r"id 'a-1' appears twice"),
        ([HEADER, ITEM, {**ITEM, "id": "a-2"}], r"question .* appears twice \(item a-2\)"),
    ],
)
def test_a_malformed_set_is_refused_naming_file_and_line(tmp_path: Path, lines: list[object], message: str) -> None:
    with pytest.raises(SetError, match=message):
        parse_set(_write(tmp_path, lines))


def test_an_unknown_set_names_the_known_ones() -> None:
    with pytest.raises(SetError, match=r"the sets are: .*basic-v1"):
        set_path("nope-v9")
    with pytest.raises(SetError, match="not a plain name"):
        set_path("../x")
