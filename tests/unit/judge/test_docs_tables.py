"""Tables in docs/ that copy data from code are generated from it, and kept: the docs' table of log fault
families is vfleet.verify.log.rules.table(), between its markers in docs/boot-verify.md."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import REPO

from vfleet.verify.log import rules as logrules


def test_the_fault_families_table_in_the_docs_is_the_one_the_code_generates() -> None:
    text = (REPO / logrules.DOCS).read_text()
    assert logrules.docs_with_table(text) == text, (
        f"{logrules.DOCS}: the fault-family table differs from vfleet/verify/log/rules.py FAMILIES; "
        "run `python -m vfleet.verify.log.rules --docs`"
    )
    assert all(f"| `{f.id}` |" in text for f in logrules.FAMILIES)


def test_a_family_added_in_the_code_shows_up_as_a_difference(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a new family (or a changed description) makes the docs stale."""
    text = (REPO / logrules.DOCS).read_text()
    extra = dataclasses.replace(logrules.FAMILIES[0], id="new-family", detail="a fault nobody wrote down")
    monkeypatch.setattr(logrules, "FAMILIES", (*logrules.FAMILIES, extra))
    regenerated = logrules.docs_with_table(text)
    assert regenerated != text and "| `new-family` | a fault nobody wrote down |" in regenerated


def test_docs_without_the_markers_are_an_error() -> None:
    with pytest.raises(ValueError):
        logrules.docs_with_table("no markers here")
