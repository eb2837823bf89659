"""What one answers run writes into the report: every item's response and correctness, and the reference
text's teacher-forced log-probabilities. Both are plain JSON (``as_dict``/``from_dict``); reading one back
checks every field and names the one that is wrong."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from vfleet.errors import VfleetError
from vfleet.verify.answers.stats import wilson, z_two_sided


class RecordError(VfleetError):
    """An answers record or a log-probability record is malformed or cannot be paired with another."""


@dataclass(frozen=True)
class ItemAnswer:
    id: str
    response: str
    finish_reason: str | None
    correct: bool
    #: Why the item got no answer (HTTP error, broken connection); '' when it got one.
    error: str = ""


@dataclass(frozen=True)
class AnswerRecord:
    set_name: str
    set_version: int
    set_sha256: str
    scoring: str
    prompt_sha256: str
    model: str
    max_tokens: int
    concurrency: int
    items: tuple[ItemAnswer, ...]

    @property
    def right(self) -> int:
        return sum(1 for i in self.items if i.correct)

    @property
    def errors(self) -> tuple[ItemAnswer, ...]:
        return tuple(i for i in self.items if i.error)

    def accuracy(self, confidence: float) -> tuple[float, float, float]:
        """(accuracy, Wilson lower, Wilson upper) at the two-sided CONFIDENCE."""
        n = len(self.items)
        if n == 0:
            raise RecordError(f"answers record of {self.set_name} holds no item")
        low, high = wilson(self.right, n, z_two_sided(confidence))
        return self.right / n, low, high

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _plain(asdict(self))
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "answers record") -> AnswerRecord:
        obj = _mapping(data, where)
        items = _field(obj, "items", list, where)
        return cls(
            set_name=_field(obj, "set_name", str, where),
            set_version=_field(obj, "set_version", int, where),
            set_sha256=_field(obj, "set_sha256", str, where),
            scoring=_field(obj, "scoring", str, where),
            prompt_sha256=_field(obj, "prompt_sha256", str, where),
            model=_field(obj, "model", str, where),
            max_tokens=_field(obj, "max_tokens", int, where),
            concurrency=_field(obj, "concurrency", int, where),
            items=tuple(_item(x, f"{where}: items[{k}]") for k, x in enumerate(items)),
        )


def _item(data: Any, where: str) -> ItemAnswer:
    obj = _mapping(data, where)
    finish = obj.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise RecordError(f"{where}: finish_reason must be a string or null, not {finish!r}")
    return ItemAnswer(
        id=_field(obj, "id", str, where),
        response=_field(obj, "response", str, where),
        finish_reason=finish,
        correct=_field(obj, "correct", bool, where),
        error=_field(obj, "error", str, where),
    )


@dataclass(frozen=True)
class LogprobRecord:
    """The teacher-forced log-probabilities of the reference text: at position i, ``logprobs[i]`` is the
    log-probability of ``token_ids[i]`` given the tokens before it and ``top1[i]`` the most likely token
    there; position 0 has neither (None), as vLLM returns it."""

    reference: str
    reference_sha256: str
    model: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float | None, ...]
    top1: tuple[int | None, ...]

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        if len(self.logprobs) != n or len(self.top1) != n:
            raise RecordError(
                f"log-probability record of {self.reference}: {n} tokens but {len(self.logprobs)} log-probabilities "
                f"and {len(self.top1)} top-1 tokens"
            )
        for i, (lp, top) in enumerate(zip(self.logprobs, self.top1, strict=True)):
            if i > 0 and (lp is None or top is None or not math.isfinite(lp)):
                raise RecordError(f"log-probability record of {self.reference}: position {i} has no finite value")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _plain(asdict(self))
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "log-probability record") -> LogprobRecord:
        obj = _mapping(data, where)
        lps = _field(obj, "logprobs", list, where)
        tops = _field(obj, "top1", list, where)
        ids = _field(obj, "token_ids", list, where)
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise RecordError(f"{where}: token_ids must be a list of integers")
        return cls(
            reference=_field(obj, "reference", str, where),
            reference_sha256=_field(obj, "reference_sha256", str, where),
            model=_field(obj, "model", str, where),
            token_ids=tuple(ids),
            logprobs=tuple(None if v is None else _number(v, where) for v in lps),
            top1=tuple(None if v is None else int(v) for v in tops),
        )


def _plain(value: Any) -> Any:
    """VALUE with every tuple a list, as JSON has them."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _number(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise RecordError(f"{where}: a log-probability must be a number, not {v!r}")
    return float(v)


def _mapping(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise RecordError(f"{where}: a JSON object is expected, not {type(data).__name__}")
    return data


def _field(obj: dict[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in obj:
        raise RecordError(f"{where}: the field {key!r} is missing")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise RecordError(f"{where}: {key} must be {kind.__name__}, not {repr(value)[:80]}")
    return value
