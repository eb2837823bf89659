"""Patches 0002 (#57317), 0003 (#55222) and 0200 (#52814), and the upstream entry seed 000: the GLM-5.3 Python code of
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


SHM_CASES = trees.kinds("0200")


@pytest.mark.parametrize(("kind", "fixed"), SHM_CASES, ids=trees.ids(SHM_CASES))
def test_shm_busy_loop_follows_the_environment(kind: str, fixed: bool) -> None:
    """Patch 0200 (vllm-project/vllm#52814): a shared-memory queue reader spins for
    VLLM_SHM_BROADCAST_BUSY_LOOP_S seconds after each read; unset keeps 1 s; a bad value is refused by name.
    Unpatched, the window is 1 s whatever the variable says."""
    facts = trees.python_probe(trees.tree(kind))["shm_busy_loop"]
    assert "error" not in facts, facts
    assert facts["unset"] == 1, f"{kind}: {facts}"
    if fixed:
        assert (facts["0.25"], facts["0"]) == (0.25, 0), f"{kind}: {facts}"
        assert "VLLM_SHM_BROADCAST_BUSY_LOOP_S='soon'" in facts["bad"]["refused"], f"{kind}: {facts}"
    else:
        assert (facts["0.25"], facts["0"], facts["bad"]) == (1, 1, 1), f"{kind}: {facts}"


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
