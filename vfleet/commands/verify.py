"""`vfleet verify`: run the boot-verify suite (smoke_tests/) against a live server; the exit code is
the gate: 0 only when no check failed and every skipped check is declared not applicable by the
profile (verify.not_applicable), 1 otherwise, 2 for bad input. Writes DIR/report.json, report.xml
(JUnit), report.md and PNG plots, and, with the controller's signing key (--sign-key PRIV or
VFLEET_SIGN_KEY), DIR/verification.dsse.json: the signed verification summary of the image digest that
`vfleet promote` requires. Without a key the report is written, but it cannot promote the image.

The API key is VLLM_API_KEY from the environment (as vLLM's server takes it), or VLLM_API_KEY from
the node's docker env file (--env-file), or the variable --api-key-env names; it is passed on through
the environment, never on a command line, and never written to the report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vfleet import baseline, promotion
from vfleet.verify import apikey, runner
from vfleet.verify.answers.figure import summary as answers_summary
from vfleet.verify.record import attestation
from vfleet.verify.record.model import Report


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="boot-verify a live server (the promotion gate)", description=__doc__
    )
    p.add_argument("--url", required=True, help="server base URL, e.g. http://node1:8000")
    p.add_argument("--profile", required=True, help="serve profile whose expectations apply (MODEL/PLATFORM)")
    apikey.add_options(p)
    p.add_argument("--model", help="served model name (default: the profile's)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--log", type=Path, help="the server log file")
    src.add_argument(
        "--container",
        help="the serving container: its log (`docker logs`), image manifest and GPU health, and the image it "
        "runs (id and registry digest, read from docker)",
    )
    p.add_argument(
        "--docker-host",
        metavar="URL",
        help="docker daemon of the container (tcp://NODE:2375, ssh://USER@NODE): DOCKER_HOST for every docker call",
    )
    p.add_argument(
        "--image",
        metavar="REF",
        help="image reference (REPO:TAG or REPO@sha256:D); with --container it must be what the container runs",
    )
    p.add_argument(
        "--out", type=Path, help="report directory, must hold no report (default REPORTS/verify-<profile>-<time>)"
    )
    p.add_argument(
        "--sign-key",
        type=Path,
        metavar="PRIV",
        help="ed25519 private key (PEM) that signs the verification summary (default VFLEET_SIGN_KEY); "
        "without one the result cannot promote",
    )
    p.add_argument(
        "-k",
        dest="select",
        metavar="EXPR",
        help="run only the checks matching EXPR (pytest -k); the report is then partial",
    )
    return p


def run(args: argparse.Namespace) -> int:
    out = args.out or runner.default_out(args.profile)
    req = runner.VerifyRequest(
        url=args.url,
        profile=args.profile,
        out=out,
        api_key_env=args.api_key_env,
        env_file=args.env_file,
        model=args.model,
        log=args.log,
        container=args.container,
        docker_host=args.docker_host,
        image=args.image,
        select=args.select,
        sign_key=attestation.sign_key_path(args.sign_key),
    )
    against = runner.Baselines(
        warnings=lambda digest: baseline.warning_baseline(
            args.profile, promotion.default_registry(), digest, keys=None
        ),
        answers=lambda digest: baseline.answers_listing(args.profile, promotion.default_registry(), digest),
    )
    res = runner.run(req, baselines=against)
    print(summary(res.report, res.out))
    print(signed_line(res))
    return res.rc


def signed_line(res: runner.VerifyResult) -> str:
    """Whether the result can promote: the signed summary, or why there is none."""
    if res.attestation is not None:
        return f"signed verification summary: {res.attestation}"
    return f"NOT SIGNED, so this result cannot promote the image: {res.unsigned}"


def summary(rep: Report, out: Path) -> str:
    c = rep.counts
    lines = [
        f"boot-verify {'PASS' if rep.passed else 'FAIL'}{' (partial)' if rep.partial else ''}: "
        f"{rep.profile} at {rep.url} (vLLM {rep.vllm_version}), "
        f"{c.passed} passed, {c.failed} failed, {c.skipped} skipped in {rep.wall_s:.0f} s",
    ]
    for t in rep.checks:
        if t.outcome == "failed":
            lines.append(f"  FAILED {t.id}: {t.message.splitlines()[0] if t.message else ''}")
    for u in rep.unexcused_skips:
        why = u.message.splitlines()[0] if u.message else "no reason given"
        lines.append(f"  not verified: {u.id} skipped: {why}")
    if rep.unexcused_skips:
        lines.append(
            "  (a skipped check fails the gate unless the profile declares it in verify.not_applicable with a reason)"
        )
    img = rep.image
    if img.ref or img.id:
        lines.append(
            f"  image {img.ref} id {img.id or '-'}: registry digest {img.digest or 'none'} ({img.source}; {img.reason})"
        )
    f = rep.figures
    for probe in f.probes or []:
        lines.append(f"  probe {probe.prompt!r}: {probe.text.strip()[:100]!r} (expected {probe.expect!r})")
    if f.answers is not None:
        lines.append(f"  answers: {answers_summary(f.answers)}")
    if f.integrity:
        i = f.integrity
        lines.append(
            f"  integrity probe: pool {i.num_gpu_blocks} blocks x {i.block_size} = "
            f"{i.pool_tokens:,} tokens, {i.fillers} fillers ({i.pool_cycles}x)"
            f"; max logprob gap {i.max_logprob_gap:.3g} nats (tolerance {i.logprob_tolerance:g})"
        )
    for r in sorted(f.load or [], key=lambda r: r.concurrency):
        lines.append(
            f"  C{r.concurrency}: {r.out_tok_per_s:.1f} out tok/s, TTFT p50 "
            f"{r.ttft_p50_ms or 0:.0f} ms, TPOT p50 {r.tpot_p50_ms or 0:.2f} ms, {r.completed}/{r.requests} ok"
        )
    lines.append(f"report: {out / 'report.md'} (also report.json, report.xml)")
    return "\n".join(lines)
