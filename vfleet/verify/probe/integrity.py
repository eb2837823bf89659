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
    "hit_path_gap",
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


@dataclass(frozen=True)
class _Plan:
    """What one probe run asks, sized from the server's KV pool before any request is sent."""

    blocks: int
    block: int
    prompt: str
    prompt_tokens: int
    questions: list[str]
    filler_body: str
    filler_tokens: int
    fillers: int

    @property
    def pool_tokens(self) -> int:
        return self.blocks * self.block


def plan(client: Client, spec: IntegritySpec, max_model_len: int, tag: str) -> _Plan:
    """The cached prompt, its questions and the fillers that cycle the pool around it (ProbeSetupError where
    the spec cannot be run on this server: the prompt does not fit, or too many fillers are needed)."""
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
    return _Plan(blocks, block, prompt, prompt_tokens, questions, filler_body, filler_tokens, fillers)


@dataclass
class _Asker:
    """The probe's requests for one plan, and the hit sources its measured answers reported."""

    client: Client
    spec: IntegritySpec
    plan: _Plan
    tag: str
    sources: set[str] = field(default_factory=set)

    def ask(self, q: str) -> str:
        """The cached prompt and question Q, no measurement (what keeps the prompt cached)."""
        out = self.client.complete(self.plan.prompt + q, max_tokens=self.spec.answer_tokens, ignore_eos=True)
        return str(out["text"])

    def computed(self, q: str, salt: str | None = None) -> Answer:
        """Ask with the logprobs of the top alternatives and token ids, measuring this request's prefix-cache
        hits (the probe's requests run one at a time here)."""
        extra: dict[str, Any] = {
            "ignore_eos": True,
            "logprobs": self.spec.top_logprobs,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        if salt is not None:
            extra["cache_salt"] = salt
        _, h0 = prefix_hits(self.client.metrics())
        choice = self.client.complete(self.plan.prompt + q, max_tokens=self.spec.answer_tokens, **extra)
        _, h1 = prefix_hits(self.client.metrics())
        answer = parse_answer(choice, h1 - h0)
        self.sources.add(answer.hit_source)
        return answer

    def salted(self, i: int, label: str) -> Answer:
        """Question I on fresh blocks: a unique cache_salt."""
        return self.computed(self.plan.questions[i], salt=f"vf-{self.tag}-{i}-{label}-{uuid.uuid4().hex[:12]}")


def cache_and_cycle(asker: _Asker) -> None:
    """Steps 1 and 2: cache the prompt (each question once), then cycle the pool around it with fillers whose
    unique leading tag shares no block with another, touching the prompt between batches as a system prompt
    is touched."""
    p, client, tag = asker.plan, asker.client, asker.tag
    for q in p.questions:
        asker.ask(q)

    def filler(i: int) -> None:
        client.complete(f"[filler {tag} {i} {uuid.uuid4().hex}]\n" + p.filler_body, max_tokens=1)

    width = max(1, min(4, p.blocks // max(1, 2 * math.ceil(p.filler_tokens / p.block))))
    done = 0
    with ThreadPoolExecutor(max_workers=width) as pool:
        while done < p.fillers:
            batch = list(range(done, min(p.fillers, done + width)))
            list(pool.map(filler, batch))
            done += len(batch)
            asker.ask(p.questions[done % len(p.questions)])


def compare_once(asker: _Asker) -> tuple[list[tuple[Answer, list[Answer]]], list[dict[str, Any]]]:
    """Step 3: each question a salted answer (fresh blocks), the cached one and a second salted one, one at a
    time; returns (cached answer, salted answers) per question and what each request hit."""
    p = asker.plan
    prompt_ids = asker.client.tokenize(p.prompt)
    asked: list[tuple[Answer, list[Answer]]] = []
    hits: list[dict[str, Any]] = []
    for i, q in enumerate(p.questions):
        salted_a = asker.salted(i, "0a")
        cached = asker.computed(q)
        salted_b = asker.salted(i, "0b")
        asked.append((cached, [salted_a, salted_b]))
        shared = _common_prefix(cached.prompt_ids or prompt_ids, prompt_ids)
        whole = min(shared, len(cached.prompt_ids or prompt_ids) - 1) // p.block * p.block
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
    return asked, hits


def judge_rounds(
    asker: _Asker, asked: list[tuple[Answer, list[Answer]]], hits: list[dict[str, Any]]
) -> tuple[dict[str, Any], int]:
    """The rule's judgement (vfleet.verify.probe.integrity_rule), with the confirmation rounds it asks for: more
    salted pairs, the cached prompt asked again (counted only where it hit the same whole cached prefix), and a
    salted copy asked twice (counted only where its second ask hit as many tokens as the cached ask)."""
    questions = asker.plan.questions

    def more(i: int, r: int) -> list[Answer]:
        pair = [asker.salted(i, f"{r}{x}") for x in "ab"]
        hits[i]["salted_hit"] = max(hits[i]["salted_hit"], *(a.cached_tokens for a in pair))
        return pair

    def again(i: int, r: int) -> Answer | None:
        a = asker.computed(questions[i])
        hits[i].setdefault("repeat_hits", []).append(a.cached_tokens)
        return a if a.cached_tokens >= hits[i]["cached_expected"] else None

    def hit_path(i: int, r: int) -> Answer | None:
        # A salted copy asked twice: the second ask hits its own fresh blocks, as many tokens as the cached ask hit.
        salt = f"vf-{asker.tag}-{i}-{r}h-{uuid.uuid4().hex[:12]}"
        whole = asker.computed(questions[i], salt=salt)
        a = asker.computed(questions[i], salt=salt)
        hits[i].setdefault("hit_path_hits", []).append([whole.cached_tokens, a.cached_tokens])
        return a if whole.cached_tokens == 0 and a.cached_tokens == hits[i]["cached_hit"] else None

    return judge_with_rounds(asked, asker.spec, more, again, hit_path)


def integrity_probe(client: Client, spec: IntegritySpec, max_model_len: int, tag: str) -> IntegrityResult:
    """The probe (the module's steps 1-3) on CLIENT's server, judged by its rule."""
    asker = _Asker(client, spec, plan(client, spec, max_model_len, tag), tag)
    cache_and_cycle(asker)
    asked, hits = compare_once(asker)
    judged, rounds = judge_rounds(asker, asked, hits)
    return _result(asker, asked, hits, judged, rounds)


def _result(
    asker: _Asker,
    asked: list[tuple[Answer, list[Answer]]],
    hits: list[dict[str, Any]],
    judged: dict[str, Any],
    rounds: int,
) -> IntegrityResult:
    p, spec = asker.plan, asker.spec
    named = [
        {"question": f"question {j['index']} ({q.strip()!r})", **j}
        for q, j in zip(p.questions, judged["questions"], strict=True)
    ]
    return IntegrityResult(
        num_gpu_blocks=p.blocks,
        block_size=p.block,
        pool_tokens=p.pool_tokens,
        prompt_tokens=p.prompt_tokens,
        filler_tokens=p.filler_tokens,
        fillers=p.fillers,
        filler_tokens_total=p.fillers * p.filler_tokens,
        pool_cycles=round(p.fillers * p.filler_tokens / p.pool_tokens, 2),
        questions=len(p.questions),
        hit_tokens_during_compare=float(sum(h["cached_hit"] for h in hits)),
        logprob_tolerance=spec.logprob_tolerance,
        top_logprobs=spec.top_logprobs,
        max_logprob_gap=max((j["max_gap"] for j in named), default=0.0),
        hit_source="+".join(sorted(asker.sources)),
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
                "hit_path": [answer_record(a) for a in path],
            }
            for (c, salted), again_asked, path in zip(asked, judged["repeats"], judged["hit_paths"], strict=True)
        ],
    )


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
