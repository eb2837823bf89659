"""A bounded load generator: steady streaming completions through the fleet's balancer, every request
counted. It is what the fleet lifecycle test and benchmark hold a rollout to: no request may fail, be
cut short or come back empty while nodes are drained, swapped, verified and put back.

Each worker sends one streaming `/v1/completions` request at a time (a fresh prompt, a fixed number
of output tokens with `ignore_eos`), reads the stream to its end, and records the outcome:

* ``completed``: HTTP 200, every chunk parsed, a ``finish_reason`` and the closing ``[DONE]``, and
  the expected number of tokens' worth of text chunks;
* ``failed``: a connection error, a timeout or an HTTP status other than 200;
* ``truncated``: the stream ended (or broke) before ``[DONE]`` or before its ``finish_reason``;
* ``empty``: a complete stream without any text.

The balancer names the node that served each answer (HAProxy's ``X-Vfleet-Backend`` header), so the
records also show when each node was in and out of the pool. `mark(step)` labels the requests sent
from then on. Traffic goes only to the address given (the test network's balancer).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

OUTCOMES = ("completed", "failed", "truncated", "empty")


@dataclass
class Record:
    step: str
    worker: int
    seq: int
    start: float
    end: float = 0.0
    outcome: str = ""
    backend: str = ""
    chunks: int = 0
    detail: str = ""


@dataclass
class LoadGen:
    url: str
    model: str
    api_key: str | None = None
    concurrency: int = 2
    max_tokens: int = 12
    pause_s: float = 0.2
    timeout_s: float = 120.0
    records: list[Record] = field(default_factory=list)
    _step: str = "start"
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> LoadGen:
        for w in range(self.concurrency):
            t = threading.Thread(target=self._worker, args=(w,), name=f"loadgen-{w}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def mark(self, step: str) -> None:
        """Requests sent from now on belong to STEP."""
        self._step = step

    def stop(self) -> None:
        """Stop sending; wait for the requests in flight to end (each is bounded by timeout_s)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=self.timeout_s + 10)

    def __enter__(self) -> LoadGen:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _worker(self, w: int) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        seq = 0
        with httpx.Client(base_url=self.url, headers=headers, timeout=self.timeout_s) as client:
            while not self._stop.is_set():
                rec = Record(step=self._step, worker=w, seq=seq, start=time.time())
                self._one(client, rec)
                rec.end = time.time()
                with self._lock:
                    self.records.append(rec)
                seq += 1
                self._stop.wait(self.pause_s)

    def _one(self, client: httpx.Client, rec: Record) -> None:
        body = {
            "model": self.model,
            "prompt": f"load request {rec.worker}-{rec.seq} at {rec.start:.3f}: tell a short story",
            "max_tokens": self.max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
        done = finished = False
        text = ""
        try:
            with client.stream("POST", "/v1/completions", json=body) as resp:
                rec.backend = resp.headers.get("x-vfleet-backend", "")
                if resp.status_code != 200:
                    rec.outcome = "failed"
                    rec.detail = f"HTTP {resp.status_code}: {resp.read().decode(errors='replace')[:200]}"
                    return
                for line in resp.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    data = line[len("data: ") :]
                    if data == "[DONE]":
                        done = True
                        continue
                    chunk = json.loads(data)
                    if "error" in chunk:
                        rec.outcome = "failed"
                        rec.detail = f"error chunk: {str(chunk['error'])[:200]}"
                        return
                    for choice in chunk.get("choices", []):
                        text += choice.get("text") or ""
                        rec.chunks += 1
                        finished = finished or choice.get("finish_reason") is not None
        except (httpx.HTTPError, ValueError) as exc:
            # A stream that broke after it started is a truncation; one that never answered, a failure.
            rec.outcome = "truncated" if rec.chunks else "failed"
            rec.detail = f"{type(exc).__name__}: {str(exc)[:200]}"
            return
        if not (done and finished):
            rec.outcome = "truncated"
            rec.detail = f"stream ended without {'[DONE]' if not done else 'a finish_reason'} after {rec.chunks} chunks"
        elif not text:
            rec.outcome = "empty"
            rec.detail = f"{rec.chunks} chunks, no text"
        else:
            rec.outcome = "completed"

    # -- figures --------------------------------------------------------------------------------

    def counts(self, step: str | None = None) -> dict[str, int]:
        with self._lock:
            rows = [r for r in self.records if step is None or r.step == step]
        c = Counter(r.outcome for r in rows)
        return {"sent": len(rows), **{k: c.get(k, 0) for k in OUTCOMES}}

    def problems(self, limit: int = 10) -> list[str]:
        with self._lock:
            bad = [r for r in self.records if r.outcome != "completed"]
        return [f"{r.step} w{r.worker}#{r.seq} via {r.backend or '?'}: {r.outcome}: {r.detail}" for r in bad[:limit]]

    def steps(self) -> list[str]:
        with self._lock:
            return list(dict.fromkeys(r.step for r in self.records))

    def summary(self) -> dict[str, Any]:
        return {
            "total": self.counts(),
            "steps": {s: self.counts(s) for s in self.steps()},
            "by_backend": dict(Counter(r.backend for r in self.records)),
            "problems": self.problems(),
        }

    def dump(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(r) for r in self.records]
