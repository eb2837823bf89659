"""The fault check's allow-list: what denies by default but is known to be healthy. Each entry says
why and where from, and which families it may excuse; an event is excused only when every family it
raised is among them (vfleet.verify.log.check.scan_faults). An entry may also say why it did not excuse
an event of its kind (`explain`); the fault check's message carries that next to the event.

The client-error entries excuse an error only when it is tied to its own request's answer, and the
answer is 4xx, and (for a traceback) the exception was raised in request validation:
vfleet.verify.log.requests.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from vfleet.verify.log.parse import Event, Line, ParsedLog
from vfleet.verify.log.requests import HANDLER_RE, access, client_error_verdict, next_line_of_process


def _no_explanation(ev: Event, log: ParsedLog) -> str | None:
    return None


@dataclass(frozen=True)
class Allow:
    id: str
    reason: str
    source: str
    covers: frozenset[str]
    match: Callable[[Event, ParsedLog], bool]
    #: why the entry did not excuse an event it speaks of (None: the event is not of its kind)
    explain: Callable[[Event, ParsedLog], str | None] = _no_explanation


SHUTDOWN_TRIGGER_RE = re.compile(
    r"\[shutdown\] (?:API server: shutdown triggered|EngineCore: trigger received signal=SIG(?:TERM|INT))"
)
SHUTDOWN_CLIENT_STOPPED_RE = re.compile(r"\[shutdown\] MPClient: (?:engine manager stopped|cleaning up|complete)")
# The records vLLM's exception handlers log while rejecting a request, naming it (not "Engine Exception
# caught": that one is the engine's failure).
CLIENT_LEAD_RE = HANDLER_RE
CLIENT_ERRORINFO_RE = re.compile(r"\bError with model error=ErrorInfo\(.*\bcode=(?P<code>4\d\d)\)")


def _same_proc(a: Line, b: Line) -> bool:
    return a.proc is None or b.proc is None or a.proc == b.proc


def _orderly_shutdown_traceback(ev: Event, log: ParsedLog) -> bool:
    """vLLM's engine client, stopping the engine on SIGTERM/SIGINT, makes its output handler fail with
    EngineDeadError. Allowed only when that process's shutdown really was triggered and had stopped the
    engine client before the traceback, and the traceback ends in EngineDeadError and nothing else."""
    if not ev.is_traceback or set(ev.exception_types()) != {"EngineDeadError"}:
        return False
    before = [ln for ln in log.lines[: ev.first.pos] if _same_proc(ln, ev.first)]
    triggered = [ln.no for ln in log.lines[: ev.first.pos] if SHUTDOWN_TRIGGER_RE.search(ln.msg)]
    stopped = [ln.no for ln in before if SHUTDOWN_CLIENT_STOPPED_RE.search(ln.msg)]
    return bool(triggered and stopped and min(triggered) < max(stopped))


def _errorinfo_verdict(ev: Event, log: ParsedLog) -> tuple[bool, str | None]:
    """`Error with model error=ErrorInfo(..., code=404)`: vLLM logs the 4xx error response it returns, and
    returns it at once, so the next line of its process is that response's access line, with that code."""
    m = CLIENT_ERRORINFO_RE.search(ev.first.msg)
    if len(ev.lines) != 1 or m is None:
        return False, None
    nxt = next_line_of_process(ev, log)
    answer = access(nxt)
    if answer is None:
        seen = f"line {nxt.no}: {nxt.text.strip()[:120]}" if nxt else "nothing"
        return False, f"its answer is not in the log: the next line of its process is {seen}, not an access line"
    if answer.status != int(m.group("code")):
        said = f"this one was answered {m.group('code')}"
        return False, f"the next access line ({answer}) answers another request: {said}"
    return True, None


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
        "tests/fixtures/h200-vllm-0.26.0/boot-autofit.log, tests/fixtures/logs/cpu_healthy_with_sigterm.log",
        covers=frozenset({"error-level", "traceback", "engine-died"}),
        match=_orderly_shutdown_traceback,
    ),
    Allow(
        id="client-error-errorinfo",
        reason="vLLM logs at ERROR the 4xx error response it sends for a request naming an unknown model; "
        "the client erred, the server is healthy. Tied to its answer: the next line of its process is the "
        "access line answering that code",
        source="vLLM (pinned base) entrypoints/openai/chat_completion/serving.py and responses/serving.py "
        "(`Error with model %s`); tests/fixtures/logs/cpu_healthy_with_sigterm.log, v0.32/cpu_healthy.log",
        covers=frozenset({"error-level"}),
        match=lambda ev, log: _errorinfo_verdict(ev, log)[0],
        explain=lambda ev, log: _errorinfo_verdict(ev, log)[1],
    ),
    Allow(
        id="client-error-answered-4xx",
        reason="an error that vLLM's exception handlers log, with its traceback, while rejecting a bad request "
        "(--log-error-stack), tied to its own answer (its request id names the endpoint of the access line its "
        "API server writes next, whose status is the one vLLM gives that exception, and is 4xx), raised in "
        "request validation or protocol code with no engine, model or worker frame",
        source="vLLM 0.30 entrypoints/serve/exception_handling (handlers, error_response.py); uvicorn access log; "
        "vfleet.verify.log.requests",
        covers=frozenset({"error-level", "traceback"}),
        match=lambda ev, log: client_error_verdict(ev, log)[0],
        explain=lambda ev, log: client_error_verdict(ev, log)[1],
    ),
    Allow(
        id="aiter-build-at-startup",
        reason="AITER compiles its kernels on first use during model load and warm-up, before the server is up",
        source="ROCm/aiter aiter/jit/core.py build messages; vLLM starts serving after warm-up",
        covers=frozenset({"jit-during-inference"}),
        match=_aiter_build_at_startup,
    ),
)
