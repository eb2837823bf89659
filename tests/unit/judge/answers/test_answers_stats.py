"""The answers gate's statistics (vfleet.verify.answers.stats) against scipy and published values."""

from __future__ import annotations

import pytest
from scipy import stats as sps

from vfleet.verify.answers.stats import (
    PairedTable,
    mcnemar_exact_worse,
    paired_drop_interval,
    wilson,
    z_one_sided,
    z_two_sided,
)


def test_quantiles() -> None:
    assert z_two_sided(0.95) == pytest.approx(1.959964, abs=1e-6)
    assert z_one_sided(0.95) == pytest.approx(1.644854, abs=1e-6)
    with pytest.raises(ValueError, match="confidence"):
        z_two_sided(1.0)


@pytest.mark.parametrize("n", [1, 10, 50, 200, 263])
@pytest.mark.parametrize("share", [0.0, 0.1, 0.31, 0.5, 0.87, 1.0])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_wilson_matches_scipy(n: int, share: float, confidence: float) -> None:
    k = round(share * n)
    want = sps.binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    low, high = wilson(k, n, z_two_sided(confidence))
    assert (low, high) == pytest.approx((want.low, want.high), abs=1e-12)


def test_wilson_known_values() -> None:
    """0 of 10 at 95%: [0, 0.2775] (the rule of three's score counterpart); 81 of 263: [0.2553, 0.3662]."""
    assert wilson(0, 10, z_two_sided(0.95)) == pytest.approx((0.0, 0.27753), abs=1e-5)
    assert wilson(81, 263, z_two_sided(0.95)) == pytest.approx((0.25529, 0.36621), abs=1e-5)
    with pytest.raises(ValueError, match="k <= n"):
        wilson(11, 10, 1.96)


@pytest.mark.parametrize(("b", "c"), [(0, 1), (1, 0), (3, 3), (5, 0), (10, 2), (2, 10), (40, 25), (120, 100)])
def test_mcnemar_matches_the_binomial_test(b: int, c: int) -> None:
    want = sps.binomtest(b, b + c, 0.5, alternative="greater").pvalue
    assert mcnemar_exact_worse(b, c) == pytest.approx(want, rel=1e-12)


def test_mcnemar_known_values() -> None:
    """5 vs 0 discordant pairs: 1/32; 10 vs 2: 79/4096; no discordant pair shows nothing: 1."""
    assert mcnemar_exact_worse(5, 0) == 1 / 32
    assert mcnemar_exact_worse(10, 2) == 79 / 4096
    assert mcnemar_exact_worse(0, 0) == 1.0


def test_newcombe_published_value() -> None:
    """The paired table 59/6/16/80 of Fagerland, Lydersen and Laake, "Statistical Analysis of Contingency
    Tables" (2017), ch. 8: difference -0.0621, Newcombe's 95% interval -0.1186 to -0.0046."""
    t = PairedTable(both=59, base_only=6, cand_only=16, neither=80)
    assert t.drop == pytest.approx(-0.0621, abs=1e-4)
    assert paired_drop_interval(t, z_two_sided(0.95)) == pytest.approx((-0.1186, -0.0046), abs=1e-4)


def test_newcombe_is_antisymmetric_and_contains_the_estimate() -> None:
    for b, c in [(0, 0), (3, 1), (7, 0), (2, 9)]:
        t = PairedTable(150, b, c, 40)
        swapped = PairedTable(150, c, b, 40)
        low, high = paired_drop_interval(t, z_one_sided(0.95))
        s_low, s_high = paired_drop_interval(swapped, z_one_sided(0.95))
        assert low <= t.drop <= high
        assert (low, high) == pytest.approx((-s_high, -s_low), abs=1e-12)


def test_newcombe_narrows_with_agreement() -> None:
    """A run identical to its baseline (A/A) bounds the drop near 0; the same accuracies with more disagreement
    (the same margins, other pairs) bound it wider."""
    same = paired_drop_interval(PairedTable(170, 0, 0, 30), z_one_sided(0.95))
    mixed = paired_drop_interval(PairedTable(160, 10, 10, 20), z_one_sided(0.95))
    assert same[1] < 0.02 < mixed[1]
