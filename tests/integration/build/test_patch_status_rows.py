"""What `vfleet patches status --base V` calls a problem, row by row (vfleet.patchset.status.needs_attention).

The integration test (tests/integration/build/test_patch_status.py) runs the real report on 0.34.0, where every row
is as the series claims. These rows are the ones it cannot show there: a dropped fix that is not upstream, a
carried patch that no longer applies, and a Verified-By test that does not tell the patched tree apart.
"""

from __future__ import annotations

import pytest
from conftest import REPO

from vfleet.patchset.series import load_patch
from vfleet.patchset.status import APPLIES, CONFLICTS, UPSTREAM, Row, needs_attention

P0100 = load_patch(REPO / "patches" / "0100-seed002-metadata-reuse.patch")
P0100_034 = load_patch(REPO / "patches" / "0100-seed002-metadata-reuse-0.34.0.patch")


def test_a_dropped_fix_that_is_upstream_is_no_problem() -> None:
    assert needs_attention(Row(P0100, UPSTREAM, "", role="dropped", unpatched=True)) == ""


def test_a_dropped_fix_that_is_not_upstream_is_a_problem() -> None:
    # The state of 0.34.0 before 0100 was ported: the series left it out, and it conflicts there.
    got = needs_attention(Row(P0100, CONFLICTS, "", role="dropped", unpatched=False))
    assert got == "0100-seed002-metadata-reuse.patch is left out of the series but is not upstream (conflicts)"


@pytest.mark.parametrize(
    ("verdict", "unpatched", "patched", "problem"),
    [
        (APPLIES, False, True, ""),
        (APPLIES, None, None, ""),  # --no-tests: nothing was run, nothing is claimed
        (CONFLICTS, None, None, "is in the series but conflicts"),
        (APPLIES, True, True, "Verified-By unpatched passes, patched passes"),
        (APPLIES, False, False, "Verified-By unpatched fails, patched fails"),
    ],
)
def test_a_carried_patch_must_apply_and_its_test_tell_the_trees_apart(
    verdict: str, unpatched: bool | None, patched: bool | None, problem: str
) -> None:
    got = needs_attention(Row(P0100_034, verdict, "", role="series", unpatched=unpatched, patched=patched))
    assert (problem in got) if problem else got == "", got
