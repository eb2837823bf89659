"""The supply gate's advice names the fix for the check that failed (vfleet.supply.check.HINTS, the `hint` of
`vfleet image verify --json`, which ansible/roles/vfleet_node/tasks/supply.yml prints after the reason)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vfleet.supply import check

SOURCE = Path(check.__file__).read_text()
#: Every check name verify() can record: the names passed to Check(...) and fail(...), and the byproducts.
CHECK_NAMES = sorted(set(re.findall(r'(?:Check|fail)\(\s*"([a-z-]+)"', SOURCE)) | {"sbom", "vulnerabilities"})


def failed(name: str) -> check.Result:
    return check.Result("reg/x:1", [check.Check("digest", True, ""), check.Check(name, False, "why")])


def test_every_check_has_a_hint() -> None:
    assert {"digest", "signature", "materials", "vulnerability-policy"} <= set(CHECK_NAMES), CHECK_NAMES
    missing = [n for n in CHECK_NAMES if not failed(n).hint]
    assert missing == [], f"no hint for {missing}: add it to vfleet.supply.check.HINTS"


@pytest.mark.parametrize(
    ("name", "says", "does_not_say"),
    [
        ("materials", "built from this checkout", "Sign it with a key"),
        ("signature", "Sign it with a key", "vulnerability policy"),
        ("vulnerability-policy", "vulnerability policy", "Sign it with a key"),
        ("digest", "registry", "Sign it with a key"),
    ],
)
def test_the_hint_fits_the_failure(name: str, says: str, does_not_say: str) -> None:
    res = failed(name)
    assert says in res.hint and does_not_say not in res.hint, res.hint
    assert res.to_dict()["hint"] == res.hint


def test_a_verified_image_has_no_hint() -> None:
    res = check.Result("reg/x:1", [check.Check("digest", True, "")])
    assert res.ok and res.hint == "" and res.to_dict()["hint"] == ""
