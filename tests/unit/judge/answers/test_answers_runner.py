"""The HTTP side of the answers gate (vfleet.verify.answers.runner), against a stand-in client (the unit tier
opens no socket) that answers in vLLM 0.30's shapes."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from vfleet.verify.answers.questions import load_set
from vfleet.verify.answers.records import RecordError
from vfleet.verify.answers.runner import SYSTEM_PROMPT, parse_prompt_logprobs, run_set
from vfleet.verify.client import Client, HttpError

#: A choice as vLLM 0.30 serializes it, made by its own models (vllm.entrypoints.openai.completion.protocol.
#: CompletionResponseChoice with vllm.logprobs.Logprob entries) and dumped with model_dump_json: position 0 has
#: no entry; position 1's prompt token is the most likely one; at position 2 the prompt token (9) is ranked 3rd.
VLLM_CHOICE = json.loads(
    '{"index":0,"text":"x","logprobs":null,"finish_reason":null,"stop_reason":null,"token_ids":null,'
    '"prompt_logprobs":[null,{"7":{"logprob":-0.5,"rank":1,"decoded_token":"a"}},'
    '{"9":{"logprob":-2.0,"rank":3,"decoded_token":"b"},"4":{"logprob":-0.1,"rank":1,"decoded_token":"c"}}],'
    '"prompt_token_ids":[5,7,9],"routed_experts":null}'
)


def test_prompt_logprobs_are_read_per_position() -> None:
    ids, lps, top1 = parse_prompt_logprobs(VLLM_CHOICE)
    assert ids == (5, 7, 9)
    assert lps == (None, -0.5, -2.0)
    assert top1 == (None, 7, 4)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.pop("prompt_logprobs"), "no prompt_token_ids or prompt_logprobs"),
        (lambda c: c["prompt_token_ids"].append(11), "3 positions for 4 prompt tokens"),
        (lambda c: c["prompt_logprobs"][2].pop("9"), "position 2 lacks the prompt token 9"),
        (lambda c: c["prompt_logprobs"][2]["4"].update(rank=2), "position 2 has 0 other tokens of rank 1"),
        (lambda c: c["prompt_logprobs"].__setitem__(0, {}), "value at position 0"),
    ],
)
def test_an_unexpected_shape_is_refused(change: Any, message: str) -> None:
    choice = json.loads(json.dumps(VLLM_CHOICE))
    change(choice)
    with pytest.raises(RecordError, match=message):
        parse_prompt_logprobs(choice)


class FakeServer(Client):
    """Answers each chat request with the item's answer (or not), counting requests in flight."""

    def __init__(self, wrong: set[str], fail: set[str]) -> None:
        super().__init__(base_url="http://fake", model="smol")
        self.by_question = {i.question: i for i in load_set("basic-v1").items}
        self.wrong, self.fail = wrong, fail
        self.payloads: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.in_flight = self.peak = 0

    def post_json(self, path: str, payload: dict[str, Any], timeout_s: float | None = None) -> Any:
        with self.lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self.payloads.append(payload)
        time.sleep(0.002)
        with self.lock:
            self.in_flight -= 1
        item = self.by_question[payload["messages"][1]["content"]]
        if item.id in self.fail:
            raise HttpError(path, 500, "boom")
        text = "I am not sure." if item.id in self.wrong else f"The answer is {item.answer}."
        return {"choices": [{"message": {"content": text}, "finish_reason": "stop"}]}


def test_run_set_asks_every_item_greedily_at_the_concurrency() -> None:
    qset = load_set("basic-v1")
    server = FakeServer(wrong={"cap-001", "ari-001"}, fail={"con-001"})
    rec = run_set(server, qset, concurrency=4, max_tokens=12)
    assert [a.id for a in rec.items] == [i.id for i in qset.items]
    assert 1 < server.peak <= 4
    assert all(p["temperature"] == 0.0 and p["max_tokens"] == 12 for p in server.payloads)
    assert all(p["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT} for p in server.payloads)
    by_id = {a.id: a for a in rec.items}
    assert not by_id["cap-001"].correct and by_id["cap-002"].correct
    assert by_id["con-001"].error.startswith("/v1/chat/completions: HTTP 500") and not by_id["con-001"].correct
    assert rec.right == len(qset.items) - 3 and len(rec.errors) == 1
    assert rec.set_sha256 == qset.sha256 and rec.concurrency == 4


def test_run_set_at_concurrency_one_is_serial() -> None:
    server = FakeServer(set(), set())
    run_set(server, load_set("basic-v1"), concurrency=1, max_tokens=8)
    assert server.peak == 1
