"""The fleet page's record cell (issue 31, item 5): a deployment record the controller's signature does not
vouch for is shown as not trusted, with the reason the check gave (the node and the file), never as the
deployed state it claims."""

from __future__ import annotations

from vfleet.pages import fleet_html

ROW = {"node": "n1", "image": "vfleet-cuda:x", "record_state": "deployed", "updated_at": "2026-12-06T00:00:00Z"}


def test_a_trusted_record_shows_its_state() -> None:
    c = fleet_html.node_cells(ROW)["record"]
    assert (c.state, c.text) == ("ok", "deployed 2026-12-06T00:00:00Z")


def test_an_untrusted_record_is_bad_and_says_why() -> None:
    why = "n1: /var/lib/vfleet/deployed.json: it was edited after the controller signed it (previous changed)"
    c = fleet_html.node_cells({**ROW, "record_problem": why})["record"]
    assert (c.state, c.text) == ("bad", "record NOT TRUSTED")
    assert c.why == why
