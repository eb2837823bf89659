"""The signed summary of a promotion A/B: DIR/ab.dsse.json beside DIR/ab.json.

`vfleet promote` (where a profile sets verify.ab_not_worse) recomputes non-inferiority from the per-round
figures of ab.json, but those figures are a file anyone can edit. So a promotion A/B run with the
controller's signing key (`vfleet ab --promotion --sign-key PRIV`, or VFLEET_SIGN_KEY) signs an in-toto
Statement, in a DSSE envelope (vfleet.supply.statements); promotion trusts it from the keys of the ab role
only (--trusted-key ab=PUB, VFLEET_TRUSTED_KEYS_AB):

  subject          arm B's image (the candidate), by registry digest
  predicateType    https://github.com/vfleet/vfleet/ab/v1
  predicate        profile; baseline (arm A's registry digest); abReport.digest.sha256 (ab.json as
                   written); timeMeasured (UTC)

Promotion accepts an A/B report only with this summary, made by a key of the ab role, naming the candidate,
the baseline and the profile of the promotion, and carrying the sha256 of the ab.json beside it: an
edited, unsigned or foreign report is refused, each with its reason.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vfleet.errors import VfleetError
from vfleet.supply import statements
from vfleet.supply.statements import AB, STATEMENT_TYPE, TIME_FORMAT, Keyring
from vfleet.supply.store import SupplyError, hex_of
from vfleet.verify.record.attestation import NO_SIGN_KEY, file_sha256

if TYPE_CHECKING:
    from securesystemslib.signer import CryptoSigner  # type: ignore[attr-defined]

AB_ATTESTATION = "ab.dsse.json"
AB_PREDICATE_TYPE = AB.predicate_type


def statement(rep: dict[str, Any], ab_sha256: str, measured_at: dt.datetime) -> dict[str, Any]:
    """The Statement of a promotion A/B report ``rep`` (ab.json's sha256 ``ab_sha256``)."""
    arms = rep.get("arms") or {}
    a_img, b_img = ((arms.get(n) or {}).get("image") or {} for n in ("A", "B"))
    if not b_img.get("digest") or not a_img.get("digest"):
        raise VfleetError("the A/B report names no registry digest for both arms: nothing to sign a summary about")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": str(b_img.get("ref") or b_img["digest"]), "digest": {"sha256": hex_of(b_img["digest"])}}],
        "predicateType": AB_PREDICATE_TYPE,
        "predicate": {
            "profile": rep.get("profile"),
            "baseline": {"name": str(a_img.get("ref") or ""), "digest": {"sha256": hex_of(a_img["digest"])}},
            "abReport": {"digest": {"sha256": ab_sha256}},
            "timeMeasured": measured_at.strftime(TIME_FORMAT),
        },
    }


def write(ab_json: Path, signer: CryptoSigner, now: dt.datetime | None = None) -> Path:
    """Sign AB_JSON as written and put its summary beside it; returns the summary's path."""
    rep = json.loads(ab_json.read_text())
    stmt = statement(rep, file_sha256(ab_json), now or dt.datetime.now(dt.UTC))
    path = ab_json.parent / AB_ATTESTATION
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(statements.sign(stmt, signer), indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def check(ab_json: Path, keys: Keyring, baseline: str, digest: str, profile: str) -> list[str]:
    """Why the summary beside AB_JSON does not vouch for it as the A/B of ``digest`` against ``baseline``
    on ``profile`` (empty: it does). No key, no summary, a signature no trusted key made, or a field that
    does not match is a problem, each named."""
    if not keys.of(AB):
        return [f"no trusted key to check its signed A/B summary: {statements.how_to_trust(AB)}"]
    path = ab_json.parent / AB_ATTESTATION
    if not path.is_file():
        fix = f"run `vfleet ab --promotion` with the signing key ({NO_SIGN_KEY})"
        return [f"no signed A/B summary ({path.name}) beside it: {fix}"]
    try:
        stmt, _ = statements.open_statement(json.loads(path.read_text()), AB, keys)
    except (OSError, ValueError, SupplyError) as exc:
        return [f"{path.name}: {exc}"]
    if not isinstance(stmt, dict) or stmt.get("predicateType") != AB_PREDICATE_TYPE:
        return [f"{path.name}: not a signed A/B summary"]
    pred: dict[str, Any] = stmt["predicate"] if isinstance(stmt.get("predicate"), dict) else {}
    why: list[str] = []
    subjects: list[Any] = stmt["subject"] if isinstance(stmt.get("subject"), list) else []
    if hex_of(digest) not in {str((s.get("digest") or {}).get("sha256")) for s in subjects if isinstance(s, dict)}:
        why.append(f"the signed A/B summary is not about {digest}")
    if ((pred.get("baseline") or {}).get("digest") or {}).get("sha256") != hex_of(baseline):
        why.append(f"the signed A/B summary's baseline is not {baseline}")
    if pred.get("profile") != profile:
        why.append(f"the A/B was signed for profile {pred.get('profile')!r}, not {profile}")
    signed = ((pred.get("abReport") or {}).get("digest") or {}).get("sha256")
    try:
        actual = file_sha256(ab_json)
    except OSError as exc:
        actual = f"unreadable ({exc.strerror or exc})"
    if signed != actual:
        was = f"sha256 {actual}, signed {signed}"
        why.append(f"{ab_json.name} is not the A/B report that was signed ({was}): it changed after signing")
    return why
