"""A small progress display for long steps: a spinner with elapsed time on a terminal, a line every
15 s otherwise (CI logs)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


class Step:
    FRAMES = "|/-\\"

    def __init__(self, label: str, stream: TextIO | None = None, expect_s: float | None = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.expect_s = expect_s
        self.t0 = time.monotonic()
        self.note = ""
        self._stop = threading.Event()
        self._tty = self.stream.isatty()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _line(self, i: int) -> str:
        el = time.monotonic() - self.t0
        exp = f" of ~{self.expect_s:.0f} s" if self.expect_s else ""
        note = f" {self.note}" if self.note else ""
        return f"{self.FRAMES[i % 4]} {self.label}: {el:.0f} s{exp}{note}"

    def _loop(self) -> None:
        i = 0
        last = 0.0
        while not self._stop.wait(0.25 if self._tty else 1.0):
            i += 1
            if self._tty:
                self.stream.write("\r\033[K" + self._line(i))
                self.stream.flush()
            elif time.monotonic() - last >= 15:
                last = time.monotonic()
                self.stream.write(self._line(i) + "\n")
                self.stream.flush()

    def start(self) -> Step:
        self.stream.write(f"> {self.label} ...\n" if not self._tty else "")
        self._thread.start()
        return self

    def finish(self, ok: bool = True, msg: str = "") -> float:
        self._stop.set()
        self._thread.join()
        el = time.monotonic() - self.t0
        mark = "ok" if ok else "FAILED"
        self.stream.write(
            ("\r\033[K" if self._tty else "") + f"{mark:>6} {self.label} ({el:.0f} s){' ' + msg if msg else ''}\n"
        )
        self.stream.flush()
        return el


@contextmanager
def step(label: str, expect_s: float | None = None) -> Iterator[Step]:
    s = Step(label, expect_s=expect_s).start()
    try:
        yield s
    except BaseException:
        s.finish(ok=False)
        raise
    s.finish()
