"""Patches 0001 (seed 003, #57477) and 0004 (#56059): the real NVIDIA `_kpool_tail_seed_kernel` from the
vLLM tree, run under TRITON_INTERPRET=1 on the CPU over a padded tail view (indexer page 38016 B, tail
stride 19008 elements) laid over a sentinel-filled buffer; for 0004 also the ROCm kernel through the
tree's own launch path (the warm-up dispatcher from 0.34.0, whose warm-up inputs must bind every
argument). Each must fail on the unpatched tree of a base whose series carries the fix and pass on the
patched one; on a base that drops the fix as upstream the unpatched tree must pass. (run_on_device.sh
runs the NVIDIA cases on a GPU.)"""

from __future__ import annotations

import pytest
import trees

SEED003 = trees.kinds("0001")
GUARD = trees.kinds("0004")


@pytest.mark.parametrize(("kind", "fixed"), SEED003, ids=trees.ids(SEED003))
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


@pytest.mark.parametrize(("kind", "fixed"), GUARD, ids=trees.ids(GUARD))
def test_seed_skips_out_of_range_tail_block(kind: str, fixed: bool) -> None:
    result = trees.kernel_probe(trees.tree(kind))
    nvidia, amd, warmup = result["out_of_range"], result["amd"]["out_of_range"], result["amd"]["warmup"]
    if fixed:
        assert nvidia["bytes_changed"] == 0, f"{kind}: NVIDIA: a tail block past the view was written: {nvidia}"
        assert amd["bytes_changed"] == 0, f"{kind}: ROCm: a tail block past the view was written: {amd}"
        if warmup["dispatcher"]:
            assert not warmup["error"] and not warmup["unbound_kernel_args"], f"{kind}: ROCm warm-up: {warmup}"
    else:
        assert nvidia["bytes_changed"] > 0, f"{kind}: expected the unguarded NVIDIA kernel to write: {nvidia}"
        assert amd["bytes_changed"] > 0, f"{kind}: expected the unguarded ROCm kernel to write: {amd}"
