"""A/B reports made from synthetic rounds, as `vfleet ab --promotion` writes them, signed with the tests'
keys: what the A/B and promotion tests judge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from vfleet.ab import report as report_mod
from vfleet.ab import run as ab
from vfleet.ab.stats import (
    METRICS,
    compare,
)


def drifting_rounds(n: int, effect: float, noise: float, seed: int) -> tuple[list[float], list[float]]:
    """Per-round A and B where the machine's speed drifts a lot from round to round (shared by both arms
    of a round) and B = A x effect x small noise."""
    rng = np.random.default_rng(seed)
    speed = 100.0 * np.exp(rng.normal(0, 0.3, n))  # 30% round-to-round drift
    a = speed * np.exp(rng.normal(0, noise, n))
    b = speed * effect * np.exp(rng.normal(0, noise, n))
    return [float(x) for x in a], [float(x) for x in b]


def make_arm(name: str, model: str, mml: int | None) -> ab.Arm:
    from vfleet.verify.client import Client

    return ab.Arm(name, f"http://h{name}:8000", model, None, mml, "0.30.0", Client(f"http://h{name}:8000"))


def ab_report(
    root: Path,
    name: str,
    baseline: str,
    candidate: str,
    effect: float,
    noise: float = 0.01,
    rounds: int = 12,
    source: str = "container",
    sign_with: str | None = "controller",
    **extra: Any,
) -> Path:
    """A promotion A/B report as `vfleet ab --promotion --container-a --container-b --sign-key` writes it,
    from synthetic rounds with ``effect`` at the profile's levels (C1, C32), its summary signed by the key
    SIGN_WITH (test_promotion's keys; None: unsigned)."""
    s = ab.settings(levels=[1, 32], rounds=rounds, n_resamples=1000)
    run = ab.AbRun(arms={"A": make_arm("A", "tiny", 2048), "B": make_arm("B", "tiny", 2048)}, settings=s, aa=False)
    conf = ab.per_comparison_confidence(s)
    for level in s.levels:
        for i, metric in enumerate(METRICS):
            eff = effect if metric.higher_is_better else 1 / effect
            a, b = drifting_rounds(rounds, effect=eff, noise=noise, seed=i + level)
            run.comparisons.append(compare(metric, level, a, b, confidence=conf, n_resamples=1000))
    images = {arm: {"ref": f"localhost:5000/vfleet-cpu@{d}", "digest": d, "source": source}
              for arm, d in (("A", baseline), ("B", candidate))}  # fmt: skip
    rep = report_mod.build(run, {"profile": PROFILE, "promotion": True, **extra}, images)
    written = report_mod.write(rep, root / name)
    if sign_with is not None:
        from support.reports import key_files
        from vfleet.ab import attest as ab_attest
        from vfleet.verify.record import attestation

        ab_attest.write(written, attestation.load_signer(key_files(sign_with)[0]))
    return written.parent


PROFILE = "tiny/cpu"
