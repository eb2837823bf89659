"""The fleet page's weights cell (issue 34): each node's model manifest digest as its last rollout found it, and
whether it matched the promoted manifest; NOT CHECKED where that run had nothing to compare with, and unknown
where the node's record is missing, not trusted, or older than the field."""

from __future__ import annotations

from vfleet.pages import fleet_html

DIGEST = "sha256:" + "ab" * 32
IMAGE = "registry:5000/vfleet-cpu@sha256:" + "cd" * 32
ROW = {"node": "n1", "image": IMAGE, "record_state": "deployed", "updated_at": "2026-12-07T00:00:00Z"}
MATCHED = {"digest": DIGEST, "promoted": DIGEST, "promoted_with": IMAGE, "run_id": "r1"}


def cell(**row: object) -> fleet_html.html.Cell:
    return fleet_html.node_cells({**ROW, **row})["weights"]


def test_weights_that_matched_the_promoted_manifest_are_green_with_their_digest() -> None:
    c = cell(weights=MATCHED)
    assert (c.state, c.text) == ("ok", fleet_html.html.short_digest(DIGEST))
    assert c.why == f"matched the manifest promoted with {IMAGE} (run r1, before the swap)"


def test_a_record_that_holds_other_weights_is_bad_and_names_the_promoted_manifest() -> None:
    other = "sha256:" + "ef" * 32
    c = cell(weights={**MATCHED, "digest": other})
    assert c.state == "bad" and c.text == f"holds {fleet_html.html.short_digest(other)}"
    assert f"the promoted manifest is {DIGEST}" in c.why


def test_a_run_with_nothing_to_compare_with_says_not_checked() -> None:
    c = cell(weights={"not_checked": "no promoted manifest to compare with", "run_id": "r2"})
    assert (c.state, c.text) == ("unknown", "NOT CHECKED") and c.why == "run r2: no promoted manifest to compare with"


def test_no_trusted_record_or_an_older_one_is_unknown_never_green() -> None:
    assert cell(record_state="", weights=MATCHED).state == "unknown"
    assert cell(record_problem="n1: edited after signing", weights=MATCHED).state == "unknown"
    for old in ({}, None):
        c = cell(weights=old)
        assert c.state == "unknown" and "does not say which weights" in c.why
