"""`vfleet fleet ACTION` parses its command line into one FleetRequest (vfleet.fleet.run), and the run's extra
vars and environment come from it alone: what each option sets, and what a bad option says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vfleet.cli import build_parser
from vfleet.errors import VfleetError
from vfleet.fleet.run import FleetRequest, extra_vars, handed_env, parse_extra


def request(*argv: str) -> FleetRequest:
    return FleetRequest.from_args(build_parser("fleet").parse_args(["fleet", *argv]))


def test_a_rollout_line_becomes_one_request(tmp_path: Path) -> None:
    req = request(
        "rollout", "-i", "inv", "--image", "r@sha256:" + "a" * 64, "--batch-size", "25%", "--max-fail-percentage",
        "0", "--max-failed-nodes", "-1", "--break-lock", "--targets", "zone", "-e", "vfleet_drain_settle_s=3",
        "--ansible-verbosity", "2", "--supply-store", str(tmp_path),
    )  # fmt: skip
    assert req.action == "rollout" and req.inventory == Path("inv").resolve()
    extra = extra_vars(req, parse_extra(req.extra_vars))
    assert extra == {
        "vfleet_drain_settle_s": 3,
        "vfleet_image": "r@sha256:" + "a" * 64,
        "vfleet_batch_size": "25%",
        "vfleet_max_fail_percentage": 0,  # 0 is a value, not "unset"
        "vfleet_max_failed_nodes": -1,
        "vfleet_lock_break": True,
        "vfleet_targets": "zone",
    }
    env = handed_env(req)
    assert env == {
        "VFLEET_FLEET_TRUSTED_KEYS": "[]",
        "VFLEET_FLEET_SUPPLY_STORE": str(tmp_path.resolve()),
        "ANSIBLE_VERBOSITY": "2",
    }


def test_options_left_out_set_nothing_and_an_option_wins_over_the_same_extra_var() -> None:
    req = request("rollout", "-i", "inv", "--image", "new", "-e", "vfleet_image=old")
    assert extra_vars(req, parse_extra(req.extra_vars)) == {"vfleet_image": "new"}
    status = request("status", "-i", "inv")
    assert extra_vars(status, {}) == {} and status.status_file is None
    # the gates' environment is always set, so that nothing left in the operator's stands in for it
    assert handed_env(status) == {"VFLEET_FLEET_TRUSTED_KEYS": "[]", "VFLEET_FLEET_SUPPLY_STORE": ""}


def test_the_status_page_writes_its_json_beside_it(tmp_path: Path) -> None:
    req = request("status", "-i", "inv", "--html", str(tmp_path / "fleet.html"))
    assert req.status_file == (tmp_path / "fleet.status.json").resolve()
    assert extra_vars(req, {})["vfleet_status_file"] == str(req.status_file)


def test_trusted_keys_reach_only_the_runs_that_check_them(tmp_path: Path) -> None:
    pub = tmp_path / "p.pub"
    pub.write_text("x")
    rollout = request("rollout", "-i", "inv", "--image", "x", "--trusted-key", f"provenance={pub}")
    assert json.loads(handed_env(rollout)["VFLEET_FLEET_TRUSTED_KEYS"]) == [f"provenance={pub.resolve()}"]
    status = request("status", "-i", "inv", "--trusted-key", f"provenance={pub}")
    assert handed_env(status)["VFLEET_FLEET_TRUSTED_KEYS"] == "[]"
    # fleet verify looks up each node's promotion (the weights it compares), with the verify role's keys
    verify = request("verify", "-i", "inv", "--trusted-key", f"verify={pub}")
    assert json.loads(handed_env(verify)["VFLEET_FLEET_TRUSTED_KEYS"]) == [f"verify={pub.resolve()}"]
    # a key that is not there is an error for every action, before any playbook runs
    with pytest.raises(VfleetError, match="no such file"):
        handed_env(request("status", "-i", "inv", "--trusted-key", f"provenance={tmp_path / 'gone.pub'}"))


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("verify", "-i", "inv", "--max-out-of-pool", "0"), "--max-out-of-pool 0: give 1 or more nodes"),
        (("verify", "-i", "inv", "-e", "novalue"), "--extra-var 'novalue': write KEY=VALUE"),
    ],
)
def test_a_bad_option_is_named_with_its_fix(argv: tuple[str, ...], says: str) -> None:
    req = request(*argv)
    with pytest.raises(VfleetError, match=says.replace("(", r"\(")):
        extra_vars(req, parse_extra(req.extra_vars))
