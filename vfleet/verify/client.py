"""A minimal OpenAI-compatible HTTP client over httpx (the one HTTP client of vfleet; vLLM brings it),
for the smoke tests, the A/B and the load generator."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from vfleet.verify.metrics import Metrics

UNAUTHORIZED_HINT = (
    "the server wants an API key: export VLLM_API_KEY, or pass --env-file FILE (the node's docker env file) "
    "or --api-key-env VAR"
)


#: One client for the process: thread-safe, with a connection pool. A client per request would build
#: an SSL context each time (certifi's bundle), about as much CPU as a short request itself; under the
#: load levels that overhead squeezed the difference between two servers (tests/integration/judge/test_ab.py).
HTTP = httpx.Client()


def status_of(url: str, timeout_s: float = 5.0) -> int:
    """HTTP status of GET URL; 0 when nothing answers (refused, timed out, reset)."""
    try:
        return HTTP.get(url, timeout=timeout_s).status_code
    except (httpx.HTTPError, OSError):
        return 0


class HttpError(Exception):
    def __init__(self, url: str, status: int, body: str) -> None:
        hint = f" ({UNAUTHORIZED_HINT})" if status == 401 else ""
        super().__init__(f"{url}: HTTP {status}: {body[:300]}{hint}")
        self.status = status
        self.body = body


@dataclass
class Client:
    base_url: str
    api_key: str | None = None
    model: str | None = None
    timeout_s: float = 120.0

    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def get(self, path: str, timeout_s: float | None = None) -> tuple[int, str]:
        """(status, body) of GET PATH; a server that does not answer raises httpx.TransportError."""
        resp = HTTP.get(self.base_url.rstrip("/") + path, headers=self._headers(), timeout=timeout_s or self.timeout_s)
        return resp.status_code, resp.text

    def get_json(self, path: str) -> Any:
        status, body = self.get(path)
        if status != 200:
            raise HttpError(path, status, body)
        return json.loads(body)

    def post_json(self, path: str, payload: dict[str, Any], timeout_s: float | None = None) -> Any:
        url = self.base_url.rstrip("/") + path
        resp = HTTP.post(url, json=payload, headers=self._headers(), timeout=timeout_s or self.timeout_s)
        if resp.status_code >= 400:
            raise HttpError(path, resp.status_code, resp.text)
        return resp.json()

    def metrics(self) -> Metrics:
        status, body = self.get("/metrics")
        if status != 200:
            raise HttpError("/metrics", status, body)
        return Metrics(body)

    def count_tokens(self, prompt: str) -> int:
        data = self.post_json("/tokenize", {"model": self.model, "prompt": prompt, "add_special_tokens": False})
        return int(data["count"])

    def tokenize(self, prompt: str, add_special_tokens: bool = True) -> list[int]:
        """The token ids of ``prompt`` as a completion request sees it (special tokens added, by default)."""
        data = self.post_json(
            "/tokenize", {"model": self.model, "prompt": prompt, "add_special_tokens": add_special_tokens}
        )
        return [int(t) for t in data["tokens"]]

    def complete(self, prompt: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
        """Greedy /v1/completions; returns the first choice plus usage."""
        payload: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            **extra,
        }
        data = self.post_json("/v1/completions", payload)
        choice = dict(data["choices"][0])
        choice["usage"] = data.get("usage") or {}
        return choice

    def chat(self, content: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "temperature": 0.0,
            **extra,
        }
        data = self.post_json("/v1/chat/completions", payload)
        choice = data["choices"][0]
        return {
            "text": (choice.get("message") or {}).get("content") or "",
            "finish_reason": choice.get("finish_reason"),
            "usage": data.get("usage") or {},
        }


@dataclass
class StreamResult:
    """One streamed completion as a user sees it. ``ok`` only when the stream ran to its end: HTTP 200,
    no error event, a chunk with a ``finish_reason``, the usage chunk and ``data: [DONE]``. The
    timings are those of vLLM's benchmark (vllm/benchmarks/lib/endpoint_request_func.py): TTFT at the
    first chunk with choices, latency at the last chunk with choices."""

    ok: bool
    name: str = ""
    error: str = ""
    text: str = ""
    output_tokens: int = 0
    ttft_s: float | None = None
    latency_s: float = 0.0
    finish_reason: str | None = None
    token_times: list[float] = field(default_factory=list)
    chunks: int = 0
    done: bool = False
    usage: bool = False
    end_s: float = 0.0

    @property
    def tpot_s(self) -> float | None:
        """vLLM's benchmark TPOT of this request: (latency - TTFT) / (output tokens - 1)."""
        if self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1)


def stream_completion(
    client: Client, prompt: str, max_tokens: int, timeout_s: float = 300.0, name: str = ""
) -> StreamResult:
    """A streamed greedy completion with a fixed output length (ignore_eos), timed per chunk.

    A stream that breaks off (no ``[DONE]``, no ``finish_reason``, no usage chunk), an error event in
    the stream (vLLM sends ``data: {"error": ...}`` when a request fails after its 200 headers), a
    non-200 answer or a broken connection leaves ``ok`` False with ``error`` saying which."""
    payload = {
        "model": client.model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    url = client.base_url.rstrip("/") + "/v1/completions"
    res = StreamResult(ok=False, name=name)
    t0 = time.perf_counter()
    try:
        with HTTP.stream("POST", url, json=payload, headers=client._headers(), timeout=timeout_s) as resp:
            if resp.status_code != 200:
                res.error = f"HTTP {resp.status_code}: {resp.read().decode(errors='replace')[:200]}"
                return _finish(res, t0)
            for raw in resp.iter_lines():
                line = raw.strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    res.done = True
                    break
                chunk = json.loads(data)
                if not isinstance(chunk, dict):
                    raise ValueError(f"stream chunk is not a JSON object: {data[:200]}")
                if chunk.get("error"):
                    err = chunk["error"]
                    detail = err.get("message") if isinstance(err, dict) else err
                    code = err.get("code") if isinstance(err, dict) else None
                    res.error = f"error event in the stream after {res.chunks} chunks: {code or ''} {detail}".strip()
                    break
                if chunk.get("usage"):
                    res.usage = True
                    res.output_tokens = int(chunk["usage"].get("completion_tokens") or 0)
                choices = chunk.get("choices") or []
                if choices:
                    # vLLM sends a chunk per step with new tokens, even when their text is still empty
                    # (a byte-level tokenizer holds back incomplete UTF-8), so time every chunk.
                    now = time.perf_counter() - t0
                    if res.ttft_s is None:
                        res.ttft_s = now
                    res.latency_s = now
                    res.token_times.append(now)
                    res.chunks += 1
                for choice in choices:
                    res.text += choice.get("text") or ""
                    if choice.get("finish_reason"):
                        res.finish_reason = choice["finish_reason"]
    except (httpx.HTTPError, OSError, ValueError) as exc:
        res.error = f"{type(exc).__name__} after {res.chunks} chunks: {exc}"
    return _finish(res, t0)


def _finish(res: StreamResult, t0: float) -> StreamResult:
    res.end_s = time.perf_counter() - t0
    if not res.error:
        missing = [
            what
            for what, seen in (("a finish_reason", res.finish_reason), ("the usage chunk", res.usage),
                               ("data: [DONE]", res.done))
            if not seen
        ]  # fmt: skip
        if missing:
            res.error = f"the stream ended after {res.chunks} chunks without {', '.join(missing)}"
    res.ok = not res.error
    return res
