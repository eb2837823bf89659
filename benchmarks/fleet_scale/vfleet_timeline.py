"""Ansible callback for benchmarks/bench_fleet_scale.py: one JSON line per play start (each serial
batch of a play is a play start of its own) and per host result, with a monotonic timestamp, to the
file VFLEET_TIMELINE_FILE. It prints nothing; the default callback still writes the run's output."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: vfleet_timeline
type: aggregate
short_description: play and result timestamps for the fleet scale benchmark
description: Writes JSON lines to the file named by VFLEET_TIMELINE_FILE.
"""


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "vfleet_timeline"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        path = os.environ.get("VFLEET_TIMELINE_FILE", "")
        self._out = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115

    def _write(self, **row: Any) -> None:
        if self._out is not None:
            self._out.write(json.dumps({"t": time.time(), **row}) + "\n")
            self._out.flush()

    def v2_playbook_on_play_start(self, play: Any) -> None:
        self._write(kind="play", name=play.get_name())

    def _result(self, result: Any, status: str) -> None:
        self._write(kind="result", host=result._host.get_name(), task=result.task_name, status=status)

    def v2_runner_on_ok(self, result: Any) -> None:
        self._result(result, "ok")

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._result(result, "failed")

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._result(result, "unreachable")

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._write(kind="end")
