"""The seed-003 integrity probe against a live server: is what the prefix cache holds still what was computed?

Integrity probe (seed 003, vLLM #57477): a prefill kernel that wrote to the wrong KV block offset
silently corrupted a long-lived prefix-cached prompt; the damage stayed as long as the prompt stayed
cached, while the same prompt sent with a `cache_salt` (fresh blocks) answered correctly. The probe:

1. caches a long registry-style prompt (``prompt_blocks`` KV blocks) by asking each question once;
2. sends unique-prefix filler prompts until ``pool_cycles`` times the KV pool has gone through the
   allocator, sized from `vllm:cache_config_info` (num_gpu_blocks x block_size), touching the cached
   prompt between fillers so it stays cached (as a serving system prompt does) while the rest of the
   pool cycles around it;
3. asks every question three times, one request at a time: with a unique `cache_salt` (computed on
   fresh blocks), on the cached prompt, and with another unique `cache_salt`, and compares what the
   model computed: the generated token ids, and the log-probabilities of the top ``top_logprobs``
   alternatives at every position whose context is the same in both answers (the first generated
   token's always; later ones while the ids agree, up to and including the first differing one). The
   largest difference of two answers is their gap. Each cached request must hit the prefix cache for
   its whole cached prefix (the prompt's full blocks) and each salted one must hit nothing: per
   request, `usage.prompt_tokens_details.cached_tokens` when the server reports it
   (`--enable-prompt-tokens-details`), else the delta of `vllm:prefix_cache_hits` around the request.

Its rule, the judgement of the answers it collects, is vfleet.verify.probe.integrity_rule.
"""

from __future__ import annotations

import math
import random
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from vfleet.profiles import IntegritySpec
from vfleet.verify.client import Client
from vfleet.verify.metrics import prefix_hits
from vfleet.verify.probe.cache import fit_tokens, registry_text, rng_copy
from vfleet.verify.probe.integrity_rule import (
    Answer,
    answer_record,
    describe_mismatch,
    describe_too_noisy,
    judge_with_rounds,
    parse_answer,
)


@dataclass
class IntegrityResult:
    num_gpu_blocks: int
    block_size: int
    pool_tokens: int
    prompt_tokens: int
    filler_tokens: int
    fillers: int
    filler_tokens_total: int
    pool_cycles: float
    questions: int
    hit_tokens_during_compare: float
    logprob_tolerance: float = 0.0
    top_logprobs: int = 0
    max_logprob_gap: float = 0.0
    hit_source: str = ""
    hits: list[dict[str, Any]] = field(default_factory=list)
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    #: the noise rule (judge_probe): its parameters, the probe's floor and allowance. None in a report
    #: written before the rule (such a report keeps these keys out: vfleet.verify.record.model)
    noise_factor: float | None = None
    noise_bound: float | None = None
    noise_floor: float | None = None
    allowance: float | None = None
    #: confirmation rounds the probe took (each: one more salted pair for every question)
    noise_rounds: int | None = None
    #: per question: verdict, its salted answers' gap (noise), the gap to the nearest salted answer
    questions_judged: list[dict[str, Any]] | None = None
    #: questions whose salted answers differed beyond noise_bound (not judged)
    too_noisy: list[dict[str, Any]] | None = None
    #: raw answers per question (cached, salted: token ids and top logprobs)
    records: list[dict[str, Any]] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def hit_problems(self) -> list[str]:
        """Cached requests that did not hit their whole cached prefix; salted ones that hit anything."""
        out: list[str] = []
        for h in self.hits:
            if h["cached_hit"] < h["cached_expected"]:
                out.append(
                    f"{h['question']}: the cached request hit {h['cached_hit']} tokens of its "
                    f"{h['cached_prefix']}-token cached prefix (expected {h['cached_expected']}: every full "
                    f"{self.block_size}-token block of it)"
                )
            if h["salted_hit"] != 0:
                out.append(
                    f"{h['question']}: the cache_salt reference hit {h['salted_hit']} tokens of the prefix cache "
                    "(expected 0: it must be computed on fresh blocks)"
                )
        return out

    def mismatch_lines(self) -> list[str]:
        return [describe_mismatch(m, self.logprob_tolerance) for m in self.mismatches]

    def too_noisy_lines(self) -> list[str]:
        return [describe_too_noisy(q, self.noise_bound or 0.0) for q in self.too_noisy or []]

    def judgement_problems(self, production: bool) -> list[str]:
        """Why the probe's answers fail the gate (empty: they pass). A question too noisy to judge fails a
        production profile (the gate fails closed: what it could not judge is no pass); a profile that is
        not production passes on the questions it could judge, and fails when it could judge none."""
        out: list[str] = []
        too_noisy = self.too_noisy or []
        if too_noisy and (production or len(too_noisy) >= self.questions):
            why = "which fails a production profile" if production else "so no question could be judged"
            out.append(
                f"{len(too_noisy)} of {self.questions} questions are too noisy to judge ({why}): "
                + " | ".join(self.too_noisy_lines())
                + f". Expected the two cache_salt answers of a question to agree within integrity.noise_bound "
                f"{self.noise_bound or 0.0:g} nats; verify the node out of the pool (no client traffic beside the "
                "probe) or serve it with VLLM_BATCH_INVARIANT=1"
            )
        if self.mismatches:
            out.append(
                f"expected each cached answer to stay within the noise of its two cache_salt answers (token ids, "
                f"and logprobs of the top {self.top_logprobs} alternatives within {self.noise_factor or 0.0:g} x the "
                f"noise floor {self.noise_floor or 0.0:.3g} + tolerance {self.logprob_tolerance:g} = "
                f"{self.allowance or 0.0:.3g} nats) "
                f"after {self.fillers} fillers cycled the {self.num_gpu_blocks}-block pool {self.pool_cycles}x; "
                f"{len(self.mismatches)} of {self.questions} differ: " + " | ".join(self.mismatch_lines())
            )
        return out


#: what figures.integrity.questions_judged keeps of each question's judgement
SUMMARY_KEYS = (
    "question",
    "verdict",
    "noise",
    "noise_flip",
    "max_gap",
    "first_diff_position",
    "salted_answers",
    "cached_answers",
    "first_ask_gap",
)


class ProbeSetupError(Exception):
    """The probe cannot be run as specified (the message says why and what to change)."""


def _check_count(fillers: int, filler_tokens: int, pool_tokens: int, spec: IntegritySpec) -> None:
    if fillers > spec.max_fillers:
        raise ProbeSetupError(
            f"cycling {spec.pool_cycles}x a pool of {pool_tokens:,} tokens needs {fillers} fillers of "
            f"{filler_tokens:,} tokens (bounded by max_model_len); integrity.max_fillers is {spec.max_fillers}"
        )


def plan_fillers(pool_tokens: int, block: int, max_model_len: int, spec: IntegritySpec) -> tuple[int, int]:
    """(tokens per filler, number of fillers) to push ``pool_cycles`` x the pool through the allocator:
    fillers at least 4 blocks long, long enough to stay within max_fillers, at most max_model_len and a
    quarter of the pool (so several fit at once)."""
    need = math.ceil(spec.pool_cycles * pool_tokens)
    target = max(4 * block, math.ceil(need / spec.max_fillers))
    target = min(target, max_model_len - 8, max(block, pool_tokens // 4))
    count = math.ceil(need / target)
    _check_count(count, target, pool_tokens, spec)
    return target, count


def integrity_probe(client: Client, spec: IntegritySpec, max_model_len: int, tag: str) -> IntegrityResult:
    blocks, block = client.metrics().cache_pool()
    pool_tokens = blocks * block
    rng = random.Random(tag)
    prompt_target = spec.prompt_blocks * block
    if prompt_target + 64 + spec.answer_tokens > max_model_len:
        raise ProbeSetupError(
            f"integrity.prompt_blocks {spec.prompt_blocks} x block_size {block} does not fit max_model_len "
            f"{max_model_len}; lower prompt_blocks"
        )
    base = rng_copy(rng)
    prompt, prompt_tokens = fit_tokens(client, lambda k: registry_text(rng_copy(base), k), prompt_target)
    questions = [
        f"\nQuestion {q}: which owner and value does entry {rng.randrange(50):04d} have?\nAnswer:"
        for q in range(spec.questions)
    ]

    filler_target, _ = plan_fillers(pool_tokens, block, max_model_len, spec)
    fbase = random.Random(f"{tag}-filler")
    filler_body, _ = fit_tokens(client, lambda k: registry_text(rng_copy(fbase), k), filler_target - 24)
    filler_tokens = client.count_tokens(f"[filler {tag} 0 {uuid.uuid4().hex}]\n" + filler_body)
    fillers = math.ceil(math.ceil(spec.pool_cycles * pool_tokens) / filler_tokens)
    _check_count(fillers, filler_tokens, pool_tokens, spec)

    def ask(q: str, salt: str | None = None) -> str:
        extra: dict[str, Any] = {"ignore_eos": True}
        if salt is not None:
            extra["cache_salt"] = salt
        return str(client.complete(prompt + q, max_tokens=spec.answer_tokens, **extra)["text"])

    def ask_computed(q: str, salt: str | None = None) -> Answer:
        """Ask with the logprobs of the top alternatives and token ids, measuring this request's
        prefix-cache hits (the probe's requests run one at a time here)."""
        extra: dict[str, Any] = {
            "ignore_eos": True,
            "logprobs": spec.top_logprobs,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        if salt is not None:
            extra["cache_salt"] = salt
        _, h0 = prefix_hits(client.metrics())
        choice = client.complete(prompt + q, max_tokens=spec.answer_tokens, **extra)
        _, h1 = prefix_hits(client.metrics())
        return parse_answer(choice, h1 - h0)

    # 1. cache the prompt
    for q in questions:
        ask(q)

    # 2. cycle the pool around it; the unique leading tag means no filler shares a block with another
    def filler(i: int) -> None:
        client.complete(f"[filler {tag} {i} {uuid.uuid4().hex}]\n" + filler_body, max_tokens=1)

    width = max(1, min(4, blocks // max(1, 2 * math.ceil(filler_tokens / block))))
    done = 0
    with ThreadPoolExecutor(max_workers=width) as pool:
        while done < fillers:
            batch = list(range(done, min(fillers, done + width)))
            list(pool.map(filler, batch))
            done += len(batch)
            ask(questions[done % len(questions)])  # keep the prompt hot, as a system prompt is
    # 3. each question: a salted answer (fresh blocks), the cached one, a second salted one, one at a time
    prompt_ids = client.tokenize(prompt)
    hits: list[dict[str, Any]] = []
    sources: set[str] = set()
    asked: list[tuple[Answer, list[Answer]]] = []

    def salted_pair(i: int, r: int) -> list[Answer]:
        pair = [ask_computed(questions[i], salt=f"vf-{tag}-{i}-{r}{x}-{uuid.uuid4().hex[:12]}") for x in "ab"]
        sources.update(a.hit_source for a in pair)
        return pair

    for i, q in enumerate(questions):
        salted_a = ask_computed(q, salt=f"vf-{tag}-{i}-0a-{uuid.uuid4().hex[:12]}")
        cached = ask_computed(q)
        salted_b = ask_computed(q, salt=f"vf-{tag}-{i}-0b-{uuid.uuid4().hex[:12]}")
        asked.append((cached, [salted_a, salted_b]))
        sources |= {cached.hit_source, salted_a.hit_source, salted_b.hit_source}
        shared = _common_prefix(cached.prompt_ids or prompt_ids, prompt_ids)
        whole = min(shared, len(cached.prompt_ids or prompt_ids) - 1) // block * block
        hits.append(
            {
                "question": f"question {i}",
                "prompt_tokens": len(cached.prompt_ids),
                "cached_prefix": shared,
                "cached_expected": whole,
                "cached_hit": cached.cached_tokens,
                "salted_hit": max(salted_a.cached_tokens, salted_b.cached_tokens),
            }
        )

    def more(i: int, r: int) -> list[Answer]:
        pair = salted_pair(i, r)
        hits[i]["salted_hit"] = max(hits[i]["salted_hit"], *(a.cached_tokens for a in pair))
        return pair

    def again(i: int, r: int) -> Answer | None:
        """The cached prompt asked again; it counts only where it hit the same whole cached prefix."""
        a = ask_computed(questions[i])
        sources.add(a.hit_source)
        hits[i].setdefault("repeat_hits", []).append(a.cached_tokens)
        return a if a.cached_tokens >= hits[i]["cached_expected"] else None

    judged, rounds = judge_with_rounds(asked, spec, more, again)
    named = []
    for q, j in zip(questions, judged["questions"], strict=True):
        named.append({"question": f"question {j['index']} ({q.strip()!r})", **j})
    return IntegrityResult(
        num_gpu_blocks=blocks,
        block_size=block,
        pool_tokens=pool_tokens,
        prompt_tokens=prompt_tokens,
        filler_tokens=filler_tokens,
        fillers=fillers,
        filler_tokens_total=fillers * filler_tokens,
        pool_cycles=round(fillers * filler_tokens / pool_tokens, 2),
        questions=len(questions),
        hit_tokens_during_compare=float(sum(h["cached_hit"] for h in hits)),
        logprob_tolerance=spec.logprob_tolerance,
        top_logprobs=spec.top_logprobs,
        max_logprob_gap=max((j["max_gap"] for j in named), default=0.0),
        hit_source="+".join(sorted(sources)),
        hits=hits,
        mismatches=[j for j in named if j["verdict"] == "mismatch"],
        noise_factor=spec.noise_factor,
        noise_bound=spec.noise_bound,
        noise_floor=judged["floor"],
        allowance=judged["allowance"],
        questions_judged=[{k: j[k] for k in SUMMARY_KEYS} for j in named],
        too_noisy=[j for j in named if j["verdict"] == "too noisy"],
        noise_rounds=rounds,
        records=[
            {
                "cached": answer_record(c),
                "salted": [answer_record(a) for a in salted],
                "cached_again": [answer_record(a) for a in again_asked],
            }
            for (c, salted), again_asked in zip(asked, judged["repeats"], strict=True)
        ],
    )


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
