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

from vfleet.ab import attest as ab_attest
from vfleet.ab import gate
from vfleet.ab import report as report_mod
from vfleet.ab import run as ab
from vfleet.ab.stats import MIN_ROUNDS, require_scipy
from vfleet.errors import VfleetError
from vfleet.paths import reports_dir
from vfleet.profiles import Catalog
from vfleet.verify import apikey, tie
from vfleet.verify.record import attestation
from vfleet.verify.record import image as image_mod


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.1%}"


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
        "--promotion",
        action="store_true",
        help="a promotion A/B (what `vfleet promote` accepts where the profile sets verify.ab_not_worse): needs "
        f"--profile and both --container-a/--container-b, at least {gate.PROMOTION_MIN_ROUNDS} rounds, the "
        f"profile's levels, a margin (--min-effect) of at most {gate.PROMOTION_MAX_MARGIN}, two different images",
    )
    for arm, role in (("a", "A (the promoted baseline)"), ("b", "B (the candidate)")):
        p.add_argument(
            f"--container-{arm}",
            metavar="NAME",
            help=f"the container serving arm {role}: its image's registry digest is read with docker inspect "
            "(as `vfleet verify --container` reads it) and recorded in the report",
        )
        p.add_argument(f"--docker-host-{arm}", metavar="URL", help=f"DOCKER_HOST where --container-{arm} runs")
        p.add_argument(
            f"--image-{arm}",
            metavar="REF",
            help=f"cross-check only: the image arm {arm.upper()} should run (REPO@sha256:D or a tag); needs "
            f"--container-{arm}, and disagreeing with what the container runs is an error",
        )
    apikey.add_options(p)
    p.add_argument(
        "--sign-key",
        type=Path,
        metavar="PRIV",
        help="ed25519 private key (PEM) that signs a promotion A/B's summary, ab.dsse.json (default VFLEET_SIGN_KEY); "
        "`vfleet promote` accepts only a signed promotion A/B",
    )
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
    if not args.aa and gate.same_url(args.url_a, url_b):
        raise ab.AbInputError(
            f"--a and --b are both {args.url_a}: an A/B compares two servers; for a server against itself pass --aa"
        )
    if args.promotion:
        if args.aa:
            raise ab.AbInputError("--promotion and --aa: an A/A run cannot show a new image not worse")
        floors = gate.settings_problems(s.model_dump(), list(profile.verify.load.levels) if profile else None)
        if floors:
            raise ab.AbInputError("below a promotion A/B's floors: " + "; ".join(floors))
    sign_key = attestation.sign_key_path(args.sign_key) if args.promotion else None
    signer = attestation.load_signer(sign_key) if sign_key is not None else None  # a bad key fails before the run
    urls = {"A": args.url_a, "B": url_b}
    images, inspected = read_images(args)
    if args.promotion:
        bad = gate.arms_problems({n: {"url": u, "image": images.get(n)} for n, u in urls.items()})
        if bad:
            raise ab.AbInputError("not a promotion A/B: " + "; ".join(bad))
    for name, (container, host, info) in inspected.items():
        tie.require(urls[name], container, info, host)  # the summary attests the image the traffic measured
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
    rep = report_mod.build(res, {"profile": args.profile, "api_key": key.source, "promotion": args.promotion}, images)
    written = report_mod.write(rep, out)
    print(summary(rep, out))
    if args.promotion:
        if signer is not None and not res.broken:
            print(f"signed A/B summary: {ab_attest.write(written, signer)}")
        else:
            why = "the run broke off" if res.broken else attestation.NO_SIGN_KEY
            print(f"NOT SIGNED, so this A/B cannot promote the image: {why}")
    return 1 if res.broken else 0


def read_images(
    args: argparse.Namespace,
) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[str, str | None, dict[str, Any]]]]:
    """Each arm's image as its serving container runs it (vfleet.verify.record.image.from_container: docker
    inspect of the container's image RepoDigests). A typed --image-X is only a cross-check: without
    --container-X it is refused (a typed digest is a label, not a reading), and one that names another
    image than the container runs is an error. Also each arm's (container, docker host, docker inspect),
    to tie the arm's URL to its container (vfleet.verify.tie, as `vfleet verify` does)."""
    images: dict[str, dict[str, Any]] = {}
    inspected: dict[str, tuple[str, str | None, dict[str, Any]]] = {}
    for name in ("A", "B"):
        low = name.lower()
        container, host, ref = (getattr(args, f"{k}_{low}") for k in ("container", "docker_host", "image"))
        if container is None:
            if ref is not None:
                raise ab.AbInputError(
                    f"--image-{low} {ref} without --container-{low}: an arm's digest is read from the container "
                    f"serving it, never typed; pass --container-{low} NAME [--docker-host-{low} URL]"
                )
            if host is not None:
                raise ab.AbInputError(f"--docker-host-{low} without --container-{low}")
            continue
        info = image_mod.inspect_container(container, host)
        images[name] = image_mod.from_container(container, host, ref, info).as_dict()
        inspected[name] = (container, host, info)
    return images, inspected


def summary(rep: dict[str, Any], out: Path) -> str:
    lines = [f"{rep['mode']} {rep['status']} in {rep['wall_s']:.0f} s"]
    if rep["broken"]:
        lines.append(f"  no verdict: the run broke: {rep['broken']}")
    for c in rep["comparisons"]:
        iv = f"[{c['low']:.3f}, {c['high']:.3f}]" if c["low"] is not None else "(no interval)"
        seen = f"{c['detectable']:.1%}" if c.get("detectable") is not None else "–"
        ni = "NOT WORSE" if c.get("not_worse") else "NOT SHOWN NOT WORSE"
        lines.append(
            f"  C{c['level']} {c['label']:<12} B/A {c['ratio']:.3f} {iv} {c['verdict'].upper():<12} "
            f"{ni:<19} detectable {seen:>6} ({c['direction']})"
        )
    if rep["comparisons"] and not rep["broken"]:
        margin = rep["settings"]["min_effect"]
        lines.append(
            f"  not worse within {margin:.0%} on every metric: {'yes' if rep.get('not_worse') else 'NO'}; "
            f"smallest regression this run could show: {_pct(rep.get('detectable'))} (the largest 'detectable' above)"
        )
    if rep["mode"] == "A/A" and rep["comparisons"]:
        fv = rep["false_verdicts"] or []
        lines.append(f"  A/A false verdicts: {len(fv)} of {len(rep['comparisons'])} {', '.join(fv)}".rstrip())
    lines.append(f"report: {out / report_mod.MD_NAME} (also {report_mod.JSON_NAME})")
    return "\n".join(lines)
