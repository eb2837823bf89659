"""The statistics of an A/B run: the arm order, the paired bootstrap interval and the verdict.

Each round measures both arms on the same workload shape, so a round gives one ratio B/A per metric.
The point estimate is the trimmed geometric mean of the per-round ratios: the mean of the log ratios
after dropping the lowest and highest 20% of rounds (so A/B and B/A are exact reciprocals, and one
round disturbed by something else on a shared machine does not decide the result; on a 2-core CPU a
single round's TPOT ratio was seen at 300x). Its interval is a paired bootstrap over rounds
(``scipy.stats.bootstrap`` with ``paired=True``: whole rounds are resampled, both arms together), as
Hesterberg's expanded percentile interval, which corrects the bootstrap's narrowness over few rounds.
The verdict is "worse" or "better" only when the interval lies wholly on one side of 1 **and** the
point estimate moved by at least the minimum effect in that direction; otherwise "inconclusive",
with the reason.

"Not worse", what a promotion needs, is a separate, stricter question: a non-inferiority test. B is
not worse than A only when the interval's *worse* bound lies within the margin (the minimum effect):
for a higher-is-better metric the lower bound of B/A >= 1 - margin, for a lower-is-better one the
upper bound <= 1 + margin. An inconclusive run, or an interval too wide to tell, is not "not worse":
the point estimate alone never passes. Each comparison also says the smallest regression its interval
could have shown (``detectable``), so a run too noisy to see a regression says so.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from vfleet.errors import VfleetError

Verdict = Literal["better", "worse", "inconclusive"]

#: Fewer paired rounds than this give no interval worth a verdict (a bootstrap over 4 rounds has at
#: most 35 distinct resamples).
MIN_ROUNDS = 5


@dataclass(frozen=True)
class Metric:
    key: str  # the field of vfleet.verify.probe.load.LevelResult
    label: str
    unit: str
    higher_is_better: bool

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"


#: What an A/B run compares, as vLLM's serving benchmark defines them (vfleet.verify.probe.load).
METRICS: tuple[Metric, ...] = (
    Metric("out_tok_per_s", "output tok/s", "tok/s", higher_is_better=True),
    Metric("ttft_p50_ms", "TTFT p50", "ms", higher_is_better=False),
    Metric("tpot_p50_ms", "TPOT p50", "ms", higher_is_better=False),
)


def arm_order(round_index: int) -> tuple[str, str]:
    """The arms of round ``round_index`` (0-based) in the order they run: A B, B A, A B, B A, ...
    so the sequence is A B B A A B B A and neither arm always runs first (or right after the other)."""
    if round_index < 0:
        raise ValueError(f"round index {round_index} < 0")
    return ("A", "B") if round_index % 2 == 0 else ("B", "A")


@dataclass
class Comparison:
    """One metric at one concurrency level over the paired rounds."""

    metric: str
    label: str
    direction: str
    level: int
    rounds: int
    a: list[float]
    b: list[float]
    ratios: list[float]
    ratio: float | None
    low: float | None
    high: float | None
    confidence: float
    min_effect: float
    method: str
    verdict: Verdict
    reason: str
    #: Non-inferiority: True only when the interval's worse bound lies within the margin (min_effect).
    not_worse: bool = False
    not_worse_reason: str = ""
    #: The smallest regression (a fraction, 0.1 = 10%) that this run's interval, at its observed noise,
    #: would have shown as worse (excluding 1); None without an interval.
    detectable: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: The share of rounds cut from each end before averaging the log ratios (scipy.stats.trim_mean).
TRIM = 0.2


def _trimmed_log_mean(d: Any, axis: int = -1) -> Any:
    from scipy import stats  # noqa: PLC0415

    return stats.trim_mean(d, TRIM, axis=axis)


def geo_mean_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """exp(trimmed mean(log(b_i / a_i))): the trimmed geometric mean of the per-round ratios."""
    import numpy as np  # noqa: PLC0415

    d = np.log(np.asarray(b, dtype=float)) - np.log(np.asarray(a, dtype=float))
    return float(np.exp(_trimmed_log_mean(d)))


def require_scipy() -> None:
    """Fail before anything is measured when scipy (a vfleet dependency) is missing, e.g. in an image
    that installed vfleet without its dependencies."""
    try:
        import scipy.stats  # noqa: F401, PLC0415
    except ImportError:
        raise VfleetError("vfleet ab needs scipy: pip install 'scipy==1.17.1' (a vfleet dependency)") from None


def expanded_level(confidence: float, n: int) -> float:
    """Hesterberg's expanded percentile level: a bootstrap percentile interval over n rounds is too narrow
    (it is about a normal interval with the standard error divided by n, not n - 1); run it at the level
    whose normal quantile is sqrt(n / (n - 1)) times Student's t quantile with n - 1 degrees of freedom
    (T. Hesterberg, "What teachers should know about the bootstrap", Am. Stat. 69(4), 2015, sec. 4.1)."""
    from scipy import stats  # noqa: PLC0415

    alpha = 1.0 - confidence
    z = math.sqrt(n / (n - 1)) * float(stats.t.ppf(1.0 - alpha / 2, n - 1))
    return 1.0 - 2.0 * float(stats.norm.sf(z))


def paired_interval(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95, n_resamples: int = 9999, seed: int = 0
) -> tuple[float, float, str]:
    """The bootstrap interval of the trimmed geometric-mean ratio B/A, resampling round indices (paired).

    The expanded percentile interval (expanded_level); BCa at the plain level only where the percentile
    interval is not finite, and the method says which. Identical ratios in every round give the
    degenerate interval [r, r]."""
    import numpy as np  # noqa: PLC0415
    from scipy import stats  # noqa: PLC0415

    la = np.log(np.asarray(a, dtype=float))
    lb = np.log(np.asarray(b, dtype=float))
    if np.allclose(lb - la, (lb - la)[0], rtol=0.0, atol=1e-12):
        r = geo_mean_ratio(a, b)
        return r, r, "degenerate (every round gave the same ratio)"

    def stat(x: Any, y: Any, axis: int = -1) -> Any:
        return np.exp(_trimmed_log_mean(y - x, axis=axis))

    level = expanded_level(confidence, len(a))
    for method in ("percentile", "BCa"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DegenerateDataWarning: handled below by the NaN check
            res = stats.bootstrap(
                (la, lb),
                stat,
                paired=True,
                vectorized=True,
                n_resamples=n_resamples,
                confidence_level=level if method == "percentile" else confidence,
                method=method,
                rng=np.random.default_rng(seed),
            )
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(low) and math.isfinite(high):
            return low, high, (f"expanded percentile ({level:.4%})" if method == "percentile" else method)
    raise VfleetError("the bootstrap gave no finite interval (every resample degenerate)")


def verdict(ratio: float, low: float, high: float, higher_is_better: bool, min_effect: float) -> tuple[Verdict, str]:
    """better / worse / inconclusive for B against A, and why.

    "worse": the interval lies wholly on the worse side of 1 and the ratio moved at least ``min_effect``
    that way (tok/s: ratio <= 1 - min_effect; TTFT, TPOT: ratio >= 1 + min_effect). "better" likewise.
    """
    if not (low <= ratio <= high):
        raise ValueError(f"ratio {ratio} outside its interval [{low}, {high}]")
    change = ratio - 1.0
    pct = f"{change * 100:+.1f}%"
    span = f"[{low:.3f}, {high:.3f}]"
    if low <= 1.0 <= high:
        return "inconclusive", f"B/A {ratio:.3f} ({pct}): the interval {span} includes 1 (no difference shown)"
    b_up = low > 1.0  # the whole interval above 1
    b_better = b_up == higher_is_better
    if abs(change) < min_effect:
        return "inconclusive", (
            f"B/A {ratio:.3f} ({pct}): the interval {span} excludes 1, but the change is smaller than the "
            f"minimum effect {min_effect:.0%}"
        )
    # The point estimate is on the same side as the interval (the interval excludes 1 and holds it).
    word: Verdict = "better" if b_better else "worse"
    return word, (
        f"B/A {ratio:.3f} ({pct}), interval {span} wholly {'above' if b_up else 'below'} 1 and the change at "
        f"least the minimum effect {min_effect:.0%} ({'higher' if higher_is_better else 'lower'} is better)"
    )


def worse_bound(low: float, high: float, higher_is_better: bool) -> float:
    """The end of the interval on the worse side: the lower bound of a higher-is-better ratio, the upper
    bound of a lower-is-better one."""
    return low if higher_is_better else high


def non_inferior(
    ratio: float | None, low: float | None, high: float | None, higher_is_better: bool, margin: float
) -> tuple[bool, str]:
    """Whether B is shown not worse than A by more than ``margin``, and why: the worse bound of the
    interval within 1 - margin (higher is better) or 1 + margin (lower is better). No interval is no pass."""
    if ratio is None or low is None or high is None:
        return False, "no interval: not shown not worse"
    bound = worse_bound(low, high, higher_is_better)
    limit = 1.0 - margin if higher_is_better else 1.0 + margin
    ok = bound >= limit if higher_is_better else bound <= limit
    side = "lower" if higher_is_better else "upper"
    rel = ">=" if higher_is_better else "<="
    if ok:
        return True, f"not worse: the interval's {side} bound {bound:.3f} {rel} {limit:.3f} (margin {margin:.0%})"
    return False, (
        f"not shown not worse: the interval's {side} bound {bound:.3f} is beyond {limit:.3f} (margin {margin:.0%}); "
        "B may be worse by more than the margin, or the run is too noisy or too short to tell"
    )


def detectable_regression(low: float, high: float) -> float:
    """The smallest regression this run could have shown as worse: the interval's half-width in log
    terms, hw = (log high - log low) / 2, as a change exp(hw) - 1. A true B/A that far from 1 puts an
    interval of this run's width just clear of 1; a smaller change, at the observed noise and rounds,
    would have looked like noise. (The half-width, not the distance from the estimate to one bound: with
    few rounds the trimmed bootstrap interval is lopsided, and one side alone understates the noise.)"""
    return math.expm1((math.log(high) - math.log(low)) / 2)


def compare(
    metric: Metric,
    level: int,
    a: Sequence[float],
    b: Sequence[float],
    min_effect: float = 0.05,
    confidence: float = 0.95,
    n_resamples: int = 9999,
    seed: int = 0,
) -> Comparison:
    """The comparison of one metric at one level from paired per-round values (a[i], b[i] of round i)."""
    if len(a) != len(b):
        raise ValueError(f"{metric.key} C{level}: {len(a)} A rounds but {len(b)} B rounds (rounds must be paired)")
    bad = [v for v in (*a, *b) if not (isinstance(v, int | float) and math.isfinite(v) and v > 0)]
    if bad:
        raise VfleetError(
            f"{metric.key} C{level}: values must be positive and finite, saw {bad[:3]} (a broken round gives no figure)"
        )
    ratios = [y / x for x, y in zip(a, b, strict=True)]
    base: dict[str, Any] = {
        "metric": metric.key,
        "label": metric.label,
        "direction": metric.direction,
        "level": level,
        "rounds": len(a),
        "a": list(a),
        "b": list(b),
        "ratios": ratios,
        "confidence": confidence,
        "min_effect": min_effect,
    }
    if len(a) < MIN_ROUNDS:
        return Comparison(
            **base,
            ratio=geo_mean_ratio(a, b) if a else None,
            low=None,
            high=None,
            method="none",
            verdict="inconclusive",
            reason=f"only {len(a)} paired rounds: an interval needs at least {MIN_ROUNDS}",
            not_worse=False,
            not_worse_reason=f"no interval ({len(a)} rounds): not shown not worse",
        )
    ratio = geo_mean_ratio(a, b)
    low, high, method = paired_interval(a, b, confidence, n_resamples, seed)
    # BCa can put the interval a hair beside the point estimate when the data are nearly degenerate.
    low, high = min(low, ratio), max(high, ratio)
    v, why = verdict(ratio, low, high, metric.higher_is_better, min_effect)
    ok, ok_why = non_inferior(ratio, low, high, metric.higher_is_better, min_effect)
    return Comparison(
        **base,
        ratio=ratio,
        low=low,
        high=high,
        method=method,
        verdict=v,
        reason=why,
        not_worse=ok,
        not_worse_reason=ok_why,
        detectable=detectable_regression(low, high),
    )
