"""Patches 0001 (seed 003, #57477) and 0004 (#56059): the real NVIDIA `_kpool_tail_seed_kernel` from the
vLLM tree, run under TRITON_INTERPRET=1 on the CPU over a padded tail view (indexer page 38016 B, tail
stride 19008 elements) laid over a sentinel-filled buffer. It must fail on the unpatched 0.30.0 tree
and pass on the patched one; both outcomes are asserted. (run_on_device.sh runs the same on a GPU.)"""

from __future__ import annotations

import pytest
import trees


@pytest.mark.parametrize(("kind", "fixed"), trees.kinds(), ids=[k for k, _ in trees.kinds()])
def test_seed_writes_only_own_padded_tail_block(kind: str, fixed: bool) -> None:
    result = trees.kernel_probe(trees.tree(kind))
    for case in result["padded_stride"]:
        ok = case["own_block_seeded"] and case["foreign_bytes_changed"] == 0
        if fixed:
            assert ok, f"{kind}: seeding tail block {case['block']} wrote outside it: {case}"
        else:
            # seed 003's signature: the own block stays unseeded, the dense offset block * 2048 B is written
            assert not case["own_block_seeded"], case
            first = case["changed_ranges"][0][0]
            assert first == case["block"] * 2048, case
            assert case["foreign_bytes_changed"] > 0, case


@pytest.mark.parametrize(("kind", "fixed"), trees.kinds(), ids=[k for k, _ in trees.kinds()])
def test_seed_skips_out_of_range_tail_block(kind: str, fixed: bool) -> None:
    case = trees.kernel_probe(trees.tree(kind))["out_of_range"]
    if fixed:
        assert case["bytes_changed"] == 0, f"{kind}: a tail block past the view was written: {case}"
    else:
        assert case["bytes_changed"] > 0, f"{kind}: expected the unguarded kernel to write: {case}"
