"""Production floors: what a production profile cannot declare away (issue 31, item 7).

A profile's ``verify:`` section says what boot-verify checks and how strictly. For a production profile (a
fact of its model.yaml) the rules here bound it: the checks that run on every node, how long a pass may
promote, the load floor, the KV floor, the integrity probe's tolerances and size, the new-warning gate, the
A/B gate, and the source a waiver must name. They are rules like those of vfleet.rules (`vfleet check
--rules` lists them), with two differences: no waiver lifts one, and vfleet.profiles.Catalog.load checks
them, so every command that reads the profile (check, render, serve, verify, promote) refuses one that
breaks a floor, naming the profile, the key, the bound and the fix. A profile that is not production
(tiny/cpu) is not bound.

Finding, Rule and Violation, the shape of every rule, live here, below the catalogue; vfleet.rules uses them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from vfleet import checkids
from vfleet.errors import ProfileError
from vfleet.profile_schema import Profile
from vfleet.profile_verify import vllm_option


@dataclass(frozen=True)
class Finding:
    key: str
    detail: str


@dataclass(frozen=True)
class Rule:
    id: str
    reason: str
    source: str
    fix: str
    check: Callable[[Profile], Iterator[Finding]]
    #: False for a production floor: a `waivers:` entry naming it is an error.
    waivable: bool = True


@dataclass(frozen=True)
class Violation:
    profile: str
    rule: Rule
    finding: Finding

    def __str__(self) -> str:
        r = self.rule
        return (
            f"{self.profile}: rule {r.id}: {self.finding.key}: {self.finding.detail}. "
            f"Why: {r.reason} (source: {r.source}). Fix: {r.fix}"
        )


#: Days a signed boot-verify pass may promote a production image: verify.report_max_age_days' default.
MAX_REPORT_AGE_DAYS = 30.0
#: Output tok/s per concurrent stream that a production load floor asks for at least: a token every 200 ms.
MIN_TOK_PER_S_PER_STREAM = 5.0


@dataclass(frozen=True)
class Bound:
    """One bound on a `verify.integrity` key: at most (``upper``) or at least ``value``, and why."""

    key: str
    upper: bool
    value: float
    why: str


#: The integrity probe's knobs that loosen it, bounded at what docs/boot-verify.md measured: the tolerance at
#: one bf16 step of a logit, the noise rule at its defaults, the probe no smaller than its defaults.
INTEGRITY_BOUNDS: tuple[Bound, ...] = (
    Bound(
        "logprob_tolerance",
        True,
        2**-6,
        "one bf16 step of a logit; the smallest corruption the probe saw moved a logprob 0.0295 nats",
    ),
    Bound("noise_factor", True, 2.0, "clean gaps under traffic were at most 1.53 times the noise floor"),
    Bound("noise_bound", True, 0.25, "4 times the largest clean noise measured (0.0625 nats)"),
    Bound("noise_rounds", True, 4, "every round can only raise the noise floor that the allowance is made of"),
    Bound("questions", False, 3, "fewer questions judge fewer answers"),
    Bound("top_logprobs", False, 5, "fewer alternatives per position hide a moved logprob"),
    Bound("answer_tokens", False, 16, "fewer generated positions are compared"),
    Bound("prompt_blocks", False, 4, "the probe sees only the blocks its own prompt uses"),
    Bound(
        "pool_cycles",
        False,
        1.0,
        "below one cycle part of the pool is never written while the prompt is cached",
    ),
)

#: The forms in which a production waiver's ``source`` names where its reason is shown; one is enough.
SOURCE_FORMS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a URL (https://...)", re.compile(r"\bhttps?://[\w.-]+\.[a-z]{2,}\S*", re.I)),
    ("a GitHub issue or pull request (OWNER/REPO#N)", re.compile(r"\b[\w.-]+/[\w.-]+#\d+\b")),
    ("an issue or pull request of vfleet (issue N, PR N)", re.compile(r"\b(?:issue|PR) #?\d+\b", re.I)),
    ("a seed (seed NNN)", re.compile(r"\bseed \d{3}\b", re.I)),
    ("a file path (docs/upstream.md)", re.compile(r"(?<![\w/.-])[\w.-]+(?:/[\w.-]+)+\.[A-Za-z]{1,5}\b")),
)


def names_a_source(text: str) -> bool:
    return any(rx.search(text) for _, rx in SOURCE_FORMS)


def serves_without_prefix_cache(p: Profile) -> bool:
    """True when the serve arguments turn prefix caching off: vLLM's default is on."""
    return vllm_option(p.vllm, "enable-prefix-caching") is False


def _checks_run(p: Profile) -> Iterator[Finding]:
    if not p.production:
        return
    no_cache = serves_without_prefix_cache(p)
    for check_id in p.verify.not_applicable:
        if checkids.guards_production(check_id):
            yield Finding(f"verify.not_applicable.{check_id}", "declares not applicable a check production runs")
        elif not no_cache:
            yield Finding(
                f"verify.not_applicable.{check_id}",
                "declares a prefix-cache check not applicable while vllm serves with prefix caching",
            )
    if not p.verify.probes:
        yield Finding("verify.probes", "lists no probe, so test_probes would skip")
    if not no_cache and not p.verify.prefix_cache:
        yield Finding("verify.prefix_cache", "is false while vllm serves with prefix caching (its default)")
    if not no_cache and not p.verify.integrity.enabled:
        yield Finding("verify.integrity.enabled", "is false while vllm serves with prefix caching")


def _report_max_age(p: Profile) -> Iterator[Finding]:
    days = p.verify.report_max_age_days
    if p.production and days > MAX_REPORT_AGE_DAYS:
        yield Finding("verify.report_max_age_days", f"is {days:g} days, production maximum {MAX_REPORT_AGE_DAYS:g}")


def _load_floor(p: Profile) -> Iterator[Finding]:
    if not p.production:
        return
    load = p.verify.load
    missing = [c for c in load.levels if not load.min_output_tok_per_s.get(c, 0) > 0]  # 0 is no floor
    if missing:
        yield Finding(
            "verify.load.min_output_tok_per_s",
            f"no floor for level(s) {', '.join(f'C{c}' for c in missing)} of verify.load.levels {load.levels}",
        )
    for c in load.levels:
        floor = load.min_output_tok_per_s.get(c)
        least = MIN_TOK_PER_S_PER_STREAM * c
        if floor is not None and 0 < floor < least:
            yield Finding(
                f"verify.load.min_output_tok_per_s.{c}",
                f"is {floor:g} output tok/s at C{c}, production minimum {least:g} "
                f"({MIN_TOK_PER_S_PER_STREAM:g} per stream x {c})",
            )


def _kv_floor(p: Profile) -> Iterator[Finding]:
    v = p.verify
    if p.production and v.min_kv_tokens < v.max_model_len:
        yield Finding(
            "verify.min_kv_tokens",
            f"is {v.min_kv_tokens}, production minimum verify.max_model_len {v.max_model_len}",
        )


def _integrity_bounds(p: Profile) -> Iterator[Finding]:
    if not p.production:
        return
    spec = p.verify.integrity
    for b in INTEGRITY_BOUNDS:
        value = float(getattr(spec, b.key))
        if (value > b.value) if b.upper else (value < b.value):
            word = "maximum" if b.upper else "minimum"
            yield Finding(f"verify.integrity.{b.key}", f"is {value:g}, production {word} {b.value:g} ({b.why})")


def _new_warnings_fail(p: Profile) -> Iterator[Finding]:
    if p.production and p.verify.warnings.new_fails is False:
        yield Finding("verify.warnings.new_fails", "is false, so a new warning template would not fail promotion")


def _ab_gate_on(p: Profile) -> Iterator[Finding]:
    if p.production and not p.verify.ab_not_worse:
        yield Finding("verify.ab_not_worse", "is not true, so a promotion needs no A/B against the promoted image")


#: The loosest answers gate a production profile may declare: a larger margin or a lower confidence lets a
#: collapse of accuracy through as "not shown worse" (docs/answers.md, "The judgement").
ANSWERS_MAX_MARGIN = 0.05
ANSWERS_MIN_CONFIDENCE = 0.95


def _answers_gate(p: Profile) -> Iterator[Finding]:
    if not p.production:
        return
    spec = p.verify.answers
    if spec is None:
        yield Finding("verify.answers", "is not set, so nothing compares this build's answers with the promoted one's")
        return
    if spec.margin > ANSWERS_MAX_MARGIN:
        yield Finding("verify.answers.margin", f"is {spec.margin:g}, production maximum {ANSWERS_MAX_MARGIN:g}")
    if spec.confidence < ANSWERS_MIN_CONFIDENCE:
        yield Finding(
            "verify.answers.confidence", f"is {spec.confidence:g}, production minimum {ANSWERS_MIN_CONFIDENCE:g}"
        )


def _waiver_source(p: Profile) -> Iterator[Finding]:
    if not p.production:
        return
    for i, w in enumerate(p.waivers):
        if w.source is None or not names_a_source(w.source):
            shown = "is not set" if w.source is None else f"{w.source!r} names no source"
            yield Finding(f"waivers[{i}] ({w.rule}).source", shown)


_FLOOR = "a production floor: no waiver lifts it"
_NOT_PRODUCTION = (
    "set production: false in models/<model>/model.yaml only for a model that never takes production traffic"
)

FLOORS: list[Rule] = [
    Rule(
        id="production-checks-run",
        reason=(
            "a check declared not applicable is one nobody ran: health, models, version, probes, load, metrics, "
            "the server log (faults first) and GPU health are what show a bad node that still answers HTTP; "
            "only the prefix-cache checks may be excused, and only where vLLM serves without a prefix cache"
        ),
        source="issue 31 (item 7); issue 10; docs/boot-verify.md",
        fix=(
            "remove the not_applicable entry, list at least one wide-margin probe, keep integrity enabled; "
            f"excuse the prefix-cache checks only with vllm enable-prefix-caching: false; {_NOT_PRODUCTION} "
            f"({_FLOOR})"
        ),
        check=_checks_run,
        waivable=False,
    ),
    Rule(
        id="production-report-max-age",
        reason=(
            "a stale pass says nothing about what the image does against today's hosts, drivers and model files: "
            f"a production profile may shorten the {MAX_REPORT_AGE_DAYS:g}-day default, never lengthen it"
        ),
        source="issue 31 (item 7); docs/boot-verify.md",
        fix=f"set verify.report_max_age_days to {MAX_REPORT_AGE_DAYS:g} or less, or remove it ({_FLOOR})",
        check=_report_max_age,
        waivable=False,
    ),
    Rule(
        id="production-load-floor",
        reason=(
            "without a floor at every load level boot-verify passes a node of any speed; below "
            f"{MIN_TOK_PER_S_PER_STREAM:g} output tok/s per stream (a token every 200 ms, about reading speed) "
            "a floor passes a CPU fallback or a broken kernel path"
        ),
        source="issue 21 (item 8); issue 31 (item 7); docs/ab.md",
        fix=(
            "set verify.load.min_output_tok_per_s at every verify.load.levels level, at least "
            f"{MIN_TOK_PER_S_PER_STREAM:g} x the level (e.g. {{1: 5, 32: 160}}), better a measured fraction of "
            f"a real run ({_FLOOR})"
        ),
        check=_load_floor,
        waivable=False,
    ),
    Rule(
        id="production-kv-floor",
        reason="a KV cache smaller than the context cannot hold one full-length request; the kv_tokens check "
        "exists to catch a pool that vLLM shrank",
        source="issue 31 (item 7); docs/boot-verify.md",
        fix=f"set verify.min_kv_tokens to at least the context length (vllm max-model-len) ({_FLOOR})",
        check=_kv_floor,
        waivable=False,
    ),
    Rule(
        id="production-integrity-bounds",
        reason=(
            "the integrity probe (seed 003) catches a damaged prefix cache only within its measured bounds: a "
            "wider tolerance or noise allowance, or a smaller probe, passes the corruption it exists to catch"
        ),
        source="seed 003; issue 22; issue 31 (item 7); docs/boot-verify.md",
        fix=(
            "keep verify.integrity within "
            + ", ".join(f"{b.key} {'<=' if b.upper else '>='} {b.value:g}" for b in INTEGRITY_BOUNDS)
            + " (the defaults are); measure a backend's clean gap with benchmarks/bench_integrity_gap.py before "
            f"raising logprob_tolerance ({_FLOOR})"
        ),
        check=_integrity_bounds,
        waivable=False,
    ),
    Rule(
        id="production-new-warnings-fail",
        reason="a warning template no earlier promoted report printed fails a production promotion until it is "
        "explained: turning that off lets a new fault's first line through",
        source="issue 31 (item 7); docs/boot-verify.md",
        fix=f"remove verify.warnings.new_fails; excuse one template with a verify.warnings.allow entry ({_FLOOR})",
        check=_new_warnings_fail,
        waivable=False,
    ),
    Rule(
        id="production-ab-gate",
        reason="boot-verify's load floor catches a grossly slow node, not a 15% regression: only a promotion A/B "
        "against the image promoted before shows a new build not worse (issue 31, item 9)",
        source='issue 31 (item 9); docs/ab.md, "A promotion gate"',
        fix=f"set verify.ab_not_worse: true in the model layer (models/<model>/model.yaml) ({_FLOOR})",
        check=_ab_gate_on,
        waivable=False,
    ),
    Rule(
        id="production-answers-gate",
        reason=(
            "a server that is healthy, fast and consistent with itself can still answer wrong after an upgrade "
            "(GLM-5.3 on ROCm fell from 91.6% to 14.9% on GSM8K, vllm-project/vllm#54924): only the answers gate "
            "compares a build's answers and log-probabilities with the promoted build's"
        ),
        source="issue 32; docs/answers.md",
        fix=(
            f"set verify.answers in the model layer (questions, margin <= {ANSWERS_MAX_MARGIN:g}, confidence >= "
            f"{ANSWERS_MIN_CONFIDENCE:g}; drift from an A/A measurement, or absent: NOT MEASURED, which fails a "
            f"promotion against a baseline until it is measured) ({_FLOOR})"
        ),
        check=_answers_gate,
        waivable=False,
    ),
    Rule(
        id="production-waiver-source",
        reason="a waiver lifts a rule that has a source; its reason must say where it is shown, in a form a "
        "reviewer can follow: " + ", ".join(form for form, _ in SOURCE_FORMS),
        source="issue 31 (item 7)",
        fix=(
            "add `source:` to the waiver, naming where its reason is shown (e.g. ROCm/aiter#5049, "
            f"docs/upstream.md, issue 10) ({_FLOOR})"
        ),
        check=_waiver_source,
        waivable=False,
    ),
]


def floor_violations(profile: Profile) -> list[Violation]:
    return [Violation(profile.name, rule, f) for rule in FLOORS for f in rule.check(profile)]


def enforce_floors(profile: Profile) -> None:
    """Raise one error listing every production floor the profile breaks."""
    found = floor_violations(profile)
    if found:
        where = f"{profile.name}: its layers: {', '.join(profile.sources)}"
        raise ProfileError("\n".join([*(str(v) for v in found), where]))
