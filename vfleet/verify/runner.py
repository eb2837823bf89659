"""`vfleet verify`: run smoke_tests/ with pytest in this process (vfleet.verify.suite) against a server,
write the report and, with a signing key, its signed verification summary (vfleet.verify.record.attestation)."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vfleet.errors import VfleetError
from vfleet.paths import reports_dir
from vfleet.profiles import Catalog, Profile
from vfleet.verify import apikey, tie
from vfleet.verify.answers.compare import compare
from vfleet.verify.answers.figure import AnswersFigure
from vfleet.verify.log import templates as logtemplates
from vfleet.verify.record import attestation
from vfleet.verify.record import image as image_mod
from vfleet.verify.record import report as report_mod
from vfleet.verify.record.model import Report

if TYPE_CHECKING:
    from securesystemslib.signer import CryptoSigner  # type: ignore[attr-defined]

DOCKER_HOST_RE = re.compile(r"^(tcp|ssh|unix|npipe|fd)://\S+$")

#: pytest's output as `vfleet verify` shows it and DIR/pytest-output.txt keeps it. In this process the
#: pytest plugins' modules (anyio: httpx imports it) are imported before pytest starts, so it cannot
#: rewrite their asserts: nothing of the suite's, and not worth a warning in every report.
PYTEST_ARGS = ("-v", "--tb=line", "-rfs", "-W", "ignore::pytest.PytestAssertRewriteWarning")


@dataclass
class VerifyResult:
    rc: int
    out: Path
    report: Report
    #: DIR/verification.dsse.json, or None with ``unsigned`` saying why (no key, no registry digest).
    attestation: Path | None = None
    unsigned: str = ""


def default_out(profile: str) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return reports_dir() / f"verify-{profile.replace('/', '-')}-{stamp}"


@dataclass(frozen=True)
class VerifyRequest:
    """One `vfleet verify` run: the server, the profile, where the report goes, and what it is told about
    the server (its API key's source, its log or container, the image it runs, the docker daemon)."""

    url: str
    profile: str
    out: Path
    api_key_env: str | None = None
    env_file: Path | None = None
    model: str | None = None
    log: Path | None = None
    container: str | None = None
    image: str | None = None
    docker_host: str | None = None
    #: pytest -k: a partial run, which never supports a promotion
    select: str | None = None
    #: the controller's ed25519 private key: the report's verification summary is signed with it
    sign_key: Path | None = None
    #: a key the caller holds in memory (staging made it for its container): used as it is, instead of reading
    #: ``api_key_env``, ``env_file`` or VLLM_API_KEY (its repr names the source, never the key)
    key: apikey.ApiKey | None = None


@dataclass(frozen=True)
class Baselines:
    """What the run is shown against, by the image's registry digest: the report whose warning templates the
    log's are compared with, and the answers run of that report (name, figure). `vfleet verify` looks up the
    last promoted report of the profile; promotion judges both again from the signed reports."""

    warnings: Callable[[str | None], logtemplates.Baseline | None] | None = None
    answers: Callable[[str | None], tuple[str, AnswersFigure] | None] | None = None


@dataclass(frozen=True)
class _Checked:
    """A request's inputs, checked: the loaded profile, the signer, the API key and the image record."""

    prof: Profile
    signer: CryptoSigner | None
    key: apikey.ApiKey
    out: Path
    record: image_mod.ImageRecord


def run(
    req: VerifyRequest, on_line: Callable[[str], None] | None = print, baselines: Baselines = Baselines()
) -> VerifyResult:
    """Run the suite; each line of pytest's output goes to ``on_line`` and to DIR/pytest-output.txt.
    With ``req.sign_key`` (the controller's ed25519 private key) the report's verification summary is signed
    beside it, PASSED or FAILED; without one the report is written and says nothing can promote it.

    Bad input (VfleetError, exit 2) is found before anything is written: the profile, the log, the URL,
    the API key source, the signing key, the report directory, and the image (with ``container``: read
    from docker on ``docker_host``, and an ``image`` reference that names another image is refused), and,
    with ``container``, a URL that does not reach that container (vfleet.verify.tie)."""
    checked = _check(req)
    checked.out.mkdir(parents=True, exist_ok=True)
    started, wall, session = _run_suite(req, checked, on_line)
    _judge_against(session, checked, baselines)
    rep = report_mod.build(
        session.results,
        session.exitstatus,
        session.figures,
        _meta(req, checked, started, wall),
        not_applicable=checked.prof.verify.not_applicable,
        partial=bool(req.select),  # a partial run (-k) never supports a promotion
    )
    report_mod.write(rep, checked.out)
    return _signed(VerifyResult(rc=0 if rep.passed else 1, out=checked.out, report=rep), checked.signer)


def _check(req: VerifyRequest) -> _Checked:
    prof = Catalog().load(req.profile)  # a bad profile name is a clear error here, not a pytest crash
    signer = attestation.load_signer(req.sign_key) if req.sign_key is not None else None
    if req.log is not None and not req.log.is_file():
        raise VfleetError(f"--log {req.log}: no such file; pass the server's log file or use --container NAME")
    if req.log is not None and req.container is not None:
        raise VfleetError("give the log either as --log FILE or as --container NAME, not both")
    if not re.match(r"^https?://", req.url):
        raise VfleetError(f"--url {req.url!r}: expected http://HOST:PORT")
    if req.docker_host is not None and not DOCKER_HOST_RE.match(req.docker_host):
        raise VfleetError(
            f"--docker-host {req.docker_host!r}: expected tcp://HOST:PORT, ssh://USER@HOST or unix:///PATH"
        )
    key = apikey.resolve(req.api_key_env, req.env_file, req.key)
    out = req.out.resolve()
    if (out / "report.json").exists():
        raise VfleetError(f"{out} already holds a report; pass another --out")
    if req.container:
        info = image_mod.inspect_container(req.container, req.docker_host)
        record = image_mod.from_container(req.container, req.docker_host, req.image, info)
        tie.require(req.url, req.container, info, req.docker_host)  # the traffic goes to the container named
    elif req.image:
        record = image_mod.from_reference(req.image, req.docker_host)
    else:
        record = image_mod.ImageRecord(ref=None, reason="no --image or --container given")
    return _Checked(prof, signer, key, out, record)


def _run_suite(
    req: VerifyRequest, checked: _Checked, on_line: Callable[[str], None] | None
) -> tuple[float, float, Any]:
    """(start time, wall seconds, the finished session) of the suite run in this process."""
    # pytest is imported here, not at CLI load: an image's vfleet has no pytest (it never runs the suite).
    from vfleet.verify import suite  # noqa: PLC0415

    session = suite.Session(
        suite.Inputs(
            url=req.url,
            profile=checked.prof,
            model=req.model or checked.prof.served_model_name(),
            api_key=checked.key.value or None,  # in memory only: never on a command line, in the environment or a file
            log=req.log.resolve() if req.log is not None else None,
            container=req.container,
            docker_host=req.docker_host,  # every docker call of the suite goes to the daemon of the lookup above
        )
    )
    out = checked.out
    args = [*PYTEST_ARGS, f"--junitxml={out / 'report.xml'}", *(["-k", req.select] if req.select else [])]
    started = time.time()
    t0 = time.monotonic()
    rc = suite.run(session, args, out / "pytest-output.txt", on_line)
    wall = time.monotonic() - t0
    if session.exitstatus is None:
        raise VfleetError(f"the suite exited {rc} without results; see {out / 'pytest-output.txt'}")
    return started, wall, session


def _judge_against(session: Any, checked: _Checked, baselines: Baselines) -> None:
    """The log's new warnings and the answers against the baselines, into the session's figures."""
    prof, digest = checked.prof, checked.record.digest
    if session.figures.get("log_warnings") is not None:
        current = [t["template"] for t in session.figures["log_warnings"]]
        base = baselines.warnings(digest) if baselines.warnings is not None else None
        session.figures["new_warnings"] = logtemplates.as_figures(
            logtemplates.judge(current, base, prof.verify.warnings)
        )
    fig = session.figures.get("answers")
    if isinstance(fig, AnswersFigure) and prof.verify.answers is not None and baselines.answers is not None:
        found = baselines.answers(digest)
        if found is not None:
            session.figures["answers_compared"] = compare(prof.verify.answers, fig, found[1], found[0])


def _meta(req: VerifyRequest, checked: _Checked, started: float, wall: float) -> dict[str, Any]:
    log_source = str(req.log) if req.log else (f"docker logs {req.container}" if req.container else None)
    return {
        "profile": req.profile,
        "production": checked.prof.production,
        "url": req.url,
        "served_model": req.model or checked.prof.served_model_name(),
        "image": checked.record.as_dict(),
        "api_key": checked.key.source,
        "docker_host": req.docker_host,
        "log": log_source,
        "selected": req.select,
        "started": dt.datetime.fromtimestamp(started, dt.UTC).isoformat(),
        "wall_s": round(wall, 2),
    }


def _signed(res: VerifyResult, signer: CryptoSigner | None) -> VerifyResult:
    if signer is None:
        res.unsigned = f"no signing key: {attestation.NO_SIGN_KEY}"
        return res
    try:
        res.attestation = attestation.write(res.out, res.report, signer)
    except VfleetError as exc:  # no registry digest: there is nothing a rollout pulls to attest
        res.unsigned = str(exc)
    return res
