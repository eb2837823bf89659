"""Where vLLM prints each line the log checks read, per vLLM base: the wording as data.

The log checks match vLLM's own messages (the KV cache size, the auto-fit lines, graph capture, the
version, readiness, ...). A vLLM release may reword any of them, and a check whose line was reworded
does not fail: it stops seeing the line. So every such line is named here once (WORDING: the pattern
that reads it and example messages), and logwording.json says, for each base of versions.json, the file
of that base's source tree (under `vllm/`) that prints it and the text it prints there, or that the base
does not print it (`gone`, with why). The tests hold the table to both sides:

- tests/unit/judge/test_logwording.py: each example is read by its pattern, and every base of
  versions.json says something about every line;
- tests/integration/judge/test_log_wording_sources.py: each text is in its file of the base's real source
  tree (the pinned wheel, fetched and checked against its sha256).

A new base adds its block to logwording.json, read from its source; vfleet.verify.log.rules.KNOWN_VERSIONS
follows.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from vfleet.verify.log import check as logcheck
from vfleet.verify.log import graphs as loggraphs
from vfleet.verify.log import requests as logrequests
from vfleet.verify.log import shapes
from vfleet.verify.log.rules import family

DATA = Path(__file__).with_name("wording.json")


@dataclass(frozen=True)
class Source:
    """Where one base prints the line: a file under the tree's `vllm/`, and text that file holds."""

    file: str
    literal: str


@dataclass(frozen=True)
class Wording:
    id: str
    #: what reads the line (a check of vfleet.verify.log.check, or the parser)
    used_by: str
    pattern: re.Pattern[str]
    #: messages as vLLM prints them (the record's text after `LEVEL date [file:N] `)
    examples: tuple[str, ...]


#: base -> wording id -> where the base prints it, or why it does not (a string)
Sources = dict[str, dict[str, Source | str]]


WORDING: tuple[Wording, ...] = (
    Wording(
        "engine-version",
        "the parser (the log's vLLM version, KNOWN_VERSIONS) and the graph check (the target model)",
        shapes.VERSION_RES[1],
        ("Initializing a V1 LLM engine (v1.2.3) with config: model='/models/m', speculative_config=None",),
    ),
    Wording(
        "banner-version",
        "the parser (the log's vLLM version)",
        shapes.VERSION_RES[2],
        ("vLLM server version 1.2.3, serving model /models/m",),
    ),
    Wording(
        "banner-logo-version",
        "the parser (the log's vLLM version, from the logo banner)",
        shapes.VERSION_RES[0],
        (" ▄▄ ▄█ █     █     █ ▀▄▀ █  version 1.2.3",),
    ),
    Wording(
        "target-model",
        "the graph check (the target model's name)",
        loggraphs.TARGET_RE,
        ("Starting to load model /models/m...",),
    ),
    Wording(
        "speculative-config",
        "the graph check (is there a draft model, and which)",
        loggraphs.SPEC_CONFIG_RE,
        ("speculative_config=SpeculativeConfig(method='mtp', model='/models/m', num_spec_tokens=2), tokenizer='/m'",),
    ),
    Wording(
        "ready",
        "the parser (where serving starts) and the runner's readiness",
        shapes.READY_RE,
        ("Starting vLLM server on http://0.0.0.0:8000",),
    ),
    Wording(
        "kv-cache-size",
        "kv_tokens",
        logcheck.KV_RE,
        (
            "GPU KV cache size: 3,806,688 tokens, Maximum concurrency for 4,096 tokens per request: 929.37x",
            "CPU KV cache size: 45,968 tokens, Maximum concurrency for 4,096 tokens per request: 11.22x",
        ),
    ),
    Wording(
        "autofit-reduced",
        "autofit",
        logcheck.AUTOFIT_RE,
        (
            "Auto-fit max_model_len: reduced from 1048576 to 516096 to fit in available GPU memory",
            "Auto-fit max_model_len: reduced from 1048576 to 45968 to fit in available KV cache memory "
            "(1.40 GiB GPU); the final length is set after CUDA graph capture and warmup",
        ),
    ),
    Wording(
        "autofit-final-reduced",
        "autofit",
        logcheck.AUTOFIT_FINAL_RE,
        (
            "--max-model-len auto reduced max_model_len from 1048576 to 524288 (1.10 GiB GPU left for the KV "
            "cache after CUDA graph capture and warmup).",
        ),
    ),
    Wording(
        "autofit-tentative",
        "autofit",
        logcheck.AUTOFIT_TENTATIVE_RE,
        (
            "Auto-fit max_model_len: full model context length 1048576 fits in available KV cache memory "
            "(1.40 GiB GPU); the final length is set after CUDA graph capture and warmup",
        ),
    ),
    Wording(
        "autofit-settled",
        "autofit",
        logcheck.AUTOFIT_SETTLED_RE,
        (
            "Auto-fit max_model_len: using max_model_len=1048576, which fits in the KV cache memory left after "
            "CUDA graph capture and warmup (1.10 GiB GPU).",
        ),
    ),
    Wording(
        "graph-capture-finished",
        "graph_mode",
        loggraphs.GRAPH_DONE_RE,
        ("Graph capturing finished in 3 secs, took 0.44 GiB",),
    ),
    Wording(
        "graph-capture-progress",
        "graph_mode (a capture that started and never finished)",
        loggraphs.GRAPH_START_RE,
        ("Capturing CUDA graphs (FULL):  53%|█████▎    | 27/51 [00:00<00:00, 65.59it/s]",),
    ),
    Wording(
        "enforce-eager",
        "graph_mode",
        loggraphs.EAGER_RE,
        (
            "Enforce eager set, disabling torch.compile and CUDAGraphs. This is equivalent to setting "
            "-cc.mode=none -cc.cudagraph_mode=none",
            "Enforce eager set, disabling torch.compile, CUDAGraphs, and JIT kernel warmup. This is equivalent "
            "to setting -cc.mode=none -cc.cudagraph_mode=none and --kernel_config.enable_jit_warmup=False",
        ),
    ),
    Wording(
        "attention-backend",
        "attention_backend",
        logcheck.BACKEND_RE,
        (
            "Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'TRITON_ATTN'].",
            "Using ROCM_AITER_FA backend out of potential backends: ['ROCM_AITER_FA', 'TRITON_ATTN'].",
        ),
    ),
    Wording(
        "attention-backend-rocm",
        "attention_backend",
        logcheck.BACKEND_RE,
        ("Using TRITON_ATTN backend out of potential backends: ['ROCM_AITER_FA', 'TRITON_ATTN'].",),
    ),
    Wording(
        "draft-eager",
        "graph_mode and the eager-draft family",
        loggraphs.DRAFT_EAGER_RE,
        ("DFlash draft attention (TRITON_ATTN) does not support full CUDA graphs; running the draft eagerly.",),
    ),
    Wording(
        "draft-capture",
        "graph_mode (the draft model's capture, Model Runner V2)",
        loggraphs.DRAFT_CAPTURE_RE,
        ("Capturing model for DFlash speculator...",),
    ),
    Wording(
        "draft-loading",
        "graph_mode (a draft model is loaded although the config line was not seen)",
        loggraphs.DRAFT_LOADING_RE,
        ("Loading drafter model...", "MTP draft model loaded: 1234 params"),
    ),
    Wording(
        "jit-during-inference",
        "faults (the jit-during-inference family)",
        family("jit-during-inference").patterns[0],
        (
            "Triton JIT compilation during inference: matmul_kernel_persistent. This causes a latency spike; "
            "consider extending warmup to cover this shape/config.",
        ),
    ),
    Wording(
        "engine-fatal",
        "faults (the engine-died family)",
        family("engine-died").patterns[1],
        ("EngineCore encountered a fatal error.",),
    ),
    Wording(
        "rpc-timeout",
        "faults (the engine-step-timeout family)",
        family("engine-step-timeout").patterns[0],
        ("TimeoutError: RPC call to sample_tokens timed out.",),
    ),
    Wording(
        "bad-request",
        "faults (a client's bad request answered 4xx is not a server fault: vfleet.verify.log.requests)",
        logrequests.BAD_REQUEST_RE,
        ("Request cmpl-1a2b failed (bad request): max_tokens must be at least 1, got 0.",),
    ),
)


def sources(path: Path = DATA) -> Sources:
    """logwording.json, read: every base's entry for every wording it names."""
    data = json.loads(path.read_text())
    out: Sources = {}
    for base, block in data.items():
        if base.startswith("_"):
            continue
        out[base] = {
            wid: Source(e["file"], e["literal"]) if "file" in e else str(e["gone"]) for wid, e in block.items()
        }
    return out


def bases_known(data: Sources | None = None) -> list[str]:
    """The bases the table covers, oldest first."""
    return sorted(data if data is not None else sources(), key=lambda v: tuple(int(x) for x in v.split(".")))


def uncovered(bases: list[str], data: Sources | None = None, table: tuple[Wording, ...] = WORDING) -> list[str]:
    """Each (wording, base) pair the data says nothing about, and each entry naming no wording of the
    table. A base the checks serve must have none."""
    data = data if data is not None else sources()
    ids = {w.id for w in table}
    missing = [f"{w.id} on {b}" for b in bases for w in table if w.id not in data.get(b, {})]
    unknown = [f"{wid} on {b}: no such wording" for b in bases for wid in data.get(b, {}) if wid not in ids]
    return missing + unknown


def unprinted(base: str, tree: Path, data: Sources | None = None) -> list[str]:
    """Each wording of `base` whose text is not in its file of the source tree `tree` (which holds
    `vllm/`): a line the checks would wait for in vain."""
    data = data if data is not None else sources()
    problems: list[str] = []
    for wid, src in data.get(base, {}).items():
        if not isinstance(src, Source):
            continue
        path = tree / "vllm" / src.file
        if not path.is_file():
            problems.append(f"{wid}: vllm/{src.file} is not in the {base} tree")
        elif src.literal not in path.read_text(encoding="utf-8", errors="replace"):
            problems.append(f"{wid}: vllm/{src.file} of {base} does not print {src.literal!r}")
    return problems
