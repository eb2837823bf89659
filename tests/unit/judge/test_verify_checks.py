"""The check ids that `verify.not_applicable` accepts (vfleet.checkids.CHECK_IDS) are exactly the
tests pytest collects from smoke_tests/, for profiles with different load levels. Collected in this
process, where tests/conftest.py is already imported as `conftest`: the suite's own conftest must not
meet it."""

from __future__ import annotations

import pytest

from vfleet import checkids
from vfleet.profiles import Catalog
from vfleet.verify import suite
from vfleet.verify.log.check import REGISTRY


def collected(profile: str) -> list[str]:
    """What pytest collects from smoke_tests/ for ``profile``, in this process, as `vfleet verify` runs it."""
    return [node.split("::")[-1] for node in suite.collect(Catalog().load(profile))]


@pytest.mark.parametrize("profile", ["tiny/cpu", "kimi-k3/b200"])
def test_check_ids_are_what_pytest_collects(profile: str) -> None:
    ids = collected(profile)
    levels = Catalog().load(profile).verify.load.levels
    assert [i for i in ids if checkids.LOAD_ID_RE.match(i)] == [f"test_load[C{c}]" for c in levels]
    folded: list[str] = []
    for i in ids:
        if checkids.template(i) not in folded:
            folded.append(checkids.template(i))
    assert folded == list(checkids.CHECK_IDS)
    assert all(checkids.is_known(i) for i in ids)


def test_log_check_ids_name_the_registry_in_order() -> None:
    """The ground floor's LOG_CHECKS (which `verify.not_applicable` is validated against) are the names of
    the log check registry, in its order: a check added to one and not the other fails here."""
    assert tuple(c.name for c in REGISTRY) == checkids.LOG_CHECKS
