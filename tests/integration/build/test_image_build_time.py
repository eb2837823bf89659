"""The image's `created` label (vfleet.images.build.build_time): SOURCE_DATE_EPOCH, else the commit time of a
clean checkout, else now. So rebuilding one clean checkout gives the same labels, and with every layer
cached the same image ID, instead of an untagged image per rebuild that differs only in this label."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from pathlib import Path

import pytest

from vfleet.images import build
from vfleet.images.refs import ImageError

COMMITTED = dt.datetime(2026, 11, 30, 12, 0, 0, tzinfo=dt.UTC)


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    root = tmp_path / "checkout"
    (root / "vfleet").mkdir(parents=True)
    (root / "vfleet" / "x.py").write_text("x = 1\n")
    (root / "notes.txt").write_text("not a build input\n")
    env = dict(
        os.environ,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.invalid",
        GIT_AUTHOR_DATE=COMMITTED.isoformat(),
        GIT_COMMITTER_DATE=COMMITTED.isoformat(),
    )
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "one"]):
        subprocess.run(["git", "-C", str(root), *argv], check=True, env=env)
    return root


def test_a_clean_checkout_is_stamped_with_its_commit_time(checkout: Path) -> None:
    assert build.build_time(checkout) == COMMITTED
    assert build.build_time(checkout) == build.build_time(checkout)  # the second build, the same label
    (checkout / "notes.txt").write_text("edited, but not a build input\n")
    assert build.build_time(checkout) == COMMITTED


def test_a_changed_build_input_is_stamped_now(checkout: Path) -> None:
    (checkout / "vfleet" / "x.py").write_text("x = 2\n")
    assert build.git_revision(checkout).endswith("-dirty")
    got = build.build_time(checkout)
    assert abs((dt.datetime.now(dt.UTC) - got).total_seconds()) < 60, got


def test_source_date_epoch_wins(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert build.build_time(checkout) == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)


def test_a_bad_source_date_epoch_is_named(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(ImageError, match=r"SOURCE_DATE_EPOCH='yesterday' is not a Unix time in seconds"):
        build.build_time(checkout)


def test_outside_a_repository_it_is_now(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    got = build.build_time(tmp_path)
    assert abs((dt.datetime.now(dt.UTC) - got).total_seconds()) < 60, got
