"""The check ids that `verify.not_applicable` accepts (vfleet.verify.checks.CHECK_IDS) are exactly the
tests pytest collects from smoke_tests/, for profiles with different load levels. Collected in this
process, where tests/conftest.py is already imported as `conftest`: the suite's own conftest must not
meet it."""

from __future__ import annotations

import pytest

from vfleet.profiles import Catalog
from vfleet.verify import checks, suite


def collected(profile: str) -> list[str]:
    """What pytest collects from smoke_tests/ for ``profile``, in this process, as `vfleet verify` runs it."""
    return [node.split("::")[-1] for node in suite.collect(Catalog().load(profile))]


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
