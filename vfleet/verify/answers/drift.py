"""Drift: how far the candidate's teacher-forced log-probabilities of the reference text moved from the
baseline's, over the same tokens (docs/answers.md, "Drift")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from vfleet.profile_answers import DriftAllowance
from vfleet.verify.answers.records import LogprobRecord, RecordError


@dataclass(frozen=True)
class Drift:
    positions: int
    mean_abs: float
    p99: float
    max_abs: float
    top1_share: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The Q-quantile of VALUES by the nearest-rank rule: the ceil(q * n)-th smallest value."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def check_paired(base: LogprobRecord, cand: LogprobRecord) -> None:
    """Refuse two records that are not of the same reference text in the same tokens."""
    if base.reference_sha256 != cand.reference_sha256:
        raise RecordError(
            f"refused: the baseline's reference text ({base.reference} sha256 {base.reference_sha256[:12]}) is not "
            f"the candidate's ({cand.reference} sha256 {cand.reference_sha256[:12]}); log-probabilities are compared "
            "on one text only: verify the baseline image again with this reference"
        )
    if base.token_ids != cand.token_ids:
        first = next(
            (i for i, (a, b) in enumerate(zip(base.token_ids, cand.token_ids, strict=False)) if a != b),
            min(len(base.token_ids), len(cand.token_ids)),
        )
        raise RecordError(
            f"refused: the reference text has other tokens in the candidate ({len(cand.token_ids)} tokens) than in "
            f"the baseline ({len(base.token_ids)} tokens), first at position {first}: the tokenizer changed, so no "
            "position can be compared; a new tokenizer is a new model, promoted as a first promotion of a new profile"
        )
    if len(base.token_ids) < 2:
        raise RecordError("refused: the reference text has fewer than two tokens, so no position has a log-probability")


def drift(base: LogprobRecord, cand: LogprobRecord) -> Drift:
    """The drift of CAND from BASE over every position but the first (which has no log-probability)."""
    check_paired(base, cand)
    diffs: list[float] = []
    changed = 0
    for i in range(1, len(base.token_ids)):
        b, c = base.logprobs[i], cand.logprobs[i]
        assert b is not None and c is not None  # LogprobRecord refuses a missing value after position 0
        diffs.append(abs(c - b))
        changed += base.top1[i] != cand.top1[i]
    return Drift(
        positions=len(diffs),
        mean_abs=sum(diffs) / len(diffs),
        p99=nearest_rank(diffs, 0.99),
        max_abs=max(diffs),
        top1_share=changed / len(diffs),
    )


def exceeded(d: Drift, allowance: DriftAllowance) -> list[str]:
    """One line for each metric of D above ALLOWANCE (empty: within it)."""
    out = []
    for name in ("mean_abs", "p99", "top1_share"):
        seen, allowed = getattr(d, name), getattr(allowance, name)
        if seen > allowed:
            out.append(
                f"drift {name} {seen:.4g} above the allowance {allowed:.4g} (measured by {allowance.measured_by})"
            )
    return out


def allowance_from_aa(runs: Sequence[Drift], factor: float, measured_by: str) -> DriftAllowance:
    """The allowance a profile can declare from A/A runs (the same image compared with itself): FACTOR times
    the largest value each metric took, the top-1 share capped at 1."""
    if not runs:
        raise ValueError("an allowance needs at least one A/A comparison")
    if factor < 1.0:
        raise ValueError(f"factor {factor} < 1 would allow less drift than the A/A floor itself shows")
    return DriftAllowance(
        mean_abs=factor * max(r.mean_abs for r in runs),
        p99=factor * max(r.p99 for r in runs),
        top1_share=min(1.0, factor * max(r.top1_share for r in runs)),
        measured_by=measured_by,
    )
