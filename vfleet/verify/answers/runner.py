"""The HTTP side of the answers gate: the question set asked greedily of a live OpenAI-compatible server at
a bounded concurrency, and the teacher-forced log-probabilities of the reference text from vLLM's
completions endpoint (docs/answers.md, "What a run asks")."""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from vfleet.verify.answers.questions import Item, QuestionSet, load_reference
from vfleet.verify.answers.records import AnswerRecord, ItemAnswer, LogprobRecord, RecordError
from vfleet.verify.answers.scoring import RULE, score
from vfleet.verify.client import Client, HttpError

SYSTEM_PROMPT = (
    "You answer short quiz questions. Reply with the answer only: one word, one name or one number, "
    "with no explanation."
)


def prompt_sha256() -> str:
    """The sha256 of how a question is put (the system prompt and the request's fixed fields): runs are
    compared only when they asked the same way."""
    fixed = {"system": SYSTEM_PROMPT, "temperature": 0.0, "user": "<question>"}
    return hashlib.sha256(json.dumps(fixed, sort_keys=True).encode()).hexdigest()


def chat_payload(client: Client, item: Item, max_tokens: int) -> dict[str, Any]:
    return {
        "model": client.model,
        "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": item.question}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }


def ask(client: Client, item: Item, max_tokens: int) -> ItemAnswer:
    """One item asked greedily; an HTTP error, a broken connection or a malformed answer is recorded as the
    item's ``error`` (the item is then wrong, and the run incomplete)."""
    try:
        data = client.post_json("/v1/chat/completions", chat_payload(client, item, max_tokens))
        choice = data["choices"][0]
        text = (choice.get("message") or {}).get("content") or ""
        finish = choice.get("finish_reason")
    except (HttpError, httpx.HTTPError, OSError) as exc:
        return ItemAnswer(id=item.id, response="", finish_reason=None, correct=False, error=str(exc)[:300])
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        why = f"malformed chat answer ({type(exc).__name__}: {exc})"[:300]
        return ItemAnswer(id=item.id, response="", finish_reason=None, correct=False, error=why)
    if not isinstance(text, str):
        return ItemAnswer(id=item.id, response="", finish_reason=None, correct=False, error="content is not text")
    return ItemAnswer(id=item.id, response=text, finish_reason=finish, correct=score(item, text))


def run_set(client: Client, qset: QuestionSet, concurrency: int, max_tokens: int) -> AnswerRecord:
    """Every item of QSET asked of CLIENT's server, at most CONCURRENCY at a time, in the set's order."""
    if concurrency < 1:
        raise ValueError(f"concurrency {concurrency} < 1")
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        answers = tuple(pool.map(lambda item: ask(client, item, max_tokens), qset.items))
    return AnswerRecord(
        set_name=qset.name,
        set_version=qset.version,
        set_sha256=qset.sha256,
        scoring=RULE,
        prompt_sha256=prompt_sha256(),
        model=client.model or "",
        max_tokens=max_tokens,
        concurrency=concurrency,
        items=answers,
    )


def logprob_payload(client: Client, text: str) -> dict[str, Any]:
    """vLLM's completions request for the prompt's log-probabilities: ``prompt_logprobs: 1`` returns, at each
    position after the first, the prompt token's log-probability and rank and the most likely token's
    (vllm/entrypoints/openai/completion/protocol.py, CompletionResponseChoice.prompt_logprobs);
    ``return_token_ids`` adds ``prompt_token_ids``. One token is generated, greedily; it is not used."""
    return {
        "model": client.model,
        "prompt": text,
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": 1,
        "return_token_ids": True,
    }


def reference_logprobs(client: Client, reference: str) -> LogprobRecord:
    """The teacher-forced log-probabilities of the reference text named ``reference`` from CLIENT's server."""
    text, sha = load_reference(reference)
    data = client.post_json("/v1/completions", logprob_payload(client, text))
    try:
        choice = data["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise RecordError(f"the completions answer for the reference text has no choice: {str(data)[:200]}") from None
    ids, lps, top1 = parse_prompt_logprobs(choice)
    return LogprobRecord(
        reference=reference, reference_sha256=sha, model=client.model or "", token_ids=ids, logprobs=lps, top1=top1
    )


def parse_prompt_logprobs(choice: Any) -> tuple[tuple[int, ...], tuple[float | None, ...], tuple[int | None, ...]]:
    """(token ids, log-probabilities, top-1 tokens) of a completions choice with ``prompt_token_ids`` and
    ``prompt_logprobs``: a list with None at position 0 and, after it, a map from token id (a JSON string key)
    to ``{"logprob", "rank", "decoded_token"}`` that holds the prompt token and the rank-1 token."""
    if not isinstance(choice, dict):
        raise RecordError("the completions choice is not a JSON object")
    ids, entries = choice.get("prompt_token_ids"), choice.get("prompt_logprobs")
    if not isinstance(ids, list) or not isinstance(entries, list):
        raise RecordError(
            "the server returned no prompt_token_ids or prompt_logprobs: it is not a vLLM OpenAI server with "
            "prompt_logprobs and return_token_ids (vLLM >= 0.10), or the request was changed"
        )
    if len(ids) != len(entries) or not ids:
        raise RecordError(f"prompt_logprobs has {len(entries)} positions for {len(ids)} prompt tokens")
    if entries[0] is not None:
        raise RecordError("prompt_logprobs has a value at position 0, where vLLM gives none: unknown answer shape")
    lps: list[float | None] = [None]
    tops: list[int | None] = [None]
    for i in range(1, len(ids)):
        lp, top = _position(entries[i], int(ids[i]), i)
        lps.append(lp)
        tops.append(top)
    return tuple(int(t) for t in ids), tuple(lps), tuple(tops)


def _position(entry: Any, token: int, i: int) -> tuple[float, int]:
    if not isinstance(entry, dict):
        raise RecordError(f"prompt_logprobs position {i} is not a map of token ids")
    own = entry.get(str(token))
    if not isinstance(own, dict) or not isinstance(own.get("logprob"), (int, float)):
        raise RecordError(f"prompt_logprobs position {i} lacks the prompt token {token}")
    if own.get("rank") == 1:  # the prompt token is the most likely one (a tie included)
        return float(own["logprob"]), token
    tops = [int(k) for k, v in entry.items() if isinstance(v, dict) and v.get("rank") == 1]
    if len(tops) != 1:
        raise RecordError(f"prompt_logprobs position {i} has {len(tops)} other tokens of rank 1, not one")
    return float(own["logprob"]), tops[0]
