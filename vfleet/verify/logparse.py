"""Reading a vLLM server log: its line shapes (records, uvicorn, glog, printed lines), the lines as
`Line`s, what could not be read (`ParsedLog.problems`), and the events the fault check weighs (a
traceback with the record that introduces it is one event; every other line is one).

vfleet.verify.logcheck reads every log through `parse` here; a log with problems fails every check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vfleet.verify.logrules import KNOWN_VERSIONS

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


def as_log(log: str | ParsedLog) -> ParsedLog:
    return log if isinstance(log, ParsedLog) else parse(log)


# ---------------------------------------------------------------------------------------------------
# Events: a traceback with the record that introduces it is one event; every other line is one.
# ---------------------------------------------------------------------------------------------------


def _header(line: Line) -> str:
    """What precedes the message: the record header (all of it) for a record, the process prefix otherwise."""
    return line.text[: len(line.text) - len(line.msg)] if line.msg else line.text


def split_events(lines: list[Line]) -> list[Event]:
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
