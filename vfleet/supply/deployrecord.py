"""The deployment record a node keeps of what it runs and which gates that image passed (the role's
STATE_DIR/deployed.json), signed by the controller at deploy time (role deploy, vfleet.supply.statements).

The node only stores the record; the controller signs it before it is written (`vfleet deploy-record sign`)
and checks it before any path trusts it (`vfleet deploy-record check`: the rollout, the rollback, whose
emergency case skips the promotion lookup on the record's word, the fleet verify and the status read).
The file holds the record's fields, as before, plus ``signature``: a DSSE envelope of

  subject        node:NAME, with the sha256 of the record's canonical JSON
  predicateType  https://github.com/vfleet/vfleet/deploy-record/v1 (the deploy role's)
  predicate      {"node": NAME, "record": the fields}

A record with no signature, one a key of the deploy role did not make, one signed for another node, or
one whose fields differ from the signed ones is not trusted: the check says which, naming the node and
the file, and the plays go on as if the node had no record (a rollback that takes its image from the
record is refused).

The key: VFLEET_DEPLOY_KEY, else REPORTS/keys/deploy-record.pem, an ed25519 key created (mode 0600, in a
0700 directory) the first time a record is signed. It is trusted for the deploy role alone, with any
VFLEET_TRUSTED_KEYS_DEPLOY (the keys of other controllers of the fleet).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vfleet import settings
from vfleet.paths import reports_dir
from vfleet.supply import statements
from vfleet.supply.statements import DEPLOY, STATEMENT_TYPE
from vfleet.supply.store import SupplyError

if TYPE_CHECKING:
    from securesystemslib.signer import CryptoSigner  # type: ignore[attr-defined]

SIGNATURE = "signature"
RECORD_FILE = "deployed.json"


def key_path() -> Path:
    """VFLEET_DEPLOY_KEY, else REPORTS/keys/deploy-record.pem."""
    given = settings.load().deploy_key
    return given.expanduser() if given else reports_dir() / "keys" / "deploy-record.pem"


def controller_signer(create: bool) -> CryptoSigner | None:
    """The controller's deploy-record key (made when CREATE and there is none), or None."""
    path = key_path()
    if not path.is_file():
        if not create:
            return None
        statements.create_private_key(path)
    return statements.load_private_key(path)


def _digest(record: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sign(node: str, record: dict[str, Any], now: dt.datetime | None = None) -> dict[str, Any]:
    """RECORD as NODE's deployed.json is to hold it: its fields (with updated_at, now) and their signature."""
    signer = controller_signer(create=True)
    if signer is None:  # made just now, or by another process
        raise SupplyError(f"no deploy-record key at {key_path()}")
    fields = {k: v for k, v in record.items() if k != SIGNATURE}
    fields["updated_at"] = (now or dt.datetime.now(dt.UTC)).isoformat()
    stmt = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": f"node:{node}", "digest": {"sha256": _digest(fields)}}],
        "predicateType": DEPLOY.predicate_type,
        "predicate": {"node": node, "record": fields},
    }
    return {**fields, SIGNATURE: statements.sign(stmt, signer)}


def trusted_keys() -> statements.Keyring:
    """The keyring of every role (so that a key of another role is named), with this controller's own
    deploy key added to the deploy role."""
    ring = statements.keyring([])
    signer = controller_signer(create=False)
    return ring.plus(DEPLOY, [signer.public_key]) if signer is not None else ring


def problem(node: str, data: dict[str, Any], keys: statements.Keyring) -> str:
    """Why DATA (NODE's deployed.json as read) is not a record the controller signed for NODE (empty: it is)."""
    envelope = data.get(SIGNATURE)
    if not isinstance(envelope, dict):
        return (
            "it carries no controller signature (written before deployment records were signed, or edited): "
            "it is not trusted"
        )
    fields = {k: v for k, v in data.items() if k != SIGNATURE}
    try:
        stmt, _ = statements.open_statement(envelope, DEPLOY, keys)
    except SupplyError as exc:
        return f"its signature is not trusted: {exc}"
    pred = stmt["predicate"] if isinstance(stmt.get("predicate"), dict) else {}
    signed = pred["record"] if isinstance(pred.get("record"), dict) else {}
    if pred.get("node") != node:
        return f"it was signed for node {pred.get('node')!r}, not {node}: a record copied from another node"
    if signed != fields:
        changed = sorted(k for k in {*fields, *signed} if fields.get(k) != signed.get(k))
        return f"it was edited after the controller signed it ({', '.join(changed)} changed): it is not trusted"
    return ""


def check(node: str, where: str, data: dict[str, Any]) -> dict[str, Any]:
    """{"record": DATA's fields when trusted, else {}; "problem": "" or why not, naming NODE and WHERE}."""
    why = problem(node, data, trusted_keys())
    if why:
        return {"record": {}, "problem": f"{node}: {where}: {why}"}
    return {"record": {k: v for k, v in data.items() if k != SIGNATURE}, "problem": ""}
