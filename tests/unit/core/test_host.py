"""vfleet.host without touching apt: a present binary is found without installing anything, and an
install that another process finished while this one waited for the lock is not run again (the unit
tier's guard would fail the test if apt-get were started)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vfleet import host
from vfleet.errors import VfleetError


@pytest.fixture(autouse=True)
def _locks_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "LOCK_DIR", tmp_path)


def test_a_present_binary_is_returned_without_apt() -> None:
    assert host.ensure_binary("sh", ["no-such-package"]) == shutil.which("sh")


def test_an_install_done_meanwhile_is_not_repeated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host.os, "geteuid", lambda: 0)  # as root, whoever runs the test
    calls: list[bool] = []

    def done() -> bool:
        calls.append((tmp_path / "vfleet-apt.lock").exists())
        return True

    host.apt_install(["no-such-package"], done=done)
    assert calls == [True]  # asked once, with the lock file made (and held)


def test_not_root_names_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    class Missing(VfleetError):
        pass

    monkeypatch.setattr(host.os, "geteuid", lambda: 1000)
    with pytest.raises(Missing, match=r"run `apt-get install -y pkg-a pkg-b`"):
        host.ensure_binary("vfleet-no-such-binary", ["pkg-a", "pkg-b"], Missing)
