"""Staging: boot-verify images on this machine's dockerd, as a staging node does, and promote those
that pass.

For each image: `docker run` of the profile's rendered container (vfleet.server.ContainerServer: the
model mounted read-only, a random API key in an env file that is removed once the container started,
a free loopback port), wait for /health, run the real boot-verify suite against it with --container
(so the log is read after the traffic and the report records the digest of the image the container
runs), remove the container, and, if the report passed, promote the image by its registry digest.
Several images boot side by side (the boot dominates); they are verified one after the other.

Promotion needs the run's verification summary signed (vfleet.verify.record.attestation): staging signs it with
the signing key it is given and promotes trusting that key's public half. Without a key nothing is
staged for promotion: the refusal comes before any container starts.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfleet import promotion
from vfleet.errors import VfleetError
from vfleet.paths import reports_dir
from vfleet.profiles import Catalog
from vfleet.server import ContainerServer
from vfleet.supply import statements
from vfleet.verify import apikey, runner
from vfleet.verify.record import attestation
from vfleet.verify.record.model import Report


@dataclass(frozen=True)
class Candidate:
    """IMAGE is what this machine's docker runs; PROMOTE_AS is the reference promotion records (the
    same registry digest as the nodes see it, e.g. REPO@sha256:D); by default IMAGE itself."""

    image: str
    promote_as: str | None = None


@dataclass
class Staged:
    candidate: Candidate
    report_dir: Path
    report: Report
    boot_s: float | None
    promoted: dict[str, Any] | None

    @property
    def passed(self) -> bool:
        return self.report.passed


def stage(
    candidates: list[Candidate],
    profile: str,
    model_dir: Path,
    out_root: Path | None = None,
    registry: Path | None = None,
    promote: bool = True,
    health_timeout_s: float = 600.0,
    echo: Callable[[str], None] = print,
    sign_key: Path | None = None,
) -> list[Staged]:
    """Boot, verify (signing each summary with ``sign_key``) and, if it passed, promote each candidate;
    see the module docstring. Raises VfleetError for bad input (unknown profile, missing model directory,
    no candidates, no or a bad signing key when promoting) and when a container does not become healthy;
    every container started here is removed on the way out."""
    if not candidates:
        raise VfleetError("nothing to stage: name at least one image")
    prof = Catalog().load(profile)
    model_dir = Path(model_dir).resolve()
    if not model_dir.is_dir():
        raise VfleetError(f"model directory {model_dir} does not exist (--model-dir DIR)")
    if promote and sign_key is None:
        raise VfleetError(
            f"staging promotes only a signed boot-verify result: {attestation.NO_SIGN_KEY}, or verify only "
            "(--no-promote)"
        )
    # The key that signs this run's summaries is the one its promotions trust, for those roles only.
    own = [attestation.public_key_of(attestation.load_signer(sign_key))] if sign_key is not None else []
    trusted = statements.trusting(statements.VERIFY, own).plus(statements.AB, own)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    root = (out_root or reports_dir() / f"stage-{stamp}").resolve()
    servers: list[ContainerServer] = []
    results: list[Staged] = []
    try:
        for c in candidates:
            srv = ContainerServer(
                prof,
                model_dir,
                c.image,
                health_timeout_s=health_timeout_s,
                name_prefix="vfleet-stage",
                labels={"org.vfleet.role": "staging"},
            )
            echo(f"stage: starting {c.image} for {profile} as container {srv.name}")
            servers.append(srv.launch())
        for i, (c, srv) in enumerate(zip(candidates, servers, strict=True)):
            srv.wait_healthy()
            echo(f"stage: {c.image} answers /health after {srv.boot_s:.0f} s; boot-verify")
            out = root / f"{i + 1}-{_slug(c.image)}"
            # The key this run made for the container, handed to the run in memory: never on a command line or
            # in this process's environment.
            key = apikey.ApiKey(srv.api_key, f"the key staging made for container {srv.name}")
            res = runner.run(
                runner.VerifyRequest(
                    url=srv.url,
                    profile=profile,
                    out=out,
                    container=srv.name,
                    image=c.image,
                    sign_key=sign_key,
                    key=key,
                ),
                on_line=None,
            )
            srv.stop()
            entry = None
            if res.report.passed and promote:
                entry = promotion.promote(c.promote_as or c.image, profile, res.out, registry, keys=trusted)
            results.append(Staged(c, res.out, res.report, srv.boot_s, entry))
            verdict = "PASS" if res.report.passed else "FAIL"
            what = f"; promoted {entry['digest']}, {entry['baseline_note']}" if entry else ""
            what = what or ("; not promoted" if promote else "")
            echo(f"stage: {c.image}: boot-verify {verdict} (report {res.out / 'report.md'}){what}")
    finally:
        for srv in servers:
            srv.stop()
    return results


def _slug(ref: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in ref.rsplit("/", 1)[-1])[:80]
