"""Reading a vLLM server log: its line shapes (records, uvicorn, glog, printed lines) in every form vLLM
writes them, the lines as `Line`s, what could not be read (`ParsedLog.problems`), the events the fault
check weighs (a traceback with the record that introduces it is one event; every other line is one) and
the parts of a traceback (`Section`: its frames and the exception that ended it).

The forms: plain text; colored text (vLLM colors level, time, file and process prefix when stdout is a
terminal, as under `docker run -t`, or with VLLM_LOGGING_COLOR=1; uvicorn colors its lines the same way),
which reads exactly as the plain text once the color codes are taken out; and one JSON object per record
(VLLM_LOGGING_CONFIG_PATH with a JSON formatter, as log pipelines use), read when each record names its
level and message, and refused, with the fix, when it does not.

vfleet.verify.log.check reads every log through `parse` here; a log with problems fails every check.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from vfleet.verify.log.rules import KNOWN_VERSIONS
from vfleet.verify.log.shapes import (
    ACCESS_MESSAGE_RE,
    ANSI_RE,
    CHAINED_RE,
    EXCEPTION_RE,
    FRAME_RE,
    GLOG_LEVELS,
    GLOG_RE,
    JSON_FORMAT_FIX,
    JSON_LEVEL_KEYS,
    JSON_MESSAGE_KEYS,
    JSON_TRAILER_KEYS,
    LEVELS,
    PROC_NAME_RE,
    PROC_PREFIX,
    READY_RE,
    TRACEBACK_RE,
    UNTERMINATED_LAST_RE,
    UVICORN_RE,
    VERSION_RES,
    VLLM_RECORD_RE,
)


@dataclass(frozen=True)
class Line:
    no: int  # 1-based line of the file; the lines of one JSON record share it
    text: str  # the line as it reads without color codes; a JSON record's lines in vLLM's text layout
    level: str | None  # DEBUG..CRITICAL for records, None for other lines
    proc: str | None  # the innermost `(Name pid=N)` of the prefix, as `Name:N`
    src: str | None  # `file.py:N` of a vLLM record (a glog line's source file too)
    msg: str  # the text after the record header (the whole line, less its prefix, for other lines)
    kind: str = "other"  # "record" (vLLM's logger), "uvicorn", "glog" or "other" (printed)
    from_json: bool = False  # a line of a JSON record
    pos: int = 0  # the index in ParsedLog.lines


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    func: str


@dataclass
class Section:
    """One traceback of a (maybe chained) exception: its frames, outermost first, and the line naming the
    exception that ended it (None when the traceback was cut off)."""

    start: Line
    frames: list[Frame] = field(default_factory=list)
    exc: Line | None = None

    @property
    def exc_text(self) -> str:
        return self.exc.msg.strip() if self.exc else ""

    @property
    def exc_type(self) -> str | None:
        """The exception's type as the traceback names it (`torch.AcceleratorError`)."""
        m = EXCEPTION_RE.match(self.exc_text)
        return m.group("type") if m else None

    @property
    def short_type(self) -> str | None:
        t = self.exc_type
        return t.rsplit(".", 1)[-1] if t else None

    @property
    def exc_message(self) -> str:
        m = EXCEPTION_RE.match(self.exc_text)
        return (m.group("message") or "") if m else self.exc_text


@dataclass
class Event:
    """One line, or one traceback block (with the record that introduces it) as one unit."""

    lines: list[Line]
    families: list[str] = field(default_factory=list)
    hits: list[tuple[Line, list[str]]] = field(default_factory=list)
    #: why an allow-list entry that speaks of this kind of event did not excuse it
    notes: list[str] = field(default_factory=list)

    @property
    def first(self) -> Line:
        return self.lines[0]

    @property
    def last(self) -> Line:
        return self.lines[-1]

    @property
    def is_traceback(self) -> bool:
        return any(TRACEBACK_RE.search(ln.text) for ln in self.lines)

    def sections(self) -> list[Section]:
        """The tracebacks of the block, in the order printed (a chained exception's cause first)."""
        out: list[Section] = []
        cur: Section | None = None
        in_frames = False
        for ln in self.lines:
            msg = ln.msg
            if TRACEBACK_RE.match(msg.lstrip()):
                cur = Section(ln)
                out.append(cur)
                in_frames = True
                continue
            if cur is None or not in_frames:
                continue
            frame = FRAME_RE.match(msg)
            if frame:
                cur.frames.append(Frame(frame.group("path"), int(frame.group("line")), frame.group("func")))
            elif msg.strip() and msg[:1] not in (" ", "\t") and not CHAINED_RE.match(msg):
                cur.exc = ln  # the first unindented line after the frames
                in_frames = False
        return out

    def exception_types(self) -> list[str]:
        """The exception types a traceback block ends in (one per chained traceback; `?` for one cut off)."""
        return [s.short_type or "?" for s in self.sections()]

    def final(self) -> Section | None:
        """The traceback of the exception that ended the block (the last of a chain)."""
        secs = self.sections()
        return secs[-1] if secs else None


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

    @property
    def plain(self) -> str:
        """The log as text without color codes, a JSON record as its lines in vLLM's text layout."""
        return "\n".join(ln.text for ln in self.lines)


def _proc(prefix: str) -> str | None:
    procs = PROC_NAME_RE.findall(prefix)
    return procs[-1][0] + ":" + procs[-1][1] if procs else None


def _json_object(rest: str) -> dict[str, Any] | None:
    """The record when the line (less its process prefix) is one JSON object with a message."""
    s = rest.strip()
    if not (s.startswith("{") and s.endswith("}")):
        return None
    try:
        obj = json.loads(s)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not any(isinstance(obj.get(k), str) for k in JSON_MESSAGE_KEYS):
        return None
    return obj


def _json_src(obj: dict[str, Any], name: str) -> str:
    """`file.py:N` when the record has them; else the module its logger is named for (vLLM names each
    logger after its module: `vllm.v1.worker.gpu_model_runner`)."""
    filename, lineno = obj.get("filename"), obj.get("lineno")
    if isinstance(filename, str) and filename:
        return f"{filename}:{lineno}" if isinstance(lineno, int | str) and str(lineno) else filename
    module = obj.get("module")
    if isinstance(module, str) and module:
        return module + ".py"
    if name.startswith("vllm."):
        return name.rsplit(".", 1)[-1] + ".py"
    return name or "-"


def _json_lines(no: int, prefix: str, obj: dict[str, Any], pos: int) -> list[Line] | None:
    """A JSON record as vLLM's text would show it: one line per line of its message and traceback, all
    with line number `no`. None when the record names no level."""
    level = next((str(obj[k]).upper() for k in JSON_LEVEL_KEYS if isinstance(obj.get(k), str) and obj[k]), None)
    if level is None:
        return None
    message = next(obj[k] for k in JSON_MESSAGE_KEYS if isinstance(obj.get(k), str))
    pieces = message.split("\n")
    trailers: list[str] = []
    for key in JSON_TRAILER_KEYS:
        value = obj.get(key)
        if isinstance(value, list):  # python-json-logger's exc_info_as_array / stack_info_as_array
            value = "\n".join(str(x) for x in value)
        if isinstance(value, str) and value.strip() and value != "None" and value not in trailers:
            trailers.append(value)
    for value in trailers:
        pieces += value.rstrip("\n").split("\n")
    raw_name = obj.get("name") or obj.get("logger") or obj.get("logger_name")
    name = raw_name if isinstance(raw_name, str) else ""
    proc = _proc(prefix)
    if proc is None:
        pname, pid = obj.get("vllm_process_name") or obj.get("processName"), obj.get("process")
        if isinstance(pname, str) and pname and isinstance(pid, int | str):
            proc = f"{pname}:{pid}"
    if name.startswith("uvicorn") or (not name and ACCESS_MESSAGE_RE.match(message)):
        head, kind, src = f"{prefix}{level}:{' ' * max(1, 8 - len(level))} ", "uvicorn", None
    else:
        when = next((obj[k] for k in ("asctime", "timestamp", "time") if isinstance(obj.get(k), str)), "")
        src = _json_src(obj, name)
        head, kind = f"{prefix}{level}{' ' + when if when else ''} [{src}] ", "record"
    return [Line(no, head + p, level, proc, src, p, kind, True, pos + i) for i, p in enumerate(pieces)]


def _parse_line(no: int, raw: str, pos: int, levelless: list[tuple[int, dict[str, Any]]]) -> list[Line]:
    """One line of the file as its Line (a JSON record: its lines); a JSON record without a level goes to
    `levelless`."""
    text = ANSI_RE.sub("", raw)
    if text.endswith("\r"):  # vLLM ends the lines of a multi-line record with \r\n
        text = text[:-1]
    for rx, kind in ((VLLM_RECORD_RE, "record"), (UVICORN_RE, "uvicorn")):
        m = rx.match(text)
        if m:
            return [
                Line(no, text, m.group("level"), _proc(m.group("procs")), m.groupdict().get("src"), m.group("msg"),
                     kind, pos=pos)
            ]  # fmt: skip
    m = GLOG_RE.match(text)
    if m:
        level = GLOG_LEVELS[m.group("sev")]
        return [Line(no, text, level, _proc(m.group("procs")), m.group("src"), m.group("msg"), "glog", pos=pos)]
    m = re.match(PROC_PREFIX, text)
    prefix = m.group("procs") if m else ""
    rest = text[len(prefix) :]
    obj = _json_object(rest)
    if obj is not None:
        lines = _json_lines(no, prefix, obj, pos)
        if lines is not None:
            return lines
        levelless.append((no, obj))
    return [Line(no, text, None, _proc(prefix), None, rest, pos=pos)]


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
    elif not UNTERMINATED_LAST_RE.match(ANSI_RE.sub("", raw[-1])):
        problems.append(
            f"the log ends mid-line (line {len(raw):,} has no line end: {raw[-1].strip()[:80]!r}); it was cut off, "
            "so what followed is unknown"
        )
    lines: list[Line] = []
    levelless: list[tuple[int, dict[str, Any]]] = []
    for i, t in enumerate(raw):
        lines += _parse_line(i + 1, t, len(lines), levelless)
    if levelless:
        no, obj = levelless[0]
        problems.append(
            f"line {no}: a JSON log record that names no level ({len(levelless):,} such records; its fields: "
            f"{', '.join(sorted(obj))[:160]}): a JSON log is read when every record names its level and message; "
            f"give it a level: {JSON_FORMAT_FIX}"
        )
    unknown_levels = [ln for ln in lines if ln.level is not None and ln.level not in LEVELS]
    if unknown_levels:
        ln = unknown_levels[0]
        problems.append(
            f"line {ln.no}: level {ln.level!r} is not one vLLM's logger writes ({', '.join(LEVELS)}): "
            f"{ln.text.strip()[:120]}"
        )
    if not any(ln.kind == "record" for ln in lines):
        problems.append(
            "no line in vLLM's log format (`[(Proc pid=N) ]LEVEL MM-DD HH:MM:SS [file.py:N] message`, colored or "
            "not, or one JSON object per record with its level and message): another vLLM version's wording, or "
            "not a vLLM log"
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
                f"{lo[0]}.{lo[1]}-{hi[0]}.{hi[1]} (vfleet.verify.log.rules.KNOWN_VERSIONS)"
            )
    ready = next((ln.no for ln in lines if READY_RE.search(ln.msg)), None)
    return ParsedLog(text, lines, problems, version, ready)


def as_log(log: str | ParsedLog) -> ParsedLog:
    return log if isinstance(log, ParsedLog) else parse(log)


# Events: a traceback with the record that introduces it is one event; every other line is one.


def _header(line: Line) -> str:
    """What precedes the message: the record header (all of it) for a record, the process prefix otherwise."""
    return line.text[: len(line.text) - len(line.msg)] if line.msg else line.text


def split_events(lines: list[Line]) -> list[Event]:
    events: list[Event] = []
    i, n = 0, len(lines)
    while i < n:
        ln = lines[i]
        if ln.from_json:
            # A JSON record is one line of the file: its traceback (exc_info) is in it, and nothing else is.
            j = i + 1
            while j < n and lines[j].no == ln.no:
                j += 1
            group = lines[i:j]
            if any(TRACEBACK_RE.match(x.msg.lstrip()) for x in group):
                events.append(Event(group))
            else:
                events += [Event([x]) for x in group]
            i = j
            continue
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
