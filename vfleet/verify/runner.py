"""`vfleet verify`: run smoke_tests/ with pytest in this process (vfleet.verify.suite) against a server,
write the report and, with a signing key, its signed verification summary (vfleet.verify.record.attestation)."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vfleet.errors import VfleetError
from vfleet.paths import reports_dir
from vfleet.profiles import Catalog
from vfleet.verify import apikey, tie
from vfleet.verify.answers.compare import compare
from vfleet.verify.answers.figure import AnswersFigure
from vfleet.verify.log import templates as logtemplates
from vfleet.verify.record import attestation
from vfleet.verify.record import image as image_mod
from vfleet.verify.record import report as report_mod
from vfleet.verify.record.model import Report

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


def run(
    url: str,
    profile: str,
    out: Path,
    api_key_env: str | None = None,
    model: str | None = None,
    log: Path | None = None,
    container: str | None = None,
    image: str | None = None,
    select: str | None = None,
    on_line: Callable[[str], None] | None = print,
    env_file: Path | None = None,
    docker_host: str | None = None,
    sign_key: Path | None = None,
    warning_baseline: Callable[[str | None], logtemplates.Baseline | None] | None = None,
    answers_baseline: Callable[[str | None], tuple[str, AnswersFigure] | None] | None = None,
) -> VerifyResult:
    """Run the suite; each line of pytest's output goes to ``on_line`` and to DIR/pytest-output.txt.
    With ``sign_key`` (the controller's ed25519 private key) the report's verification summary is signed
    beside it, PASSED or FAILED; without one the report is written and says nothing can promote it.

    Bad input (VfleetError, exit 2) is found before anything is written: the profile, the log, the URL,
    the API key source, the signing key, the report directory, and the image (with ``container``: read
    from docker on ``docker_host``, and an ``image`` reference that names another image is refused), and,
    with ``container``, a URL that does not reach that container (vfleet.verify.tie).

    ``warning_baseline`` gives, for the image's registry digest, the report whose warning templates the
    log's are compared with (the last promoted one of the profile; `vfleet verify` looks it up): the
    report lists the new ones (figures.new_warnings). The promotion gate judges them again. ``answers_baseline``
    gives the answers run of that report (name, figure): the report shows this run against it
    (figures.answers_compared); promotion judges it again from the signed reports."""
    prof = Catalog().load(profile)  # a bad profile name is a clear error here, not a pytest crash
    signer = attestation.load_signer(sign_key) if sign_key is not None else None
    if log is not None and not log.is_file():
        raise VfleetError(f"--log {log}: no such file; pass the server's log file or use --container NAME")
    if log is not None and container is not None:
        raise VfleetError("give the log either as --log FILE or as --container NAME, not both")
    if not re.match(r"^https?://", url):
        raise VfleetError(f"--url {url!r}: expected http://HOST:PORT")
    if docker_host is not None and not DOCKER_HOST_RE.match(docker_host):
        raise VfleetError(f"--docker-host {docker_host!r}: expected tcp://HOST:PORT, ssh://USER@HOST or unix:///PATH")
    key = apikey.resolve(api_key_env, env_file)
    out = out.resolve()
    if (out / "report.json").exists():
        raise VfleetError(f"{out} already holds a report; pass another --out")
    if container:
        info = image_mod.inspect_container(container, docker_host)
        record = image_mod.from_container(container, docker_host, image, info)
        tie.require(url, container, info, docker_host)  # the traffic goes to the container the report names
    elif image:
        record = image_mod.from_reference(image, docker_host)
    else:
        record = image_mod.ImageRecord(ref=None, reason="no --image or --container given")
    out.mkdir(parents=True, exist_ok=True)
    # pytest is imported here, not at CLI load: an image's vfleet has no pytest (it never runs the suite).
    from vfleet.verify import suite  # noqa: PLC0415

    session = suite.Session(
        suite.Inputs(
            url=url,
            profile=prof,
            model=model or prof.served_model_name(),
            api_key=key.value or None,  # in memory only: never on a command line, in the environment or a file
            log=log.resolve() if log is not None else None,
            container=container,
            docker_host=docker_host,  # every docker call of the suite goes to the same daemon as the lookup above
        )
    )
    args = [*PYTEST_ARGS, f"--junitxml={out / 'report.xml'}", *(["-k", select] if select else [])]
    started = time.time()
    t0 = time.monotonic()
    rc = suite.run(session, args, out / "pytest-output.txt", on_line)
    wall = time.monotonic() - t0
    if session.exitstatus is None:
        raise VfleetError(f"the suite exited {rc} without results; see {out / 'pytest-output.txt'}")
    if session.figures.get("log_warnings") is not None:
        current = [t["template"] for t in session.figures["log_warnings"]]
        base = warning_baseline(record.digest) if warning_baseline is not None else None
        session.figures["new_warnings"] = logtemplates.as_figures(
            logtemplates.judge(current, base, prof.verify.warnings)
        )
    fig = session.figures.get("answers")
    if isinstance(fig, AnswersFigure) and prof.verify.answers is not None and answers_baseline is not None:
        found = answers_baseline(record.digest)
        if found is not None:
            session.figures["answers_compared"] = compare(prof.verify.answers, fig, found[1], found[0])
    log_source = str(log) if log else (f"docker logs {container}" if container else None)
    meta = {
        "profile": profile,
        "production": prof.production,
        "url": url,
        "served_model": model or prof.served_model_name(),
        "image": record.as_dict(),
        "api_key": key.source,
        "docker_host": docker_host,
        "log": log_source,
        "selected": select,
        "started": dt.datetime.fromtimestamp(started, dt.UTC).isoformat(),
        "wall_s": round(wall, 2),
    }
    rep = report_mod.build(
        session.results,
        session.exitstatus,
        session.figures,
        meta,
        not_applicable=prof.verify.not_applicable,
        partial=bool(select),  # a partial run (-k) never supports a promotion
    )
    report_mod.write(rep, out)
    res = VerifyResult(rc=0 if rep.passed else 1, out=out, report=rep)
    if signer is None:
        res.unsigned = f"no signing key: {attestation.NO_SIGN_KEY}"
        return res
    try:
        res.attestation = attestation.write(out, rep, signer)
    except VfleetError as exc:  # no registry digest: there is nothing a rollout pulls to attest
        res.unsigned = str(exc)
    return res
