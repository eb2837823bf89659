"""Run an A/B (or A/A) comparison of two live OpenAI-compatible vLLM servers.

Before anything is measured both arms are asked for /v1/models: each must serve the model (one model,
or the one named), both must serve the same model name and the same ``max_model_len`` (and, with a
profile, the profile's). Then every level is warmed up on both arms, and the rounds run: round k
measures every level on both arms, in the order A B for even k and B A for odd k. Each measurement
is vfleet.verify.probe.load.run_level (the boot-verify load generator: streamed completions of a fixed
output length, vLLM benchmark timings) with a fresh random salt in the prompt tags, so every
request's prompt differs from its first token and no arm can reuse the other's (or an earlier
round's) prefix cache, while the workload shape (prompt bodies, lengths, counts) is the same.

A measurement with any failed request (arm down, HTTP error, broken stream, short completion) stops
the run: a broken run gives no verdict.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from vfleet.ab.stats import METRICS, MIN_ROUNDS, Comparison, arm_order, compare
from vfleet.errors import VfleetError
from vfleet.profiles import Profile
from vfleet.verify.client import UNAUTHORIZED_HINT, Client
from vfleet.verify.probe.load import LevelResult, run_level

DEFAULT_LEVELS = [1, 8]


class AbInputError(VfleetError):
    """Bad input found before anything was measured (exit 2)."""


class AbRunBroken(VfleetError):
    """An arm failed while the run was measuring: no verdict (exit 1)."""

    exit_code = 1


class AbSettings(BaseModel):
    """The workload and the statistics of one A/B run. Unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    levels: list[int] = Field(default_factory=lambda: list(DEFAULT_LEVELS))
    rounds: int = Field(default=20, ge=MIN_ROUNDS, le=1000)
    requests_per_level: int | None = Field(default=None, ge=1, description="None: max(8, 2 x concurrency)")
    prompt_tokens: int = Field(default=64, ge=1)
    output_tokens: int = Field(default=32, ge=2, description="TPOT needs at least 2 output tokens")
    warmup: bool = True
    min_effect: float = Field(default=0.05, gt=0.0, lt=1.0)
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    n_resamples: int = Field(default=9999, ge=100)
    seed: int = 0
    timeout_s: float = Field(default=300.0, gt=0)
    #: Seconds of quiet before each measurement. vLLM's shared-memory readers busy-loop for 1 s after
    #: their last read (vllm/distributed/device_communicators/shm_broadcast.py, SpinCondition), so on a
    #: host that runs both arms the arm measured next would share the CPU with the other's spin: on the
    #: 2-core CPU, a measurement right after the other arm's ran at a quarter of the throughput.
    settle_s: float = Field(default=2.0, ge=0.0, le=600.0)

    @field_validator("levels")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        if not v or any(c < 1 for c in v) or len(set(v)) != len(v):
            raise ValueError("levels must be distinct concurrencies >= 1")
        return sorted(v)

    def requests(self, level: int) -> int:
        return self.requests_per_level or max(8, 2 * level)


def settings(**values: Any) -> AbSettings:
    """AbSettings from keyword values (None means: the default), with pydantic's errors as one clear message."""
    try:
        return AbSettings(**{k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors())
        raise AbInputError(f"bad A/B settings: {problems}") from None


def settings_from_profile(profile: Profile, **overrides: Any) -> AbSettings:
    """The profile's verify.load levels and lengths as defaults (its requests_per_level too), then ``overrides``."""
    load = profile.verify.load
    base: dict[str, Any] = {
        "levels": list(load.levels),
        "prompt_tokens": load.prompt_tokens,
        "output_tokens": load.output_tokens,
        "requests_per_level": load.requests_per_level,
    }
    base.update({k: v for k, v in overrides.items() if v is not None})
    return settings(**base)


@dataclass
class Arm:
    name: str
    url: str
    model: str
    root: str | None
    max_model_len: int | None
    vllm_version: str | None
    client: Client = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "client"}


def probe_arm(name: str, url: str, api_key: str | None, model: str | None = None) -> Arm:
    """What arm ``name`` serves, from /v1/models (and /version); a down or unexpected arm is an AbInputError."""
    if not url.startswith(("http://", "https://")):
        raise AbInputError(f"arm {name}: URL {url!r}: expected http://HOST:PORT")
    client = Client(url.rstrip("/"), api_key=api_key, timeout_s=30.0)
    try:
        status, body = client.get("/v1/models", timeout_s=15)
    except (httpx.HTTPError, OSError) as exc:
        raise AbInputError(f"arm {name} ({url}) is down: GET /v1/models failed: {exc}") from None
    if status == 401:
        raise AbInputError(f"arm {name} ({url}): GET /v1/models: HTTP 401 ({UNAUTHORIZED_HINT})")
    if status != 200:
        raise AbInputError(f"arm {name} ({url}): GET /v1/models: HTTP {status}: {body[:200]}")
    try:
        data = json.loads(body)["data"]
        served = {str(m["id"]): m for m in data}
    except (ValueError, KeyError, TypeError):
        raise AbInputError(f"arm {name} ({url}): /v1/models is not an OpenAI model list: {body[:200]}") from None
    if model is not None:
        if model not in served:
            raise AbInputError(f"arm {name} ({url}) does not serve model {model!r}; it serves {sorted(served)}")
        entry = served[model]
    elif len(served) == 1:
        entry = next(iter(served.values()))
    else:
        raise AbInputError(f"arm {name} ({url}) serves {len(served)} models {sorted(served)}: pass --model NAME")
    version = None
    try:
        vstatus, vbody = client.get("/version", timeout_s=15)
        if vstatus == 200:
            version = str(json.loads(vbody).get("version"))
    except (httpx.HTTPError, OSError, ValueError):
        pass
    mml = entry.get("max_model_len")
    client.model = str(entry["id"])
    return Arm(
        name=name,
        url=url.rstrip("/"),
        model=str(entry["id"]),
        root=entry.get("root"),
        max_model_len=int(mml) if mml is not None else None,
        vllm_version=version,
        client=client,
    )


def check_arms(a: Arm, b: Arm, profile: Profile | None = None) -> None:
    """Both arms serve the same model name and max_model_len (and the profile's, if given)."""
    if a.model != b.model:
        raise AbInputError(
            f"the arms serve different models: A {a.url} serves {a.model!r}, B {b.url} serves {b.model!r}; "
            "an A/B compares two builds serving the same model"
        )
    if a.max_model_len != b.max_model_len:
        raise AbInputError(
            f"the arms serve {a.model!r} with different max_model_len: A {a.max_model_len}, B {b.max_model_len}; "
            "start both with the same context length"
        )
    if profile is not None:
        want = profile.served_model_name()
        if a.model != want:
            raise AbInputError(f"the arms serve {a.model!r}, but profile {profile.name} serves {want!r}")
        mml = profile.verify.max_model_len
        if a.max_model_len != mml:
            raise AbInputError(
                f"the arms serve max_model_len {a.max_model_len}, but profile {profile.name} expects {mml}"
            )


@dataclass
class Measurement:
    """One arm at one level in one round (round -1: the warm-up)."""

    round: int
    level: int
    arm: str
    position: int  # 0: ran first in its round and level, 1: second
    salt: str
    started_s: float
    wall_s: float
    requests: int
    completed: int
    out_tok_per_s: float
    ttft_p50_ms: float | None
    tpot_p50_ms: float | None

    @classmethod
    def of(cls, res: LevelResult, round_: int, arm: str, position: int, salt: str, started_s: float) -> Measurement:
        return cls(
            round=round_,
            level=res.concurrency,
            arm=arm,
            position=position,
            salt=salt,
            started_s=round(started_s, 3),
            wall_s=round(res.wall_s, 4),
            requests=res.requests,
            completed=res.completed,
            out_tok_per_s=res.out_tok_per_s,
            ttft_p50_ms=res.ttft_p50_ms,
            tpot_p50_ms=res.tpot_p50_ms,
        )


@dataclass
class AbRun:
    arms: dict[str, Arm]
    settings: AbSettings
    aa: bool
    measurements: list[Measurement] = field(default_factory=list)
    warmup: list[Measurement] = field(default_factory=list)
    broken: str | None = None
    wall_s: float = 0.0
    comparisons: list[Comparison] = field(default_factory=list)

    @property
    def false_verdicts(self) -> list[Comparison]:
        """In an A/A run every verdict other than inconclusive is false."""
        return [c for c in self.comparisons if c.verdict != "inconclusive"] if self.aa else []


def _measure(
    arm: Arm, level: int, s: AbSettings, round_: int, position: int, t0: float
) -> tuple[Measurement | None, str | None]:
    time.sleep(s.settle_s)
    salt = secrets.token_hex(6)
    started = time.monotonic() - t0
    res = run_level(arm.client, level, s.requests(level), s.prompt_tokens, s.output_tokens, run_tag=f"ab{salt}")
    where = f"arm {arm.name} ({arm.url}) {'warm-up' if round_ < 0 else f'round {round_ + 1}'} at C{level}"
    if res.problems:
        more = f" (and {len(res.problems) - 1} more)" if len(res.problems) > 1 else ""
        return None, f"{where}: {res.problems[0]}{more}"
    if res.ttft_p50_ms is None or res.tpot_p50_ms is None or res.out_tok_per_s <= 0:
        return None, f"{where}: no TTFT/TPOT figures ({res.completed}/{res.requests} requests completed)"
    return Measurement.of(res, round_, arm.name, position, salt, started), None


def run(a: Arm, b: Arm, s: AbSettings, aa: bool = False, progress: Callable[[str], None] | None = None) -> AbRun:
    """Warm up, run the alternating rounds and compare. A failed measurement stops the run and sets
    ``broken``; then there are no comparisons."""
    out = AbRun(arms={"A": a, "B": b}, settings=s, aa=aa)
    arms = out.arms
    t0 = time.monotonic()
    say = progress or (lambda _m: None)

    def sweep(order: tuple[str, str], round_: int, into: list[Measurement]) -> bool:
        """Measure every level on the arms in ORDER into INTO; False (and `broken` set) on a failure."""
        for level in s.levels:
            for pos, name in enumerate(order):
                m, err = _measure(arms[name], level, s, round_, pos, t0)
                if err:
                    out.broken = err
                    return False
                assert m is not None
                into.append(m)
        return True

    try:
        if s.warmup:
            if not sweep(("A", "B"), -1, out.warmup):
                return out
            say(f"warm-up done in {time.monotonic() - t0:.0f} s")
        for k in range(s.rounds):
            order = arm_order(k)
            if not sweep(order, k, out.measurements):
                return out
            say(f"round {k + 1}/{s.rounds} ({' '.join(order)}) done at {time.monotonic() - t0:.0f} s")
    finally:
        out.wall_s = time.monotonic() - t0
    out.comparisons = analyse(out.measurements, s)
    return out


def per_comparison_confidence(s: AbSettings) -> float:
    """Bonferroni: each of the run's metrics x levels intervals at 1 - (1 - confidence) / count, so that
    all of them together hold their true ratios with at least ``s.confidence`` (family-wise). An A/A
    run then gives a false verdict anywhere in its report with a probability of at most 1 - confidence
    (less, with the minimum effect), however many levels it measures."""
    return 1.0 - (1.0 - s.confidence) / (len(s.levels) * len(METRICS))


def analyse(measurements: list[Measurement], s: AbSettings) -> list[Comparison]:
    """One comparison per level and metric from the paired rounds (round k's A against round k's B)."""
    by_key = {(m.round, m.level, m.arm): m for m in measurements}
    rounds = sorted({m.round for m in measurements if m.round >= 0})
    confidence = per_comparison_confidence(s)
    comps: list[Comparison] = []
    for level in s.levels:
        paired = [k for k in rounds if (k, level, "A") in by_key and (k, level, "B") in by_key]
        for metric in METRICS:
            a_vals = [float(getattr(by_key[(k, level, "A")], metric.key)) for k in paired]
            b_vals = [float(getattr(by_key[(k, level, "B")], metric.key)) for k in paired]
            comps.append(compare(metric, level, a_vals, b_vals, s.min_effect, confidence, s.n_resamples, seed=s.seed))
    return comps
