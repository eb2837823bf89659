"""The fault check's allow-list: what denies by default but is known to be healthy. Each entry says
why and where from, and which families it may excuse; an event is excused only when every family it
raised is among them (vfleet.verify.logcheck.scan_faults).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from vfleet.verify.logparse import ACCESS_RE, Event, Line, ParsedLog


@dataclass(frozen=True)
class Allow:
    id: str
    reason: str
    source: str
    covers: frozenset[str]
    match: Callable[[Event, ParsedLog], bool]


SHUTDOWN_TRIGGER_RE = re.compile(
    r"\[shutdown\] (?:API server: shutdown triggered|EngineCore: trigger received signal=SIG(?:TERM|INT))"
)
SHUTDOWN_CLIENT_STOPPED_RE = re.compile(r"\[shutdown\] MPClient: (?:engine manager stopped|cleaning up|complete)")
# The records vLLM logs while rejecting a request (not "Engine Exception caught": that one is the engine).
CLIENT_LEAD_RE = re.compile(
    r"(?<!Engine )\b(?:Exception|RequestValidationError|HTTPException|ValidationError) caught\b"
    r"|\bError (?:in|with|while) (?:preprocessing|validating|parsing|rendering|model)\b|\bbad request\b",
    re.I,
)
CLIENT_ERRORINFO_RE = re.compile(r"\bError with model error=ErrorInfo\(.*\bcode=4\d\d\)")


def _same_proc(a: Line, b: Line) -> bool:
    return a.proc is None or b.proc is None or a.proc == b.proc


def _orderly_shutdown_traceback(ev: Event, log: ParsedLog) -> bool:
    """vLLM's engine client, stopping the engine on SIGTERM/SIGINT, makes its output handler fail with
    EngineDeadError. Allowed only when that process's shutdown really was triggered and had stopped the
    engine client before the traceback, and the traceback ends in EngineDeadError and nothing else."""
    if not ev.is_traceback or set(ev.exception_types()) != {"EngineDeadError"}:
        return False
    before = [ln for ln in log.lines[: ev.first.no - 1] if _same_proc(ln, ev.first)]
    triggered = [ln.no for ln in log.lines[: ev.first.no - 1] if SHUTDOWN_TRIGGER_RE.search(ln.msg)]
    stopped = [ln.no for ln in before if SHUTDOWN_CLIENT_STOPPED_RE.search(ln.msg)]
    return bool(triggered and stopped and min(triggered) < max(stopped))


def _client_errorinfo(ev: Event, log: ParsedLog) -> bool:
    """`Error with model error=ErrorInfo(..., code=404)`: vLLM logs the 4xx error response it returns."""
    return len(ev.lines) == 1 and bool(CLIENT_ERRORINFO_RE.search(ev.first.msg))


def _client_error_answered_4xx(ev: Event, log: ParsedLog) -> bool:
    """An error vLLM logs while rejecting a request (with --log-error-stack: `Exception caught. Request
    id: ...` and its traceback, an AssertionError from request validation included): the next HTTP
    access line of the same API server process answers 4xx."""
    if ev.first.proc is not None and not ev.first.proc.startswith("APIServer"):
        return False
    if not CLIENT_LEAD_RE.search(ev.first.msg):
        return False
    for ln in log.lines[ev.last.no : ev.last.no + 50]:
        if not _same_proc(ln, ev.first):
            continue
        m = ACCESS_RE.search(ln.msg) if ln.level is not None and ln.src is None else None
        if m:
            return m.group("status").startswith("4")
    return False


def _aiter_build_at_startup(ev: Event, log: ParsedLog) -> bool:
    """AITER JIT-builds its modules on first use, which is during load and warm-up, before the server
    accepts requests; a build after that is JIT during inference."""
    return "[aiter]" in ev.first.text and log.ready_at is not None and ev.first.no < log.ready_at


ALLOW: tuple[Allow, ...] = (
    Allow(
        id="orderly-shutdown-traceback",
        reason="on SIGTERM/SIGINT vLLM's engine client stops the engine and its output handler logs an "
        "EngineDeadError traceback; it is part of an orderly stop, not a crash",
        source="vllm 0.26/0.30 v1/engine/async_llm.py output_handler, entrypoints launcher [shutdown] records; "
        "shared/fixtures/h200-vllm-0.26.0/boot-autofit.log, tests/fixtures/logs/cpu_healthy_with_sigterm.log",
        covers=frozenset({"error-level", "traceback", "engine-died"}),
        match=_orderly_shutdown_traceback,
    ),
    Allow(
        id="client-error-errorinfo",
        reason="vLLM logs at ERROR the 4xx error response it sends for a request naming an unknown model; "
        "the client erred, the server is healthy",
        source="vLLM (pinned base) entrypoints/openai/chat_completion/serving.py and responses/serving.py "
        "(`Error with model %s`); tests/fixtures/logs/cpu_healthy_with_sigterm.log",
        covers=frozenset({"error-level"}),
        match=_client_errorinfo,
    ),
    Allow(
        id="client-error-answered-4xx",
        reason="an error (with --log-error-stack, its traceback) that vLLM logs while rejecting a bad request, "
        "identified by the 4xx answer the API server gives next; a validation assert included",
        source="vLLM (pinned base) entrypoints/serve/exception_handling/handlers (logger.exception when "
        "log_error_stack); uvicorn access log",
        covers=frozenset({"error-level", "traceback"}),
        match=_client_error_answered_4xx,
    ),
    Allow(
        id="aiter-build-at-startup",
        reason="AITER compiles its kernels on first use during model load and warm-up, before the server is up",
        source="ROCm/aiter aiter/jit/core.py build messages; vLLM starts serving after warm-up",
        covers=frozenset({"jit-during-inference"}),
        match=_aiter_build_at_startup,
    ),
)
