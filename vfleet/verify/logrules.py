"""What the boot-verify log check denies and what it lets through: the one place for both.

The fault check (vfleet.verify.logcheck.check_faults) denies by default. Every line at ERROR or
CRITICAL level, every Python traceback and every line of a runtime fault family below fails it,
unless an allow-list entry (ALLOW, in vfleet.verify.logallow next to the code that recognises it)
matches. This module holds the families as data: an id, what it is, where the wording comes from,
and the patterns of its lines. The check, the report (figures `log_families`) and docs/boot-verify.md
read this table; nothing else lists fault wording.

Three families are not patterns but shapes the log parser recognises: `error-level` (a vLLM, uvicorn or
glog record at ERROR/CRITICAL, `E`/`F`), `traceback` (a `Traceback (most recent call last):` block,
whether vLLM logged it or Python printed it) and `http-5xx` (a uvicorn access line answering 5xx).
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


def ic(*regexes: str | re.Pattern[str]) -> tuple[re.Pattern[str], ...]:
    """A family's patterns: a regex given as text is compiled case-insensitive (runtimes and versions
    spell the same fault in either case); one whose case matters is given compiled, and kept as it is."""
    return tuple(r if isinstance(r, re.Pattern) else re.compile(r, IC) for r in regexes)


#: A match right after one of these words is a statement that the fault did not happen
#: ("no CUDA error", "without NCCL errors").
NEGATED_BEFORE = re.compile(r"\b(?:no|not an?|without|zero|never)\s+$", IC)

FAMILIES: tuple[Family, ...] = (
    Family(
        id="error-level",
        what="a record logged at ERROR or CRITICAL (vLLM, uvicorn, glog E/F)",
        source="vLLM's logger format (vllm/logger.py, the `(Proc pid=N)` prefix); Python logging levels; glog "
        "severity letters",
    ),
    Family(
        id="traceback",
        what="a Python traceback, logged or printed, in any process",
        source="Python `Traceback (most recent call last):`; issue 11",
    ),
    Family(
        id="http-5xx",
        what="an HTTP access line answering 5xx: the server failed a request",
        source="uvicorn's access log (`POST /v1/completions HTTP/1.1` answered `500 Internal Server Error`); vLLM "
        "answers its own failures 5xx (entrypoints/serve/exception_handling/error_response.py); issue 21",
    ),
    Family(
        id="gpu-memory-fault",
        what="a GPU memory access fault or illegal address",
        source="CUDA runtime messages; ROCm runtime (`Memory access fault by GPU node-N`, `HW Exception by GPU`)",
        patterns=ic(
            r"Memory access fault by GPU",
            r"HW Exception by GPU",
            r"\billegal (?:memory access|address)\b",
            r"\bmisaligned address\b",
            r"\bunspecified launch failure\b",
            r"\bpage fault\b.*\bGPU\b|\bGPU\b.*\bpage fault\b",
        ),
    ),
    Family(
        id="gpu-runtime-error",
        what="a CUDA, HIP or HSA runtime (or vendor library) error, in any spelling and case",
        source="CUDA runtime cudaError_t, HIP hipError_t, HSA hsa_status_t names; torch.AcceleratorError; issue 11",
        patterns=ic(
            # "CUDA error", "cuda runtime error", "HIP error:", "hsa error", "cuBLAS error", "hipBLASLt error"
            r"\b(?:cuda|hip|hsa|cu|nvrtc|hiprtc|cublas(?:lt)?|hipblas(?:lt)?|rocblas|cudnn|miopen|cufft|cusparse"
            r"|cusolver|curand|rccl_?hip)[ _-]?(?:runtime[ _-]|driver[ _-]|kernel[ _-])?error\b",
            # bare enum names: cudaErrorIllegalAddress, hipErrorIllegalAddress, hipErrorNoBinaryForGpu
            r"\b(?:cuda|hip|cu)Error[A-Z]\w*",
            # CUDA_ERROR_ILLEGAL_ADDRESS, HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION, hipblas/cublas statuses
            r"\b(?:CUDA|HIP|HSA)_(?:STATUS_)?ERROR(?:_\w+)?\b",
            r"\b(?:CUBLAS|HIPBLAS|ROCBLAS|CUDNN|MIOPEN)_STATUS_(?!SUCCESS\b)\w+",
            re.compile(r"\bAcceleratorError\b"),
            r"\bdevice-side assert",
        ),
        not_when=ic(r"\b(?:cuda|hip)ErrorNone\b|_STATUS_SUCCESS\b"),
    ),
    Family(
        id="kernel-assert",
        what="an assert in a kernel or in C++ (`Assertion `...` failed`)",
        source="assert strings of attention kernels (csrc/attention/*.cu) and C++ asserts",
        patterns=ic(r"Assertion [`'\"].*[`'\"] failed", r"\bassert(?:ion)? failed\b"),
    ),
    Family(
        id="collective-error",
        what="an NCCL or RCCL error, or a collective watchdog timeout",
        source="NCCL/RCCL result codes (ncclSystemError, ...), `NCCL WARN`; torch ProcessGroupNCCL watchdog",
        patterns=ic(
            r"\b[nr]ccl[ _-]?(?:error|warn|failure|abort)\w*\b",
            r"\b[nr]ccl\w*Error\b",
            re.compile(r"\bnccl[A-Z]\w*Error\b"),
            r"watchdog caught collective operation timeout",
            r"\bcollective operation timeout\b",
            r"\bWork[NR]CCL\(.*\) ran for \d+ milliseconds before timing out",
            r"\bProcessGroup[NR]CCL\b.*\b(?:timed? ?out|timeout|abort\w*|error)\b",
            r"\b[NR]CCL\b.*\b(?:timed out|watchdog|communicator (?:was )?abort\w*)",
            r"\bheartbeat monitor\b.*\b(?:timed? ?out|timeout)\b",
        ),
    ),
    Family(
        id="out-of-memory",
        what="out of memory from torch, CUDA, HIP or the CPU allocator",
        source="torch.OutOfMemoryError and its `Tried to allocate` text; cudaErrorMemoryAllocation; "
        "hipErrorOutOfMemory",
        patterns=ic(
            r"\b(?:CUDA|HIP|XPU|GPU|CPU|device)\s+out of memory\b",
            r"\bOutOfMemoryError\b",
            r"\bTried to allocate [\d.]+ ?[KMGTP]i?B\b",
            r"can(?:no|')t allocate memory",
            r"\b(?:cudaErrorMemoryAllocation|hipErrorOutOfMemory|CUDA_ERROR_OUT_OF_MEMORY)\b",
            r"\b(?:HSA_STATUS_ERROR_OUT_OF_RESOURCES|CUBLAS_STATUS_ALLOC_FAILED|HIPBLAS_STATUS_ALLOC_FAILED)\b",
            r"\boom[-_ ]?kill",
            re.compile(r"\bMemoryError\b"),
        ),
    ),
    Family(
        id="fatal-signal",
        what="a process killed by a fatal signal (segfault, abort, bus error, ...)",
        source="POSIX signals; Python faulthandler `Fatal Python error`; C++ `terminate called`",
        patterns=ic(
            r"\bSegmentation fault\b|\bBus error\b|\bIllegal instruction\b|\bFloating point exception\b",
            r"\bcore dumped\b",
            r"Fatal Python error",
            r"terminate called (?:after throwing|without an active exception)",
            r"\b(?:received|caught|got|killed by|terminated by|died (?:with|of|from)|exited (?:with|on)|raised)\b"
            r"[^.;]{0,40}?\b(?:SIG(?:SEGV|BUS|ILL|FPE|ABRT|KILL|SYS|TRAP)\b|signal (?:4|5|6|7|8|9|11|31)\b)",
            r"\*\*\* SIG(?:SEGV|BUS|ILL|FPE|ABRT)\b",
            r"\b(?:exit ?code|exitcode|returncode|return code)\s*[=:]?\s*-(?:4|6|7|8|9|11)\b",
        ),
        # Set-up lines name the signals a handler is registered for; they are not a crash.
        not_when=ic(r"faulthandler(?!.*Fatal Python error)"),
    ),
    Family(
        id="jit-during-inference",
        what="a kernel compiled or autotuned while serving (Triton, TileLang, CuTeDSL, AITER, any compiler)",
        source="vllm/utils/jit_monitor.py (`<compiler> [kernel ]JIT compilation during inference`); AITER "
        "aiter/jit/core.py build lines",
        patterns=ic(
            # "<compiler> [kernel ]JIT compilation during inference: <fn>" (not the monitor's own
            # "monitored JIT compilations during inference will use mode=warn")
            r"\b(?:JIT compil\w*|autotun\w*(?: benchmark\w*)?|compil\w*)\s+during inference\s*:",
            r"\[aiter\].*\b(?:start(?:ing)? build|finish(?:ed)? build|build(?:ing)? \[?module)",
            r"Triton autotuning for function\b",
        ),
    ),
    Family(
        id="eager-draft",
        what="a speculative draft model running eagerly while graph mode is expected",
        source="vllm/v1/worker/gpu/spec_decode/dflash/speculator.py (`running the draft eagerly`)",
        patterns=ic(
            r"running the draft(?: model)? eager",
            r"\bdraft(?: model)?\b.{0,40}\b(?:runs?|running|falls? back to)\s+(?:in\s+)?eager",
        ),
        only_with_graphs=True,
    ),
    Family(
        id="engine-died",
        what="the engine core or a worker process died",
        source="vllm/v1/engine/exceptions.py EngineDeadError; v1/engine/core.py; v1/executor/multiproc_executor.py",
        patterns=ic(
            re.compile(r"\bEngineDeadError\b"),
            r"EngineCore encountered a fatal error",
            r"\b(?:Engine core|Worker) proc\w*\b.*\bdied\b",
            r"\bdied unexpectedly\b",
            r"WorkerProc hit an exception",
            r"Engine core initialization failed",
        ),
    ),
)

FAMILY_IDS: tuple[str, ...] = tuple(f.id for f in FAMILIES)

#: The vLLM versions whose log wording these checks know (0.26 in the H200 fixtures, 0.30 in the CPU image).
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
