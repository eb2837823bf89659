"""`vfleet deploy-record sign|check --node NODE`: the controller's side of a node's deployment record
(deployed.json), which the node role runs on the controller at deploy time and before it trusts a record
(vfleet.supply.deployrecord; docs/supply-chain.md, "Signed deployment records").

  sign    the record (JSON) on stdin -> the record to write on NODE, with updated_at and the controller's
          signature, on stdout
  check   the record as read from NODE (JSON) on stdin -> {"record": its fields when the controller's
          signature holds for NODE, else {}; "problem": "" or why not, naming NODE and --file}
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from vfleet.errors import VfleetError


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="sign or check a node's deployment record (the node role runs it)", description=__doc__
    )
    p.add_argument("action", choices=["sign", "check"])
    p.add_argument("--node", required=True, help="the node (inventory name) the record is of")
    p.add_argument(
        "--file", default="deployed.json", help="check: where the record was read, for the message (node path)"
    )
    return p


def _stdin_record() -> dict[str, Any]:
    try:
        data = json.loads(sys.stdin.read())
    except ValueError as exc:
        raise VfleetError(f"the record on stdin is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise VfleetError("the record on stdin is not a JSON object")
    return data


def run(args: argparse.Namespace) -> int:
    # cryptography and securesystemslib are the controller's: imported where used.
    from vfleet.supply import deployrecord  # noqa: PLC0415

    record = _stdin_record()
    if args.action == "sign":
        out = deployrecord.sign(args.node, record)
    else:
        out = deployrecord.check(args.node, args.file, record)
    print(json.dumps(out, sort_keys=True))
    return 0
