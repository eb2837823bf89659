"""What the boot-verify log check denies and what it lets through: the one place for both.

The fault check (vfleet.verify.logcheck.check_faults) denies by default. Every line at ERROR or
CRITICAL level, every Python traceback and every line of a runtime fault family below fails it,
unless an allow-list entry (ALLOW, in vfleet.verify.logallow next to the code that recognises it)
matches. This module holds the families as data: an id, what it is, where the wording comes from,
and the patterns of its lines. The check, the report (figures `log_families`) and docs/boot-verify.md
read this table; nothing else lists fault wording.

Two families are not patterns but shapes the log parser recognises: `error-level` (a vLLM, uvicorn or
glog record at ERROR/CRITICAL, `E`/`F`) and `traceback` (a `Traceback (most recent call last):` block,
whether vLLM logged it or Python printed it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

IC = re.IGNORECASE


@dataclass(frozen=True)
class Family:
    id: str
    what: str
    source: str
    patterns: tuple[re.Pattern[str], ...] = field(default=())
    #: a line that matches one of these is not in the family even when a pattern matches
    not_when: tuple[re.Pattern[str], ...] = field(default=())
    #: only counted when the profile expects graph mode (verify.graph_mode)
    only_with_graphs: bool = False


#: A match right after one of these words is a statement that the fault did not happen
#: ("no CUDA error", "without NCCL errors").
NEGATED_BEFORE = re.compile(r"\b(?:no|not an?|without|zero|never)\s+$", IC)

FAMILIES: tuple[Family, ...] = (
    Family(
        id="error-level",
        what="a record logged at ERROR or CRITICAL (vLLM, uvicorn, glog E/F)",
        source="REFERENCE section 4 (vLLM line prefix); Python logging levels; glog severity letters",
    ),
    Family(
        id="traceback",
        what="a Python traceback, logged or printed, in any process",
        source="Python `Traceback (most recent call last):`; issue 11",
    ),
    Family(
        id="gpu-memory-fault",
        what="a GPU memory access fault or illegal address",
        source="REFERENCE section 4; ROCm runtime (`Memory access fault by GPU node-N`, `HW Exception by GPU`)",
        patterns=(
            re.compile(r"Memory access fault by GPU", IC),
            re.compile(r"HW Exception by GPU", IC),
            re.compile(r"\billegal (?:memory access|address)\b", IC),
            re.compile(r"\bmisaligned address\b", IC),
            re.compile(r"\bunspecified launch failure\b", IC),
            re.compile(r"\bpage fault\b.*\bGPU\b|\bGPU\b.*\bpage fault\b", IC),
        ),
    ),
    Family(
        id="gpu-runtime-error",
        what="a CUDA, HIP or HSA runtime (or vendor library) error, in any spelling and case",
        source="CUDA runtime cudaError_t, HIP hipError_t, HSA hsa_status_t names; torch.AcceleratorError; issue 11",
        patterns=(
            # "CUDA error", "cuda runtime error", "HIP error:", "hsa error", "cuBLAS error", "hipBLASLt error"
            re.compile(
                r"\b(?:cuda|hip|hsa|cu|nvrtc|hiprtc|cublas(?:lt)?|hipblas(?:lt)?|rocblas|cudnn|miopen|cufft|cusparse"
                r"|cusolver|curand|rccl_?hip)[ _-]?(?:runtime[ _-]|driver[ _-]|kernel[ _-])?error\b",
                IC,
            ),
            # bare enum names: cudaErrorIllegalAddress, hipErrorIllegalAddress, hipErrorNoBinaryForGpu
            re.compile(r"\b(?:cuda|hip|cu)Error[A-Z]\w*", IC),
            # CUDA_ERROR_ILLEGAL_ADDRESS, HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION, hipblas/cublas statuses
            re.compile(r"\b(?:CUDA|HIP|HSA)_(?:STATUS_)?ERROR(?:_\w+)?\b", IC),
            re.compile(r"\b(?:CUBLAS|HIPBLAS|ROCBLAS|CUDNN|MIOPEN)_STATUS_(?!SUCCESS\b)\w+", IC),
            re.compile(r"\bAcceleratorError\b"),
            re.compile(r"\bdevice-side assert", IC),
        ),
        not_when=(re.compile(r"\b(?:cuda|hip)ErrorNone\b|_STATUS_SUCCESS\b", IC),),
    ),
    Family(
        id="kernel-assert",
        what="an assert in a kernel or in C++ (`Assertion `...` failed`)",
        source="REFERENCE section 4 (assert strings from attention kernels)",
        patterns=(re.compile(r"Assertion [`'\"].*[`'\"] failed", IC), re.compile(r"\bassert(?:ion)? failed\b", IC)),
    ),
    Family(
        id="collective-error",
        what="an NCCL or RCCL error, or a collective watchdog timeout",
        source="NCCL/RCCL result codes (ncclSystemError, ...), `NCCL WARN`; torch ProcessGroupNCCL watchdog",
        patterns=(
            re.compile(r"\b[nr]ccl[ _-]?(?:error|warn|failure|abort)\w*\b", IC),
            re.compile(r"\b[nr]ccl\w*Error\b", IC),
            re.compile(r"\bnccl[A-Z]\w*Error\b"),
            re.compile(r"watchdog caught collective operation timeout", IC),
            re.compile(r"\bcollective operation timeout\b", IC),
            re.compile(r"\bWork[NR]CCL\(.*\) ran for \d+ milliseconds before timing out", IC),
            re.compile(r"\bProcessGroup[NR]CCL\b.*\b(?:timed? ?out|timeout|abort\w*|error)\b", IC),
            re.compile(r"\b[NR]CCL\b.*\b(?:timed out|watchdog|communicator (?:was )?abort\w*)", IC),
            re.compile(r"\bheartbeat monitor\b.*\b(?:timed? ?out|timeout)\b", IC),
        ),
    ),
    Family(
        id="out-of-memory",
        what="out of memory from torch, CUDA, HIP or the CPU allocator",
        source="torch.OutOfMemoryError and its `Tried to allocate` text; cudaErrorMemoryAllocation; "
        "hipErrorOutOfMemory",
        patterns=(
            re.compile(r"\b(?:CUDA|HIP|XPU|GPU|CPU|device)\s+out of memory\b", IC),
            re.compile(r"\bOutOfMemoryError\b", IC),
            re.compile(r"\bTried to allocate [\d.]+ ?[KMGTP]i?B\b", IC),
            re.compile(r"can(?:no|')t allocate memory", IC),
            re.compile(r"\b(?:cudaErrorMemoryAllocation|hipErrorOutOfMemory|CUDA_ERROR_OUT_OF_MEMORY)\b", IC),
            re.compile(
                r"\b(?:HSA_STATUS_ERROR_OUT_OF_RESOURCES|CUBLAS_STATUS_ALLOC_FAILED|HIPBLAS_STATUS_ALLOC_FAILED)\b", IC
            ),
            re.compile(r"\boom[-_ ]?kill", IC),
            re.compile(r"\bMemoryError\b"),
        ),
    ),
    Family(
        id="fatal-signal",
        what="a process killed by a fatal signal (segfault, abort, bus error, ...)",
        source="POSIX signals; Python faulthandler `Fatal Python error`; C++ `terminate called`",
        patterns=(
            re.compile(
                r"\bSegmentation fault\b|\bBus error\b|\bIllegal instruction\b|\bFloating point exception\b", IC
            ),
            re.compile(r"\bcore dumped\b", IC),
            re.compile(r"Fatal Python error", IC),
            re.compile(r"terminate called (?:after throwing|without an active exception)", IC),
            re.compile(
                r"\b(?:received|caught|got|killed by|terminated by|died (?:with|of|from)|exited (?:with|on)|raised)\b"
                r"[^.;]{0,40}?\b(?:SIG(?:SEGV|BUS|ILL|FPE|ABRT|KILL|SYS|TRAP)\b|signal (?:4|5|6|7|8|9|11|31)\b)",
                IC,
            ),
            re.compile(r"\*\*\* SIG(?:SEGV|BUS|ILL|FPE|ABRT)\b", IC),
            re.compile(r"\b(?:exit ?code|exitcode|returncode|return code)\s*[=:]?\s*-(?:4|6|7|8|9|11)\b", IC),
        ),
        # Set-up lines name the signals a handler is registered for; they are not a crash.
        not_when=(re.compile(r"faulthandler(?!.*Fatal Python error)", IC),),
    ),
    Family(
        id="jit-during-inference",
        what="a kernel compiled or autotuned while serving (Triton, TileLang, CuTeDSL, AITER, any compiler)",
        source="vllm/utils/jit_monitor.py (`<compiler> [kernel ]JIT compilation during inference`); AITER "
        "aiter/jit/core.py build lines",
        patterns=(
            # "<compiler> [kernel ]JIT compilation during inference: <fn>" (not the monitor's own
            # "monitored JIT compilations during inference will use mode=warn")
            re.compile(r"\b(?:JIT compil\w*|autotun\w*(?: benchmark\w*)?|compil\w*)\s+during inference\s*:", IC),
            re.compile(r"\[aiter\].*\b(?:start(?:ing)? build|finish(?:ed)? build|build(?:ing)? \[?module)", IC),
            re.compile(r"Triton autotuning for function\b", IC),
        ),
    ),
    Family(
        id="eager-draft",
        what="a speculative draft model running eagerly while graph mode is expected",
        source="vllm/v1/worker/gpu/spec_decode/dflash/speculator.py (`running the draft eagerly`)",
        patterns=(
            re.compile(r"running the draft(?: model)? eager", IC),
            re.compile(r"\bdraft(?: model)?\b.{0,40}\b(?:runs?|running|falls? back to)\s+(?:in\s+)?eager", IC),
        ),
        only_with_graphs=True,
    ),
    Family(
        id="engine-died",
        what="the engine core or a worker process died",
        source="vllm/v1/engine/exceptions.py EngineDeadError; v1/engine/core.py; v1/executor/multiproc_executor.py",
        patterns=(
            re.compile(r"\bEngineDeadError\b"),
            re.compile(r"EngineCore encountered a fatal error", IC),
            re.compile(r"\b(?:Engine core|Worker) proc\w*\b.*\bdied\b", IC),
            re.compile(r"\bdied unexpectedly\b", IC),
            re.compile(r"WorkerProc hit an exception", IC),
            re.compile(r"Engine core initialization failed", IC),
        ),
    ),
)

FAMILY_IDS: tuple[str, ...] = tuple(f.id for f in FAMILIES)

#: The vLLM versions whose log wording these checks know (REFERENCE section 4; the H200 fixtures are 0.26).
KNOWN_VERSIONS: tuple[tuple[int, int], tuple[int, int]] = ((0, 26), (0, 33))


def family(family_id: str) -> Family:
    for f in FAMILIES:
        if f.id == family_id:
            return f
    raise KeyError(family_id)


def line_families(line: str, graphs_expected: bool = True) -> list[str]:
    """The pattern families one line belongs to (not `error-level` or `traceback`: those need the parser)."""
    found: list[str] = []
    for fam in FAMILIES:
        if not fam.patterns or (fam.only_with_graphs and not graphs_expected):
            continue
        if any(n.search(line) for n in fam.not_when):
            continue
        for pat in fam.patterns:
            if any(not NEGATED_BEFORE.search(line[: m.start()]) for m in pat.finditer(line)):
                found.append(fam.id)
                break
    return found
