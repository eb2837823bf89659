"""Progress of long steps, drawn by tqdm: on a terminal a live line with the elapsed (and expected)
time, otherwise (CI logs) a plain line every 15 s. tqdm redraws only when told, so a small ticker
tells it while the step runs.

tqdm is imported when a step starts: vLLM brings it into every image with vLLM, but the GPU stand-in
base carries only what vfleet's CLI needs to load.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

#: tqdm's line: the step, the seconds so far (the count it shows), the expected seconds, the note.
FORMAT = "{desc}: {n:.0f} s%s{postfix}"


class Step:
    #: seconds between redraws on a terminal, and between lines elsewhere
    TTY_EVERY_S = 0.25
    LOG_EVERY_S = 15.0

    def __init__(
        self, label: str, stream: TextIO | None = None, expect_s: float | None = None, log_every_s: float | None = None
    ) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.expect_s = expect_s
        self.t0 = time.monotonic()
        #: shown after the time (e.g. the last test that finished)
        self.note = ""
        self._tty = self.stream.isatty()
        self._every = self.TTY_EVERY_S if self._tty else (log_every_s or self.LOG_EVERY_S)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._bar: Any = None

    def _format(self) -> str:
        # The expected time goes into the format, not into tqdm's total: a step may outrun its estimate.
        return FORMAT % (f" of ~{self.expect_s:.0f} s" if self.expect_s else "")

    def line(self) -> str:
        """The progress line as it stands now."""
        from tqdm import tqdm  # noqa: PLC0415

        el = time.monotonic() - self.t0
        # total 0: no known total (tqdm's stubs do not take None there, tqdm treats both alike).
        return str(
            tqdm.format_meter(el, 0, el, prefix=self.label, bar_format=self._format(), postfix=self.note or None)
        )

    def _tick(self) -> None:
        while not self._stop.wait(self._every):
            if self._bar is not None:
                self._bar.n = time.monotonic() - self.t0
                self._bar.set_postfix_str(self.note, refresh=False)
                self._bar.refresh()
            else:
                self.stream.write(self.line() + "\n")
                self.stream.flush()

    def start(self) -> Step:
        from tqdm import tqdm  # noqa: PLC0415

        if self._tty:
            self._bar = tqdm(
                desc=self.label,
                bar_format=self._format(),
                file=self.stream,
                leave=False,
                dynamic_ncols=True,
                mininterval=0,
            )
        else:
            self.stream.write(f"> {self.label} ...\n")
            self.stream.flush()
        self._thread.start()
        return self

    def finish(self, ok: bool = True, msg: str = "") -> float:
        self._stop.set()
        self._thread.join()
        if self._bar is not None:
            self._bar.close()
        el = time.monotonic() - self.t0
        mark = "ok" if ok else "FAILED"
        self.stream.write(f"{mark:>6} {self.label} ({el:.0f} s){' ' + msg if msg else ''}\n")
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
