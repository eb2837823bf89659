"""device_check.expectations, the verdict of the GPU run (run_on_device.sh), on the shapes the probe
returns: each way a tree can depart from what its base should show is named, and --seed003-upstream
(a base that carries 0001's fix itself, vLLM 0.34.0) asks the unpatched tree to pass (a)."""

from __future__ import annotations

from typing import Any

from device_check import expectations


def _result(a_ok: bool, oor_bytes: int) -> dict[str, Any]:
    cases = []
    for block in (200, 18):
        # seed 003: the tail block's own bytes are left unseeded and the dense offset block * 2048 is written
        changed = [[block * 2048, block * 2048 + 100]]
        cases.append({"block": block, "own_block_seeded": a_ok, "foreign_bytes_changed": 0 if a_ok else 100,
                      "changed_ranges": changed})  # fmt: skip
    return {"padded_stride": cases, "out_of_range": {"block": 9, "view_blocks": 8, "bytes_changed": oor_bytes}}


def test_the_default_base_must_show_both_bugs_unpatched_and_neither_patched() -> None:
    assert expectations(_result(a_ok=False, oor_bytes=2045), fixed=False) == []
    assert expectations(_result(a_ok=True, oor_bytes=0), fixed=True) == []
    assert len(expectations(_result(a_ok=True, oor_bytes=2045), fixed=False)) == 2  # (a) not reproduced
    bad = expectations(_result(a_ok=False, oor_bytes=0), fixed=False)
    assert len(bad) == 1 and bad[0].startswith("(d) unguarded kernel wrote nothing"), bad
    bad = expectations(_result(a_ok=False, oor_bytes=7), fixed=True)
    assert any(p.startswith("(a)") for p in bad) and any(p.startswith("(d)") for p in bad)


def test_seed003_upstream_wants_a_fixed_even_unpatched() -> None:
    assert expectations(_result(a_ok=True, oor_bytes=2045), fixed=False, seed003_fixed=True) == []
    bad = expectations(_result(a_ok=False, oor_bytes=2045), fixed=False, seed003_fixed=True)
    assert len(bad) == 2 and all("wrote outside its own tail block" in p for p in bad)
    assert expectations(_result(a_ok=True, oor_bytes=0), fixed=False, seed003_fixed=True) != []
