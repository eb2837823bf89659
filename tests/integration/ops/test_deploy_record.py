"""Signed deployment records (issue 31, item 5): the record a node keeps (deployed.json) is the controller's
word only with the controller's signature for that node. The status read (the real status.yml through
`vfleet fleet status`, on the one-node local inventory of support.fleet) sets an edited record aside and says
why, naming the node and the file; `vfleet deploy-record check` refuses a record copied from another node or
signed by another controller, unless that controller's key is declared for the deploy role. The emergency
rollback's refusal is tests/e2e/ops/test_rollback_gate.py's (it reads the node through dockerd)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from support.fleet import fleet, local_inventory
from support.supply import write_deploy_record

WEIGHTS = {"digest": "sha256:" + "3" * 64, "promoted": "sha256:" + "3" * 64, "promoted_with": "r/x", "run_id": "r1"}
RECORD = {
    "state": "deployed",
    "image": "r/x@sha256:" + "1" * 64,
    "not_checked": [],
    "gate": {"promotion": "checked"},
    "weights": WEIGHTS,
}


def _status(tmp: Path) -> dict[str, Any]:
    inv = local_inventory(tmp, vfleet_node_container_name="vfleet-record-no-such-container")
    proc = fleet(inv, "status", "--json", str(tmp / "status.json"))
    assert proc.returncode == 0, proc.stdout[-3000:]
    (row,) = json.loads((tmp / "status.json").read_text())
    return dict(row)


def test_the_status_read_sets_an_edited_record_aside_and_names_it(tmp_path: Path) -> None:
    path = write_deploy_record(tmp_path / "state", "gate-node", RECORD)
    row = _status(tmp_path)
    assert row["record_problem"] == "" and row["record_state"] == "deployed" and row["not_checked"] == [], row
    assert row["weights"] == WEIGHTS, row  # the weights the last rollout found (issue 34), as the fleet page reads them
    edited = json.loads(path.read_text())
    edited["not_checked"] = []
    edited["image"] = "r/y@sha256:" + "2" * 64
    path.write_text(json.dumps(edited))
    row = _status(tmp_path)
    want = f"gate-node: {path}: it was edited after the controller signed it (image changed): it is not trusted"
    assert row["record_problem"] == want, row
    assert row["record_state"] == "" and row["record_image"] == "" and row["not_checked"] is None, row
    assert row["weights"] is None, row  # an untrusted record says nothing of the weights either


def _check(node: str, data: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    argv = [sys.executable, "-m", "vfleet", "deploy-record", "check", "--node", node, "--file", "/x/deployed.json"]
    proc = subprocess.run(argv, input=json.dumps(data), capture_output=True, text=True, check=True, env=env)
    return dict(json.loads(proc.stdout))


def test_a_record_of_another_node_or_controller_is_not_trusted(tmp_path: Path) -> None:
    mine = json.loads(write_deploy_record(tmp_path / "a", "node-a", RECORD).read_text())
    assert _check("node-a", mine)["record"]["image"] == RECORD["image"]
    copied = _check("node-b", mine)
    assert copied == {"record": {}, "problem": "node-b: /x/deployed.json: it was signed for node 'node-a', not "
                      "node-b: a record copied from another node"}  # fmt: skip
    other = {**os.environ, "VFLEET_DEPLOY_KEY": str(tmp_path / "other-controller.pem")}
    sign = [sys.executable, "-m", "vfleet", "deploy-record", "sign", "--node", "node-a"]
    theirs = json.loads(subprocess.run(sign, input=json.dumps(RECORD), capture_output=True, text=True, check=True,
                                       env=other).stdout)  # fmt: skip
    assert (
        "its signature is not trusted: not signed by a trusted key of the deploy role"
        in _check("node-a", theirs)["problem"]
    )
    # That controller's public half, declared for the deploy role, is trusted; declared for another role, not.
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    key = load_pem_private_key((tmp_path / "other-controller.pem").read_bytes(), None)
    pub = tmp_path / "other-controller.pub"
    pub.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    trusted = _check("node-a", theirs, {**os.environ, "VFLEET_TRUSTED_KEYS_DEPLOY": str(pub)})
    assert trusted["problem"] == "" and trusted["record"]["gate"] == {"promotion": "checked"}, trusted
    wrong = _check("node-a", theirs, {**os.environ, "VFLEET_TRUSTED_KEYS_VERIFY": str(pub)})
    assert "a key of the verify role, not of the deploy role" in wrong["problem"], wrong
