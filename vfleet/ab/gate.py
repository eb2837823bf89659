"""What a promotion A/B must be: the floors on its settings, arms that differ, digests read from the
serving containers, and every comparison shown not worse (non-inferiority, vfleet.ab.stats.non_inferior).

The same checks run twice: `vfleet ab --promotion` refuses a run that could not meet them before
anything is measured, and the promotion gate (vfleet.promotion.judge: `vfleet promote` and the rollout's
`promote --check`) runs them again on the report it is given, with its signed summary (report_problems;
an ab.json is a file: nothing it says about its own verdict is taken as given, non-inferiority is
recomputed from each comparison's per-round figures, direction and the run's margin).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vfleet.ab import attest
from vfleet.ab.stats import METRICS, compare
from vfleet.errors import VfleetError
from vfleet.profiles import Catalog
from vfleet.supply.statements import Keyring

#: Fewer rounds than this are refused for a promotion A/B. At 10 rounds and 2% per-measurement noise a
#: clean build passes the 5% margin in nearly every run, at 3% noise it needs about 20 (synthetic,
#: tests/integration/judge/test_ab.py); with fewer the interval is too wide to show anything within a few percent.
PROMOTION_MIN_ROUNDS = 10
#: A margin (the minimum effect) above this is refused for a promotion A/B: a wider margin lets a
#: regression of that size through by definition.
PROMOTION_MAX_MARGIN = 0.10
#: The family-wise confidence a promotion A/B needs at least.
PROMOTION_MIN_CONFIDENCE = 0.95
#: Where the arms' digests must come from: read from the serving container (vfleet.verify.record.image).
DIGEST_SOURCE = "container"


def settings_problems(settings: dict[str, Any], profile_levels: Sequence[int] | None) -> list[str]:
    """Why ``settings`` (AbSettings.model_dump(), or a report's `settings`) are below a promotion A/B's
    floors; each names the floor. ``profile_levels``: the profile's verify.load levels, every one of which
    the run must measure (None: no profile, which a promotion A/B needs)."""
    why: list[str] = []
    rounds = settings.get("rounds")
    if not isinstance(rounds, int) or rounds < PROMOTION_MIN_ROUNDS:
        why.append(f"rounds {rounds}: a promotion A/B needs at least {PROMOTION_MIN_ROUNDS} (--rounds)")
    margin = settings.get("min_effect")
    if not isinstance(margin, int | float) or not (0 < margin <= PROMOTION_MAX_MARGIN):
        why.append(
            f"margin (min_effect) {margin}: a promotion A/B allows at most {PROMOTION_MAX_MARGIN} (--min-effect)"
        )
    conf = settings.get("confidence")
    if not isinstance(conf, int | float) or conf < PROMOTION_MIN_CONFIDENCE:
        why.append(f"confidence {conf}: a promotion A/B needs at least {PROMOTION_MIN_CONFIDENCE} (--confidence)")
    levels = settings.get("levels")
    if profile_levels is None:
        why.append("no profile: a promotion A/B measures the profile's verify.load levels (--profile)")
    elif not isinstance(levels, list) or not set(profile_levels) <= set(levels):
        missing = sorted(set(profile_levels) - set(levels or []))
        why.append(
            f"levels {levels}: a promotion A/B measures every verify.load level of the profile "
            f"{sorted(profile_levels)}; missing {missing} (--levels, or leave it to the profile)"
        )
    return why


def _norm_url(url: str) -> str:
    return url.rstrip("/").lower().replace("://localhost", "://127.0.0.1")


def same_url(a: str, b: str) -> bool:
    return _norm_url(a) == _norm_url(b)


def arms_problems(arms: dict[str, Any]) -> list[str]:
    """Why a promotion A/B's arms (report `arms`: url and image per arm) do not show two different builds,
    each with its digest read from its serving container."""
    why: list[str] = []
    a, b = arms.get("A") or {}, arms.get("B") or {}
    if same_url(str(a.get("url")), str(b.get("url"))):
        why.append(f"both arms are {a.get('url')}: a promotion A/B compares two servers (an A/A run is --aa)")
    digests = {}
    for name, arm in (("A", a), ("B", b)):
        img = arm.get("image") or {}
        if img.get("source") == DIGEST_SOURCE and not img.get("digest"):
            why.append(f"arm {name}'s digest None: its container's image has no registry digest ({img.get('reason')})")
        elif img.get("source") != DIGEST_SOURCE or not img.get("digest"):
            why.append(
                f"arm {name}'s digest {img.get('digest')} was not read from its serving container "
                f"(source {img.get('source')}): pass --container-{name.lower()} NAME [--docker-host-{name.lower()} URL]"
            )
        digests[name] = img.get("digest")
    if digests["A"] and digests["A"] == digests["B"]:
        why.append(f"both arms run {digests['A']}: a promotion A/B compares two different images")
    return why


def comparisons_problems(report: dict[str, Any], profile_levels: Sequence[int] | None) -> list[str]:
    """Every metric at every level shown not worse, recomputed from the report's per-round figures with
    the run's margin and per-comparison confidence (the stored intervals, `not_worse` and `verdict` are
    not read). A missing or short comparison is a problem, never a pass."""
    settings = report.get("settings") or {}
    margin, conf = settings.get("min_effect"), settings.get("confidence")
    if not isinstance(margin, int | float) or not isinstance(conf, int | float):
        return [f"settings min_effect {margin}, confidence {conf}: nothing to test against"]
    comps = [c for c in report.get("comparisons") or [] if isinstance(c, dict)]
    by_key = {(c.get("metric"), c.get("level")): c for c in comps}
    levels = sorted(profile_levels) if profile_levels else sorted({int(c.get("level") or 0) for c in comps})
    run_levels = settings.get("levels")
    # Bonferroni as vfleet.ab.run computed it, over the most levels the report shows anywhere (an edited,
    # shorter settings.levels must not narrow the intervals).
    shown = {c.get("level") for c in comps} | set(levels) | set(run_levels if isinstance(run_levels, list) else [])
    per_comparison = 1.0 - (1.0 - float(conf)) / (max(1, len(shown)) * len(METRICS))
    why: list[str] = []
    for level in levels:
        for m in METRICS:
            key = f"{m.key}@C{level}"
            c = by_key.get((m.key, level))
            if c is None:
                why.append(f"{key}: no comparison")
                continue
            a, b = c.get("a"), c.get("b")
            if not isinstance(a, list) or not isinstance(b, list) or len(a) < PROMOTION_MIN_ROUNDS:
                why.append(
                    f"{key}: {len(a) if isinstance(a, list) else 'no'} paired rounds, fewer than {PROMOTION_MIN_ROUNDS}"
                )
                continue
            try:
                again = compare(m, level, a, b, float(margin), per_comparison, int(settings.get("n_resamples") or 9999),
                                int(settings.get("seed") or 0))  # fmt: skip
            except (VfleetError, ValueError, TypeError) as exc:
                why.append(f"{key}: its per-round figures do not give an interval ({exc})")
                continue
            if not again.not_worse:
                why.append(f"{key}: {again.not_worse_reason}")
    return why


def promotion_problems(rep: dict[str, Any], baseline: str, digest: str, profile: str) -> list[str]:
    """Why an A/B report (vfleet.ab.report) cannot show that ``digest`` is not worse than ``baseline``.

    Non-inferiority, recomputed (comparisons_problems): a promotion run (`vfleet ab --promotion`) of this
    profile, complete, at or above the floors, whose arms are two different servers running two different
    images read from their containers, A the baseline and B ``digest``, and every metric at every one of
    the profile's levels shown not worse within the margin from the per-round figures. An inconclusive
    comparison is a refusal; the report's own verdicts are not read."""
    if rep.get("kind") != "vfleet-ab":
        return ["not an A/B report"]
    arms = rep.get("arms") or {}
    a_img, b_img = ((arms.get(n) or {}).get("image") or {} for n in ("A", "B"))
    why: list[str] = []
    if a_img.get("digest") != baseline:
        why.append(f"arm A runs {a_img.get('digest')}, not the promoted {baseline}")
    if b_img.get("digest") != digest:
        why.append(f"arm B runs {b_img.get('digest')}, not {digest}")
    if rep.get("profile") != profile:
        why.append(f"profile {rep.get('profile')}")
    if rep.get("mode") != "A/B":
        why.append(f"mode {rep.get('mode')}")
    if rep.get("promotion") is not True:
        why.append("not a promotion run (vfleet ab --promotion)")
    if rep.get("status") != "complete" or rep.get("broken") or not rep.get("comparisons"):
        why.append(f"the run did not complete ({rep.get('broken') or rep.get('status')})")
        return why
    if why:
        return why
    levels = list(Catalog().load(profile).verify.load.levels)
    why += arms_problems(arms)
    why += settings_problems(rep.get("settings") or {}, levels)
    if not why:  # the bootstrap only for a report that could pass otherwise
        why += comparisons_problems(rep, levels)
    return why


def report_problems(path: Path, baseline: str, digest: str, profile: str, keys: Keyring) -> list[str]:
    """Why the A/B report at ``path`` does not show ``digest`` not worse than ``baseline`` on ``profile``
    (promotion_problems), or its signed summary is not one a key of ``keys`` made for them (vfleet.ab.attest)."""
    try:
        rep = json.loads(path.read_text())
    except (OSError, ValueError):
        rep = None
    if not isinstance(rep, dict):
        return ["not a readable A/B report"]
    return promotion_problems(rep, baseline, digest, profile) + attest.check(path, keys, baseline, digest, profile)


def named_report(entry: dict[str, Any], baseline: str, digest: str, profile: str, keys: Keyring) -> Path:
    """The A/B report a promotions registry line names, if it shows the line's image (``digest``) not worse
    than ``baseline`` on ``profile`` (vfleet.promotion.check_line)."""
    named = entry.get("ab_report")
    if not isinstance(named, str) or not named:
        raise VfleetError(
            f"profile {profile} sets verify.ab_not_worse and {baseline} was promoted before this image, but the "
            "line names no A/B report against it"
        )
    why = report_problems(Path(named), baseline, digest, profile, keys)
    if why:
        raise VfleetError(f"its A/B report {named}: {'; '.join(why)}")
    return Path(named)
