"""`vfleet ab --a URL --b URL`: compare two live vLLM servers (two builds, images or configurations of
the same model) on one workload. Rounds alternate the arms (A B, B A, A B, ...); each round measures
every concurrency level on both arms with fresh prompts of the same shape (a random salt per
measurement, so no arm profits from a warm prefix cache). Per round and level: output tok/s, TTFT p50
and TPOT p50 as vLLM's benchmark defines them. Per metric: the ratio B/A over the paired rounds with
a paired bootstrap interval, and a verdict (better, worse, inconclusive) against a minimum effect.

`--aa` runs an A/A check (B = A's URL when --b is not given): every verdict it reports is false.

Exit 0: the run completed (the verdicts are in the report); 1: an arm failed mid-run (no verdict);
2: bad input (an arm down, the arms serving different models or max_model_len, bad settings), found
before anything is measured. Writes DIR/ab.json, ab.md and ab_ratios.png."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vfleet.ab import report as report_mod
from vfleet.ab import run as ab
from vfleet.ab.stats import MIN_ROUNDS, require_scipy
from vfleet.errors import VfleetError
from vfleet.paths import reports_dir
from vfleet.profiles import Catalog
from vfleet.verify import apikey
from vfleet.verify import image as image_mod


def _levels(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected concurrencies like 1,8") from None


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="A/B two live servers: alternating rounds, paired bootstrap, verdict per metric",
        description=__doc__,
    )  # fmt: skip
    p.add_argument("--a", dest="url_a", required=True, metavar="URL", help="arm A (the baseline), http://HOST:PORT")
    p.add_argument("--b", dest="url_b", metavar="URL", help="arm B (the candidate); with --aa it defaults to A")
    p.add_argument("--aa", action="store_true", help="A/A check: both arms the same build; any verdict is false")
    p.add_argument(
        "--profile", help="serve profile (MODEL/PLATFORM): its verify.load levels and lengths, its model and context"
    )
    p.add_argument("--model", help="served model name (default: the one model both arms serve)")
    p.add_argument(
        "--levels",
        type=_levels,
        metavar="C1,C2",
        help=f"concurrencies (default: the profile's, else {ab.DEFAULT_LEVELS})",
    )
    p.add_argument("--rounds", type=int, help=f"paired rounds (default 20, at least {MIN_ROUNDS})")
    p.add_argument("--requests", type=int, metavar="N", help="requests per measurement (default max(8, 2 x C))")
    p.add_argument("--prompt-tokens", type=int, metavar="N", help="approximate prompt length (default 64)")
    p.add_argument("--output-tokens", type=int, metavar="N", help="fixed output length (default 32, at least 2)")
    p.add_argument("--min-effect", type=float, metavar="F", help="smallest change that counts, 0.05 = 5%% (default)")
    p.add_argument(
        "--confidence",
        type=float,
        metavar="F",
        help="family-wise confidence of the run's intervals (default 0.95; each at 1 - (1 - F) / (metrics x levels))",
    )
    p.add_argument("--seed", type=int, help="bootstrap seed (default 0)")
    p.add_argument(
        "--settle",
        type=float,
        metavar="S",
        help="seconds of quiet before each measurement (default 2: vLLM busy-polls 1 s after its last request)",
    )
    p.add_argument("--no-warmup", action="store_true", help="skip the warm-up measurement of every level and arm")
    p.add_argument(
        "--image-a",
        metavar="REF",
        help="the image arm A runs (REPO@sha256:D, or a tag docker knows a registry digest for): in the report, "
        "and what `vfleet promote` matches when the profile sets verify.ab_not_worse",
    )
    p.add_argument("--image-b", metavar="REF", help="the image arm B runs (the candidate), likewise")
    apikey.add_options(p)
    p.add_argument("--out", type=Path, help="report directory, must hold no A/B report (default REPORTS/ab-<time>)")
    return p


def run(args: argparse.Namespace) -> int:
    require_scipy()
    url_b = args.url_b
    if url_b is None:
        if not args.aa:
            raise VfleetError("--b URL is required (or --aa for an A/A check of --a against itself)")
        url_b = args.url_a
    profile = Catalog().load(args.profile) if args.profile else None
    overrides: dict[str, Any] = {
        "levels": args.levels,
        "rounds": args.rounds,
        "requests_per_level": args.requests,
        "prompt_tokens": args.prompt_tokens,
        "output_tokens": args.output_tokens,
        "min_effect": args.min_effect,
        "confidence": args.confidence,
        "seed": args.seed,
        "warmup": False if args.no_warmup else None,
        "settle_s": args.settle,
    }
    s = ab.settings_from_profile(profile, **overrides) if profile else ab.settings(**overrides)
    out: Path = (args.out or reports_dir() / f"ab-{report_mod.stamp()}").resolve()
    if (out / report_mod.JSON_NAME).exists():
        raise VfleetError(f"{out} already holds an A/B report; pass another --out")
    images = {
        name: image_mod.from_reference(ref).as_dict() for name, ref in (("A", args.image_a), ("B", args.image_b)) if ref
    }
    key = apikey.resolve(args.api_key_env, args.env_file)
    model = args.model or (profile.served_model_name() if profile else None)
    arm_a = ab.probe_arm("A", args.url_a, key.value, model)
    arm_b = ab.probe_arm("B", url_b, key.value, model)
    ab.check_arms(arm_a, arm_b, profile)
    print(
        f"{'A/A' if args.aa else 'A/B'} of {arm_a.model}: A {arm_a.url}, B {arm_b.url}; {s.rounds} rounds at "
        + ", ".join(f"C{c}" for c in s.levels),
        flush=True,
    )
    res = ab.run(arm_a, arm_b, s, aa=args.aa, progress=lambda m: print(f"  {m}", flush=True))
    rep = report_mod.build(res, {"profile": args.profile, "api_key": key.source}, images)
    report_mod.write(rep, out)
    print(summary(rep, out))
    return 1 if res.broken else 0


def summary(rep: dict[str, Any], out: Path) -> str:
    lines = [f"{rep['mode']} {rep['status']} in {rep['wall_s']:.0f} s"]
    if rep["broken"]:
        lines.append(f"  no verdict: the run broke: {rep['broken']}")
    for c in rep["comparisons"]:
        iv = f"[{c['low']:.3f}, {c['high']:.3f}]" if c["low"] is not None else "(no interval)"
        lines.append(
            f"  C{c['level']} {c['label']:<12} B/A {c['ratio']:.3f} {iv} {c['verdict'].upper():<12} ({c['direction']})"
        )
    if rep["mode"] == "A/A" and rep["comparisons"]:
        fv = rep["false_verdicts"] or []
        lines.append(f"  A/A false verdicts: {len(fv)} of {len(rep['comparisons'])} {', '.join(fv)}".rstrip())
    lines.append(f"report: {out / report_mod.MD_NAME} (also {report_mod.JSON_NAME})")
    return "\n".join(lines)
