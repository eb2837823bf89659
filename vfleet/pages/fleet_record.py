"""The fleet page's cells read from a node's deployment record (vfleet.pages.fleet_html): its state and kept
failures, the gates its deploy did not check, and the weights its last rollout found."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vfleet.pages import html
from vfleet.pages.html import Cell

__all__ = ["gates", "record", "weights"]


def record(row: dict[str, Any]) -> Cell:
    problem = str(row.get("record_problem") or "")
    if problem:
        # The node's record does not carry the controller's signature for this node (issue 31): nothing
        # it says (what runs, which gates the image passed) is taken, here or by a rollback.
        return Cell("record NOT TRUSTED", "bad", problem[:400])
    state = str(row.get("record_state") or "")
    failure = row.get("last_failure") or {}
    history = _failures(row)
    if state == "deployed" and failure:
        # Back on its previous image after a failed swap (restore.yml): serving, but the swap the operator
        # asked for did not happen. The cell links the evidence the rescue kept.
        evidence = str(failure.get("report") or failure.get("log") or "")
        page = Path(evidence) / "report.html" if failure.get("report") else Path(evidence)
        href = page.resolve().as_uri() if evidence and page.exists() else ""
        target = html.short_digest(str(failure.get("target") or "?"))
        text = f"deployed {row.get('updated_at') or ''}\nlast swap FAILED: to {target}"
        why = f"{failure.get('at') or ''} {failure.get('error') or ''}".strip()
        if evidence and not href:
            why += f" (its evidence {evidence} is not on this controller)"
        earlier = history[:-1] if history and history[-1] == failure else history
        if earlier:
            text += f"\n{len(earlier)} earlier failed swap(s) kept"
        return Cell(text.strip(), "bad", (why[:400] + _history_lines(earlier))[:1200], href)
    if state == "deployed":
        if history:
            # Green (the last swap went through), but the node's recent failures stay readable.
            text = f"deployed {row.get('updated_at') or ''}".strip() + f"\n{len(history)} earlier failed swap(s) kept"
            return Cell(text, "ok", _history_lines(history).strip()[:1200])
        return Cell(f"deployed {row.get('updated_at') or ''}".strip(), "ok")
    if state == "swapping":
        return Cell("swapping", "bad", f"a swap to {row.get('moving_to') or '?'} did not finish")
    if state:
        return Cell(state, "bad", json.dumps(failure)[:300] if failure else "")
    return html.unknown("no deployment record on the node")


def _failures(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's short history of failed swaps (restore.yml keeps the last few), oldest first."""
    raw = row.get("failures")
    return [f for f in raw if isinstance(f, dict)] if isinstance(raw, list) else []


def _history_lines(history: list[dict[str, Any]]) -> str:
    """One line per failed swap, newest first: when, to what, the step and its error, where its log is."""
    lines = [
        f"{f.get('at') or '?'} to {html.short_digest(str(f.get('target') or '?'))}: {str(f.get('error') or '?')[:160]}"
        + (f" (log {f['log']})" if f.get("log") else "")
        for f in reversed(history)
    ]
    return "".join(f"\n{line}" for line in lines)


def gates(row: dict[str, Any]) -> Cell:
    """The gates the node's last deploy did not check (its record's not_checked, issue 21): on a test
    fleet a switch may turn one off, and the page then says NOT CHECKED instead of green."""
    if not row.get("record_state"):
        return html.unknown("no deployment record on the node")
    skipped = row.get("not_checked")
    if not isinstance(skipped, list):
        return html.unknown("the deployment record does not say which gates ran (written before they were recorded)")
    if not skipped:
        return Cell("no gate switched off", "ok")
    lines = "\n".join(f"NOT CHECKED: {s}" for s in skipped)
    return Cell(lines, "unknown", "turned off by a test-fleet switch (docs/fleet.md); not a pass")


def weights(row: dict[str, Any]) -> Cell:
    """The node's weights as its last rollout found them (the record's weights, issue 34): the manifest digest the
    node holds and the promoted one it matched before the swap (a difference stops the node, so a record never
    holds one), or NOT CHECKED where that run had no promoted manifest to compare with."""
    if row.get("record_problem") or not row.get("record_state"):
        return html.unknown("no trusted deployment record on the node")
    weights = row.get("weights")
    if not isinstance(weights, dict) or not weights:
        return html.unknown("the deployment record does not say which weights the node holds (written before it did)")
    run = f"run {weights.get('run_id') or '?'}"
    if weights.get("not_checked"):
        return Cell("NOT CHECKED", "unknown", f"{run}: {weights['not_checked']}")
    digest, promoted = str(weights.get("digest") or ""), str(weights.get("promoted") or "")
    if not digest or digest != promoted:
        return Cell(
            f"holds {html.short_digest(digest or '?')}", "bad", f"{run}: the promoted manifest is {promoted or '?'}"
        )
    return Cell(
        html.short_digest(digest),
        "ok",
        f"matched the manifest promoted with {weights.get('promoted_with') or '?'} ({run}, before the swap)",
    )
