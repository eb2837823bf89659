"""What a boot-verify report stands for, recomputed rather than read from its `passed` flag: the verdict of
its checks (vfleet.verify.record.model.verdict_problems, the one rule a report's `passed` is made by) and its
signed verification summary (a key trusted for the verify role signed a PASSED summary of this very
report.json). The fleet page's "last boot-verify" cell shows PASS only when both hold.

A page sits below this floor (vfleet.pages imports no verify module), so the page is handed `recheck`
by the command that writes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from vfleet.errors import VfleetError
from vfleet.supply.statements import VERIFY, Keyring, how_to_trust, open_statement
from vfleet.supply.store import SupplyError
from vfleet.verify.record.attestation import ATTESTATION, file_sha256
from vfleet.verify.record.model import Report, verdict_problems


class Standing(NamedTuple):
    """Why a report is not a PASS: by its checks (``checks``), and by its signed summary (``signature``);
    ``unsigned``: the summary could not be checked at all (none beside the report, or no verify-role key),
    which says nothing either way, unlike a summary that does not verify."""

    checks: list[str]
    signature: list[str]
    unsigned: bool = False


def recheck(report_dir: Path, keys: Keyring) -> Standing:
    """The standing of REPORT_DIR/report.json under the verify-role keys of KEYS."""
    path = report_dir / "report.json"
    try:
        rep = Report.load(path)
    except VfleetError as exc:
        return Standing([str(exc)], [])
    checks = verdict_problems(rep.checks, rep.pytest_exitstatus, rep.not_applicable)
    unsigned = not keys.of(VERIFY) or not (path.parent / ATTESTATION).is_file()
    return Standing(checks, summary_problems(path, keys), unsigned)


def summary_problems(report: Path, keys: Keyring) -> list[str]:
    """Why the signed summary beside REPORT does not show that this report passed (empty: it does)."""
    if not keys.of(VERIFY):
        return [f"its signed summary was not checked: no trusted key ({how_to_trust(VERIFY)})"]
    path = report.parent / ATTESTATION
    if not path.is_file():
        return [f"no signed verification summary ({ATTESTATION}) beside it: the run was not signed"]
    try:
        stmt, _ = open_statement(json.loads(path.read_text()), VERIFY, keys)
    except (OSError, ValueError, SupplyError) as exc:
        return [f"{ATTESTATION}: {exc}"]
    pred = _obj(stmt.get("predicate"))
    why = []
    signed = _obj(_obj(pred.get("vfleetReport")).get("digest")).get("sha256")
    actual = file_sha256(report)
    if signed != actual:
        why.append(f"{report.name} is not the report that was signed (sha256 {actual}, signed {signed})")
    if pred.get("verificationResult") != "PASSED":
        why.append(f"the signed result is {pred.get('verificationResult')!r}, not PASSED")
    return why


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
