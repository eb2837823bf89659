"""The weights check's judgement and its refusals (vfleet.verify.probe.weights); test_verify_live runs it on a
real server (a profile pinning other weights fails it) and every container boot-verify runs it in the container."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from vfleet.verify.probe import weights


def fig(digest: str) -> weights.WeightsFigure:
    return weights.WeightsFigure("/models/m", "this machine", digest, 3, 100)


def test_any_weights_pass_a_profile_that_pins_none_and_others_fail_one_that_does() -> None:
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    assert weights.problem(fig(a), []) is None
    assert weights.problem(fig(a), [b, a]) is None
    bad = weights.problem(fig(a), [b])
    assert bad == (
        f"the weights at /models/m (this machine) have manifest {a}; the profile accepts only {b} "
        "(verify.weights_accept): another model revision, or files changed"
    )


def test_weights_that_cannot_be_named_are_an_error_not_a_pass(tmp_path: Path) -> None:
    with pytest.raises(weights.WeightsError, match="names no model root"):
        weights.measure(None, None)
    with pytest.raises(weights.WeightsError, match="not a directory"):
        weights.measure(str(tmp_path / "gone"), None)


def test_the_served_directory_is_named_by_its_manifest(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\x01" * 10)
    f = weights.measure(str(tmp_path), None)
    assert (f.where, f.files, f.bytes) == ("this machine", 1, 10) and f.digest.startswith("sha256:")
    # Every file named with its size and sha256, so that a rollout can name the file a node holds otherwise.
    assert f.entries == [["model.safetensors", 10, hashlib.sha256(b"\x01" * 10).hexdigest()]]
    assert f.as_dict()["entries"] == f.entries


def test_a_remote_server_without_its_container_is_not_named_from_this_machines_disk(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\x01" * 10)  # a directory of the same name, here
    with pytest.raises(weights.WeightsError, match=r"not on this machine and no --container was given"):
        weights.measure(str(tmp_path), None, "http://10.0.0.6:8000")
    assert weights.measure(str(tmp_path), None, "http://127.0.0.1:8000").files == 1
