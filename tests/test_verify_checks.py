"""The check ids that `verify.not_applicable` accepts (vfleet.verify.checks.CHECK_IDS) are exactly the
tests pytest collects from smoke_tests/, for profiles with different load levels."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO

from vfleet.profiles import Catalog
from vfleet.verify import checks

SUITE = REPO / "smoke_tests"


def collected(profile: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(SUITE), "--collect-only", "-q", "-p", "no:cacheprovider",
         "-c", str(SUITE / "pytest.ini"), "--rootdir", str(SUITE), "--vf-url", "http://127.0.0.1:9",
         "--vf-profile", profile],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [line.split("::")[-1] for line in proc.stdout.splitlines() if "::" in line]


@pytest.mark.parametrize("profile", ["tiny/cpu", "kimi-k3/b200"])
def test_check_ids_are_what_pytest_collects(profile: str) -> None:
    ids = collected(profile)
    levels = Catalog().load(profile).verify.load.levels
    assert [i for i in ids if checks.LOAD_ID_RE.match(i)] == [f"test_load[C{c}]" for c in levels]
    folded: list[str] = []
    for i in ids:
        if checks.template(i) not in folded:
            folded.append(checks.template(i))
    assert folded == list(checks.CHECK_IDS)
    assert all(checks.is_known(i) for i in ids)
