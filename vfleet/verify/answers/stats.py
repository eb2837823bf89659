"""The statistics of the answers gate, in the standard library only (no scipy: boot-verify runs where the
images' Python is, docs/architecture.md): Wilson's score interval of one accuracy, the exact one-sided
McNemar test of a paired comparison, and Newcombe's score interval of the paired accuracy difference.

Sources: E. B. Wilson, "Probable inference...", JASA 22 (1927); Q. McNemar, Psychometrika 12 (1947), the
exact form being the binomial test of the discordant pairs; R. G. Newcombe, "Improved confidence intervals
for the difference between binomial proportions based on paired data", Stat. Med. 17 (1998), method 10.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist


def z_two_sided(confidence: float) -> float:
    """The normal quantile of a two-sided interval at CONFIDENCE (1.96 at 0.95)."""
    _check_level(confidence)
    return NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)


def z_one_sided(confidence: float) -> float:
    """The normal quantile of a one-sided bound at CONFIDENCE (1.645 at 0.95)."""
    _check_level(confidence)
    return NormalDist().inv_cdf(confidence)


def _check_level(confidence: float) -> None:
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence {confidence} is not in [0.5, 1)")


def wilson(k: int, n: int, z: float) -> tuple[float, float]:
    """Wilson's score interval of the proportion K/N for the normal quantile Z (z_two_sided)."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"wilson needs 0 <= k <= n and n > 0, not k={k}, n={n}")
    p = k / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n))
    lower = 0.0 if k == 0 else max(0.0, centre - half)
    upper = 1.0 if k == n else min(1.0, centre + half)
    return lower, upper


def mcnemar_exact_worse(b: int, c: int) -> float:
    """The exact one-sided McNemar p-value that the candidate is worse: P(X >= B) for X ~ Binomial(B + C,
    1/2), where B counts the items only the baseline got right and C those only the candidate got right.
    1.0 when there is no discordant pair (nothing shows a difference)."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, not b={b}, c={c}")
    m = b + c
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, k) for k in range(b, m + 1))
    return float(Fraction(tail, 2**m))


@dataclass(frozen=True)
class PairedTable:
    """The paired 2x2 table of one item set: ``both`` right in both runs, ``base_only`` right only in the
    baseline, ``cand_only`` right only in the candidate, ``neither`` right in neither."""

    both: int
    base_only: int
    cand_only: int
    neither: int

    @property
    def n(self) -> int:
        return self.both + self.base_only + self.cand_only + self.neither

    @property
    def base_right(self) -> int:
        return self.both + self.base_only

    @property
    def cand_right(self) -> int:
        return self.both + self.cand_only

    @property
    def drop(self) -> float:
        """Baseline accuracy minus candidate accuracy (positive: the candidate is worse)."""
        return (self.base_only - self.cand_only) / self.n


def paired_drop_interval(t: PairedTable, z: float) -> tuple[float, float]:
    """Newcombe's interval (method 10) of the accuracy drop ``t.drop`` for the normal quantile Z: each
    side is the distance to that side's Wilson limits of the two accuracies, added in quadrature with the
    correlation of the pairs (phi, its numerator reduced by n/2 when positive, as Newcombe does)."""
    if t.n <= 0:
        raise ValueError("an empty paired table has no interval")
    p1, p2 = t.base_right / t.n, t.cand_right / t.n
    l1, u1 = wilson(t.base_right, t.n, z)
    l2, u2 = wilson(t.cand_right, t.n, z)
    phi = _phi(t)
    below = _quadrature(p1 - l1, u2 - p2, phi)
    above = _quadrature(u1 - p1, p2 - l2, phi)
    return max(-1.0, t.drop - below), min(1.0, t.drop + above)


def _quadrature(x: float, y: float, phi: float) -> float:
    return math.sqrt(max(0.0, x * x + y * y - 2.0 * phi * x * y))


def _phi(t: PairedTable) -> float:
    margins = t.base_right * (t.n - t.base_right) * t.cand_right * (t.n - t.cand_right)
    if margins == 0:
        return 0.0
    a = t.both * t.neither - t.base_only * t.cand_only
    if a > t.n / 2:
        a_used = a - t.n / 2
    elif a >= 0:
        a_used = 0.0
    else:
        a_used = float(a)
    return a_used / math.sqrt(margins)
