"""Patches 0002 (#57317) and 0003 (#55222), and the upstream entry seed 000: the GLM-5.3 Python code of
the vLLM tree imported and exercised (see vllm_tree_probe.py), on the unpatched 0.30.0 tree (the bug
shows) and on the patched copy (it is gone)."""

from __future__ import annotations

import os

import pytest
import trees

CASES = trees.kinds()
IDS = [k for k, _ in CASES]


@pytest.mark.parametrize(("kind", "fixed"), CASES, ids=IDS)
def test_tail_spec_takes_no_slot_mapping(kind: str, fixed: bool) -> None:
    facts = trees.python_probe(trees.tree(kind))["tail_spec"]
    assert "error" not in facts, facts
    assert facts["uses_slot_mapping"] is (not fixed), f"{kind}: {facts}"


@pytest.mark.parametrize(("kind", "fixed"), CASES, ids=IDS)
def test_indexer_workspace_sized_in_pools(kind: str, fixed: bool) -> None:
    ws = trees.python_probe(trees.tree(kind))["workspace"]
    assert "error" not in ws, ws
    assert ws["max_model_len"] == 1_048_576 and ws["index_kpool"] == 4
    if fixed:
        assert ws["workspace_rows"] * 4 == ws["token_sized_rows"], f"{kind}: not a quarter: {ws}"
    else:
        assert ws["workspace_rows"] == ws["token_sized_rows"], f"{kind}: {ws}"
    print(f"{kind}: gather workspace {ws['workspace_gib']:.2f} GiB (token-sized {ws['token_sized_gib']:.2f} GiB)")


@pytest.mark.skipif(bool(os.environ.get(trees.VERIFY_ENV)), reason="seed 000 is checked on the pinned base only")
def test_seed000_is_in_the_base() -> None:
    """Upstream entry (patches/upstream.yaml): the base 0.30.0 already forwards positions and owns the
    kpool tail slot-mapping buffer, so seed 000 is not a patch."""
    facts = trees.python_probe(trees.tree("base"))["seed000"]
    assert facts == {
        "prepare_attn_forwards_positions": True,
        "builder_keeps_output_in_its_buffer": True,
        "builder": "KpoolTailMetadataBuilder",
        "builder_owns_buffer": True,
        "build_writes_into_own_buffer": True,
    }, facts
