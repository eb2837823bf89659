"""Signing an image's build record (vfleet.supply.attest.sign_identity): an image with no record is refused
with the way forward for a hand-built image."""

from __future__ import annotations

from pathlib import Path

import pytest

from vfleet.supply.attest import sign_identity
from vfleet.supply.identity import Identity
from vfleet.supply.store import SupplyError


def test_an_image_with_no_build_record_is_refused_naming_the_summary_key_and_the_test_fleet_path(
    tmp_path: Path,
) -> None:
    ident = Identity("vfleet-cpu:hand", "sha256:" + "a" * 64, "vfleet-cpu:hand", "sha256:" + "a" * 64, "image-id")
    with pytest.raises(SupplyError) as err:
        sign_identity(ident, signer=None, store=tmp_path)
    msg = str(err.value)
    assert msg.startswith(f"no build record for vfleet-cpu:hand (image sha256:{'a' * 64}) in {tmp_path}")
    assert "VFLEET_SIGN_KEY (without --sign-key / SIGN_KEY=) signs its boot-verify summary only" in msg
    assert "--allow-unsigned (ALLOW_UNSIGNED=1)" in msg and "--trusted-key verify=PUB.pem" in msg
    assert not list(tmp_path.iterdir())  # nothing written
