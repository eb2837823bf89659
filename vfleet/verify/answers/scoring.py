"""The scoring rule of the question sets, ``normalized-match-v1`` (docs/answers.md, "The scoring rule").

An answer is right when, in the first sentence of the first non-empty line of the response, normalized:

1. one of the item's accepted forms (its answer or an alias), normalized the same way, appears as a whole
   run of words;
2. no negation (``not``, ``never``, ``isn't``...) appears that the question and that form do not contain;
3. for a numeric answer, no other number appears that the question does not contain.

Normalizing: Unicode compatibility form without accents, lower case; apostrophes dropped (``isn't`` is
``isnt``); thousands commas dropped between digits (``1,000`` is ``1000``); every other character that is
not a letter or digit, and every dot not between two digits, becomes a space; number words become digits
(``twenty-one`` and ``one hundred and twenty`` are ``21`` and ``120``; ``a hundred`` is ``100``); a number's
leading zeros and a decimal's trailing zeros go (``3.50`` is ``3.5``, ``3.0`` is ``3``); the articles
``a``, ``an`` and ``the`` go. The result is a tuple of words.
"""

from __future__ import annotations

import re
import unicodedata

from vfleet.verify.answers.questions import Item

RULE = "normalized-match-v1"

_UNIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_TEEN_WORDS = (
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
)
_TENS_WORDS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
UNITS = {w: i for i, w in enumerate(_UNIT_WORDS)}
TEENS = {w: i + 10 for i, w in enumerate(_TEEN_WORDS)}
TENS = {w: (i + 2) * 10 for i, w in enumerate(_TENS_WORDS)}
BIG = {"thousand": 1000, "million": 1_000_000}
ARTICLES = frozenset({"a", "an", "the"})
NEGATIONS = frozenset(
    {"not", "no", "never", "nor", "neither", "cannot", "cant", "isnt", "arent", "wasnt", "werent"}
    | {"dont", "doesnt", "didnt", "wont", "wouldnt", "shouldnt"}
)
#: Words that end with a dot without ending a sentence ("Mt. Everest").
ABBREVIATIONS = frozenset({"mt", "st", "dr", "mr", "mrs", "ms", "jr", "sr", "vs", "e.g", "i.e", "etc", "no"})

_APOSTROPHES = re.compile(r"['\u2019\u2018`]")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_NOT_WORD = re.compile(r"[^a-z0-9.]+")
_LONE_DOT = re.compile(r"(?<!\d)\.|\.(?!\d)")
_NUMBER = re.compile(r"^\d+(\.\d+)?$")
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


def first_line(text: str) -> str:
    """The first line of TEXT with anything but blanks on it ('' when there is none)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def first_sentence(line: str) -> str:
    """LINE up to its first sentence end: . ! or ? before a blank or the end, not a decimal point and not
    the dot of an abbreviation such as Mt. or Dr."""
    for m in _SENTENCE_END.finditer(line):
        before = line[: m.start()].split()
        word = before[-1].lower() if before else ""
        if line[m.start()] == "." and word in ABBREVIATIONS:
            continue
        return line[: m.end()]
    return line


def normalize(text: str) -> tuple[str, ...]:
    """TEXT as the tuple of normalized words the match compares (the module's docstring)."""
    decomposed = unicodedata.normalize("NFKD", text)
    plain = "".join(c for c in decomposed if not unicodedata.combining(c)).lower()
    plain = _THOUSANDS.sub("", _APOSTROPHES.sub("", plain))
    plain = _LONE_DOT.sub(" ", _NOT_WORD.sub(" ", plain))
    words = _number_words(plain.split())
    return tuple(_canonical_number(w) for w in words if w not in ARTICLES)


def is_number(word: str) -> bool:
    return bool(_NUMBER.match(word))


def _canonical_number(word: str) -> str:
    if not is_number(word):
        return word
    whole, _, frac = word.partition(".")
    frac = frac.rstrip("0")
    whole = str(int(whole))
    return f"{whole}.{frac}" if frac else whole


def _number_words(words: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(words):
        value, j = _parse_number(words, i)
        if j > i:
            out.append(str(value))
            i = j
        else:
            out.append(words[i])
            i += 1
    return out


def _parse_number(words: list[str], i: int) -> tuple[int, int]:
    """(value, end) of the longest run of number words from I; end == I where none starts there."""
    total, current, last, j = 0, 0, "", i
    while j < len(words):
        step = _number_step(words, j, last, current)
        if step is None:
            break
        kind, value = step
        if kind == "hundred":
            current = max(current, 1) * 100
        elif kind == "big":
            total, current = total + max(current, 1) * value, 0
        else:
            current += value
        last, j = kind, j + 1
    if last in ("", "a", "and"):
        return 0, i
    return total + current, j


def _number_step(words: list[str], j: int, last: str, current: int) -> tuple[str, int] | None:
    """The kind and value of words[j] as the next word of a number whose last word was of kind LAST; None
    where the number cannot go on with it."""
    word = words[j]
    after_scale = last in ("", "hundred", "big", "and")
    nxt = words[j + 1] if j + 1 < len(words) else ""
    if word in UNITS and (after_scale or (last == "tens" and UNITS[word] != 0)):
        return "unit", UNITS[word]
    if word in TEENS and after_scale:
        return "teen", TEENS[word]
    if word in TENS and after_scale:
        return "tens", TENS[word]
    if word == "hundred" and last in ("", "a", "unit", "teen") and current < 100:
        return "hundred", 100
    if word in BIG and last in ("", "a", "unit", "teen", "tens", "hundred"):
        return "big", BIG[word]
    if word == "and" and last in ("hundred", "big") and (nxt in UNITS or nxt in TEENS or nxt in TENS):
        return "and", 0
    if word == "a" and last == "" and (nxt == "hundred" or nxt in BIG):
        return "a", 0
    return None


def response_words(response: str) -> tuple[str, ...]:
    """The normalized words of the part of RESPONSE that is scored: its first sentence of its first line."""
    return normalize(first_sentence(first_line(response)))


def contains(words: tuple[str, ...], target: tuple[str, ...]) -> bool:
    """Whether TARGET appears in WORDS as a whole run of words."""
    n = len(target)
    return n > 0 and any(words[k : k + n] == target for k in range(len(words) - n + 1))


def score(item: Item, response: str) -> bool:
    """Whether RESPONSE answers ITEM right under normalized-match-v1."""
    said = response_words(response)
    asked = set(normalize(item.question))
    return any(_matches(said, normalize(form), asked) for form in item.accepted)


def _matches(said: tuple[str, ...], target: tuple[str, ...], asked: set[str]) -> bool:
    if not contains(said, target):
        return False
    allowed = asked | set(target)
    if any(w in NEGATIONS and w not in allowed for w in said):
        return False
    if len(target) == 1 and is_number(target[0]):
        return not any(is_number(w) and w not in allowed for w in said)
    return True
