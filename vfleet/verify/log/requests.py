"""Which request an error in the log belongs to, what vLLM answered it, and where its exception was
raised: what the client-error entries of the fault check's allow-list (vfleet.verify.log.allow) must
establish before they excuse anything.

What vLLM 0.30 writes. With --log-error-stack its exception handlers
(entrypoints/serve/exception_handling/handlers) log `HTTPException caught. Request id: ID` and
`RequestValidationError caught. Request id: ID` with the traceback, and `Exception caught. Request id:
ID` (ValueError, TypeError, VLLMError, ...) without it. The request id names its endpoint (`cmpl-`
/v1/completions, `chatcmpl-` /v1/chat/completions, ...); it is `None` when the request was refused before
an endpoint ran (a body that failed FastAPI's validation). With --enable-log-requests the engine client
(v1/engine/async_llm.py generate) logs `Request ID failed (bad request): ...` when the request failed
with a VLLMClientError, vLLM's own type for an error the request caused. uvicorn's access line names the client
connection (ip:port), the endpoint and the status, and no request id; no line vLLM writes carries both.
What ties them is how the answer is made: the handler returns its error response in the task that
logged the error, and uvicorn writes the access line when that response starts, before the task yields;
so a request's answer is the next line its API-server process writes (other processes may write in
between, the same process may not).

So an error is tied to its answer when all of these hold: the record names its request id; the next line
of its process is an access line; that line's endpoint is the one the id names; and its status is the
one vLLM gives the exception the traceback ends in (create_error_response: ValueError/TypeError/
validation errors 400, not found 404, NotImplementedError 501, anything else 500). Two requests to the
same endpoint answered with the same status cannot be told apart by the log; every other mix-up fails.

And a client error is one whose exception was raised in request validation or protocol code (the
innermost frame outside the standard library), with no frame of the engine, model or worker anywhere in
the traceback: vLLM answers a ValueError or TypeError 400 wherever it was raised, so the status alone
does not say whose fault it was. A record without a traceback (`Exception caught`) says neither which
exception it was nor where it was raised; it is a client error only when vLLM's own `Request ID failed
(bad request)` record for the same request id precedes it. A record naming no request (`Request id:
None`) is tied to nothing and excused by nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vfleet.verify.log.parse import Event, Frame, Line, ParsedLog, Section

# The handlers' records (not "Engine Exception caught": that one is the engine's failure).
HANDLER_RE = re.compile(
    r"(?<!Engine )\b(?P<kind>RequestValidationError|HTTPException|Exception) caught\. Request id: (?P<id>\S+?)\.?$"
)
# AsyncLLM.generate with --enable-log-requests, for a VLLMClientError (or an admission-control rejection).
BAD_REQUEST_RE = re.compile(r"^Request (?P<id>\S+) failed \(bad request\): ")
# uvicorn's access line, less its `INFO:     ` prefix: `172.17.0.1:36966 - "POST /v1/completions HTTP/1.1" 400 ...`
ACCESS_LINE_RE = re.compile(
    r'^(?P<client>\S+) - "(?P<method>[A-Z]+) (?P<path>[^\s?]+)\S* HTTP/[\d.]+" (?P<status>\d{3})\b'
)

#: request id prefix -> the endpoints that make such ids (vLLM 0.30 entrypoints: openai/*/serving.py and
#: protocol.py, serve/tokenize/serving.py, pooling/*/serving.py)
ID_ENDPOINTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("chatcmpl-", ("/v1/chat/completions", "/v1/chat/completions/batch")),
    ("cmpl-", ("/v1/completions",)),
    ("resp_", ("/v1/responses",)),
    ("tokenize-", ("/tokenize", "/detokenize")),
    ("embd-", ("/v1/embeddings",)),
    ("pooling-", ("/pooling",)),
    ("classify-", ("/classify",)),
    ("score-", ("/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank")),
)

#: exception type (as the traceback names it, last dotted part) -> the status vLLM 0.30 answers it with
#: (entrypoints/serve/exception_handling/error_response.py create_error_response; the validation
#: handler answers RequestValidationError 400). A type not here is answered 500.
ANSWER_STATUS: dict[str, int] = {
    "RequestValidationError": 400,
    "ValidationError": 400,  # pydantic's, a ValueError
    "VLLMValidationError": 400,
    "VLLMClientError": 400,
    "ValueError": 400,
    "TypeError": 400,
    "OverflowError": 400,
    "JSONDecodeError": 400,
    "UnicodeDecodeError": 400,
    "VLLMNotFoundError": 404,
    "VLLMUnprocessableEntityError": 422,
    "NotImplementedError": 501,
}

# Where a frame's file is, relative to the package root: `.../site-packages/vllm/v1/engine/core.py`, or
# a vLLM tree outside site-packages (`/tmp/site/vllm/...`, as in the H200 logs).
_PACKAGE_RE = re.compile(r"(?:^|/)(?:site|dist)-packages/(?P<rel>.+)$")
_VLLM_TREE_RE = re.compile(r"(?:^|/)(?P<rel>vllm/.+)$")
# The standard library (`/usr/lib/python3.11/json/decoder.py`) and frozen or generated code: not where a
# fault is decided, so skipped when looking for where an exception was raised.
_STDLIB_RE = re.compile(r"^<|/lib/python3\.\d+/(?!site-packages/|dist-packages/)")
#: Request validation and protocol code: the request's own schema and parameters, the checks that turn it
#: into an engine input, and the web framework's body validation.
VALIDATION_CODE_RE = re.compile(
    r"^(?:vllm/(?:entrypoints/(?:[\w/]+/)?protocol\.py|entrypoints/chat_utils\.py|sampling_params\.py"
    r"|pooling_params\.py|v1/engine/input_processor\.py|inputs/|renderers/|tasks\.py"
    r"|v1/structured_output/backend_\w+\.py|multimodal/media/)"
    r"|fastapi/|starlette/|pydantic/|pydantic_core/)"
)
#: The engine, the model, the workers and what they run on: a frame here makes the error the server's.
SERVER_CODE_RE = re.compile(
    r"^(?:vllm/(?:v1/engine/core(?:_client)?\.py|v1/(?:worker|executor|core|attention|spec_decode|kv_offload"
    r"|simple_kv_offload|pool|hisparse|fault_tolerance)/|v1/sample/(?!logits_processor/)|model_executor/|models/"
    r"|attention/|distributed/|compilation/|kernels/|platforms/|device_allocator/|lora/|vllm_flash_attn/"
    r"|third_party/|ir/|worker/|executor/|_custom_ops\.py|_aiter_ops\.py|_xpu_ops\.py|forward_context\.py)"
    r"|torch/|triton/|flashinfer/|flash_attn/|aiter/|deep_gemm/|xformers/)"
)


@dataclass(frozen=True)
class Access:
    """One uvicorn access line."""

    line: Line
    client: str
    method: str
    path: str  # without the query
    status: int

    def __str__(self) -> str:
        return f'line {self.line.no}: {self.client} "{self.method} {self.path}" {self.status}'


def access(ln: Line | None) -> Access | None:
    if ln is None or ln.kind != "uvicorn":
        return None
    m = ACCESS_LINE_RE.match(ln.msg.strip())
    if m is None:
        return None
    return Access(ln, m.group("client"), m.group("method"), m.group("path"), int(m.group("status")))


def endpoints_of(request_id: str) -> tuple[str, ...]:
    return next((eps for prefix, eps in ID_ENDPOINTS if request_id.startswith(prefix)), ())


def _sole_api_server(log: ParsedLog) -> str | None:
    """The API-server process of the log's records, when there is exactly one."""
    procs = {ln.proc for ln in log.lines if ln.kind == "record" and ln.proc and ln.proc.lower().startswith("apiserver")}
    return procs.pop() if len(procs) == 1 else None


def next_line_of_process(ev: Event, log: ParsedLog) -> Line | None:
    """The next line the event's process wrote (any next line when the log has no process prefixes).

    vLLM 0.30 prefixed everything a process wrote to stdout and stderr with `(Proc pid=N)`; from 0.32 the
    prefix is part of vLLM's own record format, so uvicorn's lines carry none. uvicorn runs in the API
    server, so an unprefixed uvicorn line is the API server's when the log has one API-server process."""
    proc = ev.first.proc
    api = proc is not None and _sole_api_server(log) == proc
    for ln in log.lines[ev.last.pos + 1 :]:
        if proc is None or ln.proc == proc or (api and ln.proc is None and ln.kind == "uvicorn"):
            return ln
    return None


def answer_status(handler: str, final: Section | None) -> int | None:
    """The status vLLM answers the handler's exception with; None when the log does not say."""
    if handler == "RequestValidationError":
        return 400
    if final is None or final.short_type is None:
        return None
    if final.short_type == "HTTPException":  # starlette's str(): `404: Not Found`
        m = re.match(r"(\d{3})\b", final.exc_message)
        return int(m.group(1)) if m else None
    return ANSWER_STATUS.get(final.short_type, 500)


def _relative(path: str) -> str | None:
    m = _PACKAGE_RE.search(path) or _VLLM_TREE_RE.search(path)
    return m.group("rel") if m else None


def frame_kind(frame: Frame) -> str:
    """Where a frame's code is: `server`, `validation`, `stdlib` or `other`."""
    rel = _relative(frame.path)
    if rel is not None and SERVER_CODE_RE.match(rel):
        return "server"
    if rel is not None and VALIDATION_CODE_RE.match(rel):
        return "validation"
    if rel is None and _STDLIB_RE.search(frame.path):
        return "stdlib"
    return "other"


def _where(frame: Frame) -> str:
    return f"{_relative(frame.path) or frame.path} line {frame.line}, in {frame.func}"


@dataclass(frozen=True)
class Origin:
    kind: str  # "validation", "server" or "unknown"
    why: str


def origin(ev: Event) -> Origin:
    """Where the exception that ended the traceback was raised."""
    secs = ev.sections()
    if not secs:
        return Origin("unknown", "the record carries no traceback, so where its exception was raised is unknown")
    for sec in secs:
        for fr in sec.frames:
            if frame_kind(fr) == "server":
                return Origin(
                    "server",
                    f"{secs[-1].exc_text[:160] or 'its exception'} comes from engine, model or worker code "
                    f"({_where(fr)}), not from request validation",
                )
    final = secs[-1]
    raised = [fr for fr in final.frames if frame_kind(fr) != "stdlib"]
    if not raised:
        return Origin("unknown", f"{final.exc_text[:160] or 'the traceback'} has no frame outside the standard library")
    fr = raised[-1]
    rel = _relative(fr.path) or ""
    if frame_kind(fr) == "validation" or (final.short_type == "HTTPException" and rel.startswith("vllm/entrypoints/")):
        return Origin("validation", f"raised in request validation ({_where(fr)})")
    return Origin(
        "unknown",
        f"{final.exc_text[:160] or 'its exception'} was raised in {_where(fr)}, which is not request validation or "
        "protocol code",
    )


def _bad_request_record(ev: Event, log: ParsedLog, request_id: str) -> Line | None:
    """vLLM's `Request ID failed (bad request)` record for this request, in the event's process, before it."""
    for ln in reversed(log.lines[: ev.first.pos]):
        m = BAD_REQUEST_RE.match(ln.msg)
        if m and m.group("id") == request_id and (ev.first.proc is None or ln.proc == ev.first.proc):
            return ln
    return None


def client_error_verdict(ev: Event, log: ParsedLog) -> tuple[bool, str | None]:
    """Whether the event is a rejected request's error tied to its own 4xx answer, and a client error by
    where its exception was raised (or by vLLM's own verdict on the request); when it is a handler's record
    that does not qualify, why not (None for any other event)."""
    m = HANDLER_RE.search(ev.first.msg)
    if m is None or (ev.first.proc is not None and not ev.first.proc.lower().startswith("apiserver")):
        return False, None
    handler, request_id = m.group("kind"), m.group("id")
    if request_id == "None":
        return False, "the record names no request (`Request id: None`), so nothing ties it to an answer in the log"
    endpoints = endpoints_of(request_id)
    if not endpoints:
        return False, f"request id {request_id} names no endpoint these checks know (logrequests.ID_ENDPOINTS)"
    final = ev.final()
    if final is None and _bad_request_record(ev, log, request_id) is None:
        return False, (
            f"the record carries no traceback (vLLM logs `{handler} caught` without it) and no `Request "
            f"{request_id} failed (bad request)` record of vLLM's (--enable-log-requests) precedes it, so which "
            "exception it was and where it was raised cannot be checked"
        )
    nxt = next_line_of_process(ev, log)
    answer = access(nxt)
    if answer is None:
        seen = f"line {nxt.no}: {nxt.text.strip()[:120]}" if nxt else "nothing"
        return False, f"its answer is not in the log: the next line of its process is {seen}, not an access line"
    if answer.path not in endpoints:
        return False, (
            f"the next access line ({answer}) answers another request: {request_id} is a request to "
            f"{' or '.join(endpoints)}"
        )
    if final is not None:
        want = answer_status(handler, final)
        if want != answer.status:
            said = f"answers {final.exc_text[:120]} with {want}" if want else f"gives {final.exc_text[:120]} no status"
            return False, f"the next access line ({answer}) answers another request: vLLM {said}"
    if not 400 <= answer.status < 500:
        return False, f"vLLM answered it {answer.status} ({answer}): a server error"
    if final is not None:
        where = origin(ev)
        if where.kind != "validation":
            return False, f"{where.why}; vLLM answered it {answer.status} ({answer})"
    return True, None
