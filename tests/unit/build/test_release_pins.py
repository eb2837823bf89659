"""A release build refuses a GPU base pinned without a digest, unless that is explicitly allowed."""

from __future__ import annotations

import json

import pytest

from vfleet import images
from vfleet.cli import main
from vfleet.images import refs


def test_release_build_refuses_an_empty_digest(capsys: pytest.CaptureFixture[str]) -> None:
    pins = json.loads((images.ROOT / "versions.json").read_text())
    assert pins["base_images"]["cuda"]["digest"] == ""  # not pulled yet: no registry is reachable from here
    # Refused before dockerd is even asked for: nothing is built.
    assert main(["image", "build", "--family", "cuda", "--release"]) == 2
    err = capsys.readouterr().err
    assert "versions.json: base_images.cuda.digest is empty" in err
    assert "or pass --allow-empty-digest to build anyway" in err


def test_allow_empty_digest_warns_and_a_digest_is_used(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rocm = images.pinned().base_images["rocm"]
    assert images.release_base_check("rocm", allow_empty_digest=True) == f"{rocm.repository}:{rocm.tag}"
    assert "without a digest (--allow-empty-digest)" in capsys.readouterr().err
    pinned = images.pins()
    pinned["base_images"]["rocm"]["digest"] = "sha256:" + "ab" * 32
    monkeypatch.setattr(refs, "pins", lambda: pinned)  # the module that reads versions.json
    ref = images.release_base_check("rocm", allow_empty_digest=False)
    assert ref == f"{rocm.repository}:{rocm.tag}@sha256:" + "ab" * 32


def test_release_refuses_a_standin_base(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["image", "build", "--family", "rocm", "--release", "--standin"]) == 2
    assert "--release builds on the pinned base" in capsys.readouterr().err
