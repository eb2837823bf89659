"""The question sets and the reference text, as data in this room (docs/answers.md).

A set is a JSON Lines file ``sets/<name>.jsonl``: its first line is the header (``set``, ``version``,
``scoring``, ``about``), every other line one item (``id``, ``category``, ``question``, ``answer``,
``aliases``). The set is named by the sha256 of the file's bytes: two runs are paired only on the same sha.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfleet.errors import VfleetError

ROOM = Path(__file__).resolve().parent
SETS = ROOM / "sets"
PROSE_DIR = ROOM / "reference"
#: The scoring rule the sets of this version of vfleet are written for (vfleet.verify.answers.scoring).
SCORING = "normalized-match-v1"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")
ITEM_KEYS = {"id", "category", "question", "answer", "aliases"}
HEADER_KEYS = {"set", "version", "scoring", "about"}


class SetError(VfleetError):
    """A question set or reference text is missing or malformed; the message names the file and line."""


@dataclass(frozen=True)
class Item:
    id: str
    category: str
    question: str
    answer: str
    aliases: tuple[str, ...] = ()

    @property
    def accepted(self) -> tuple[str, ...]:
        """The canonical answer first, then its aliases."""
        return (self.answer, *self.aliases)


@dataclass(frozen=True)
class QuestionSet:
    name: str
    version: int
    scoring: str
    sha256: str
    items: tuple[Item, ...]
    path: str = ""

    def by_id(self) -> dict[str, Item]:
        return {item.id: item for item in self.items}


def set_path(name: str) -> Path:
    """The file of the set NAME (``basic-v1``), refusing a name that is not a plain file name."""
    if not NAME_RE.match(name):
        raise SetError(f"question set name {name!r} is not a plain name such as basic-v1 (a file under {SETS})")
    path = SETS / f"{name}.jsonl"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SETS.glob("*.jsonl"))) or "none"
        raise SetError(f"question set {name!r}: no file {path}; the sets are: {known}")
    return path


def load_set(name: str) -> QuestionSet:
    """The set NAME from this room's sets/ folder."""
    return parse_set(set_path(name))


def parse_set(path: Path) -> QuestionSet:
    """Read and check a set file: its header, every item's keys and types, unique ids and questions."""
    raw = path.read_bytes()
    lines = raw.decode("utf-8").splitlines()
    if not lines:
        raise SetError(f"{path}: empty; the first line is the header {sorted(HEADER_KEYS)}")
    header = _header(path, _json_line(path, 1, lines[0]))
    items = tuple(
        _item(path, n, _json_line(path, n, line)) for n, line in enumerate(lines[1:], start=2) if line.strip()
    )
    _unique(path, items)
    return QuestionSet(
        name=str(header["set"]),
        version=int(header["version"]),
        scoring=str(header["scoring"]),
        sha256=hashlib.sha256(raw).hexdigest(),
        items=items,
        path=str(path),
    )


def _json_line(path: Path, n: int, line: str) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise SetError(f"{path}:{n}: not JSON ({exc.msg}); every line is one JSON object") from None
    if not isinstance(obj, dict):
        raise SetError(f"{path}:{n}: a JSON object is expected, not {type(obj).__name__}")
    return obj


def _header(path: Path, obj: dict[str, Any]) -> dict[str, Any]:
    if set(obj) != HEADER_KEYS:
        raise SetError(f"{path}:1: the header has the keys {sorted(HEADER_KEYS)}, not {sorted(obj)}")
    if not isinstance(obj["version"], int) or obj["version"] < 1:
        raise SetError(f"{path}:1: version must be a positive integer, not {obj['version']!r}")
    if obj["scoring"] != SCORING:
        raise SetError(f"{path}:1: scoring {obj['scoring']!r} is not the rule this vfleet applies ({SCORING})")
    return obj


def _item(path: Path, n: int, obj: dict[str, Any]) -> Item:
    if set(obj) != ITEM_KEYS:
        raise SetError(f"{path}:{n}: an item has the keys {sorted(ITEM_KEYS)}, not {sorted(obj)}")
    for key in ("id", "category", "question", "answer"):
        if not isinstance(obj[key], str) or not obj[key].strip():
            raise SetError(f"{path}:{n}: {key} must be a non-empty string, not {obj[key]!r}")
    aliases = obj["aliases"]
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
        raise SetError(f"{path}:{n}: aliases must be a list of non-empty strings, not {aliases!r}")
    return Item(obj["id"], obj["category"], obj["question"], obj["answer"], tuple(aliases))


def _unique(path: Path, items: tuple[Item, ...]) -> None:
    for what, values in (("id", [i.id for i in items]), ("question", [i.question.strip().lower() for i in items])):
        seen: set[str] = set()
        for item, value in zip(items, values, strict=True):
            if value in seen:
                raise SetError(f"{path}: {what} {value!r} appears twice (item {item.id}); each is unique")
            seen.add(value)


def load_reference(name: str = "reference-v1") -> tuple[str, str]:
    """(text, sha256 of its bytes) of the reference text NAME in this room's reference/ folder."""
    if not NAME_RE.match(name):
        raise SetError(f"reference text name {name!r} is not a plain name such as reference-v1")
    path = PROSE_DIR / f"{name}.txt"
    if not path.is_file():
        raise SetError(f"reference text {name!r}: no file {path}")
    raw = path.read_bytes()
    return raw.decode("utf-8"), hashlib.sha256(raw).hexdigest()
