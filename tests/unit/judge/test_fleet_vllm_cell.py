"""The fleet page's vLLM cell says what the project has proven of the node's base (issue 24, item 7):
booted and verified where, or built and kernel-tested only, from versions.json `bases.V.proven`; a base
this checkout does not know is unknown, never green."""

from __future__ import annotations

import pytest
from conftest import REPO

from vfleet.pages import fleet_html
from vfleet.pins import load

PINS = load(REPO / "versions.json")


def _cell(version: str) -> tuple[str, str, str]:
    c = fleet_html.node_cells({"node": "n1", "image": "vfleet-cuda:x", "vllm_version": version})["vllm"]
    return c.state, c.text, c.why


@pytest.mark.parametrize("base", list(PINS.bases))
def test_every_base_says_what_was_proven_and_the_cell_shows_it(base: str) -> None:
    proven = PINS.bases[base].proven
    assert proven, f"versions.json bases.{base} has no `proven` statement"
    assert _cell(base) == ("ok", base, f"vLLM {base}: {proven}")


def test_a_base_the_checkout_does_not_know_is_unknown() -> None:
    state, text, why = _cell("0.99.0")
    assert (state, text) == ("unknown", "0.99.0")
    assert "not a base of this checkout's versions.json" in why


def test_no_label_is_unknown() -> None:
    assert _cell("")[0] == "unknown"
