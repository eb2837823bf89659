"""Boot-verify reports as `vfleet verify` writes them (report.build + report.write) and their verification
summaries signed with real ed25519 keys made once per test process: what the promotion, A/B, rollback-gate and
image-digest tests judge."""

from __future__ import annotations

import atexit
import datetime as dt
import functools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from support.answers import made_up_answers
from support.supply import make_key
from vfleet.verify.record import attestation, report
from vfleet.verify.record.model import CheckResult, Report

DIGEST = "sha256:" + "ab" * 32


def key_files(name: str = "controller") -> tuple[Path, Path]:
    """(private, public) PEM files of an ed25519 key made once per test process: the controller's key
    (the one the tests trust) or another one (``name``)."""
    return _key_files(name)


@functools.cache
def _key_files(name: str) -> tuple[Path, Path]:
    where = Path(tempfile.mkdtemp(prefix=f"vfleet-test-key-{name}-"))
    atexit.register(shutil.rmtree, where, True)
    return make_key(where, name)


def trusted(*names: str) -> Any:
    """The public keys of ``names`` (default: the controller's) trusted for the roles promotion checks
    (verify, ab), as `vfleet promote --trusted-key verify,ab=PUB` loads them."""
    return attestation.load_trusted([f"verify,ab={key_files(n)[1]}" for n in names or ("controller",)])


def load_row(c: int) -> dict[str, Any]:
    """A load level's figures (vfleet.verify.probe.load.LevelResult) at concurrency ``c``."""
    return {"concurrency": c, "requests": 8, "output_tokens": 16, "completed": 8, "empty": 0, "short": 0,
            "errors": [], "problems": [], "wall_s": 1.5, "out_tok_per_s": 10.0 * c, "ttft_p50_ms": 5.0,
            "ttft_p90_ms": 6.0, "tpot_p50_ms": 2.0, "tpot_p90_ms": 3.0, "latency_p50_ms": 9.0,
            "latency_p90_ms": 12.0, "latencies_ms": [8.0, 9.0, 12.0]}  # fmt: skip


#: The weights figure of boot-verify's test_weights (vfleet.verify.probe.weights), made up: a report that names no
#: weights cannot promote (test_a_report_that_names_no_weights_or_other_weights_is_refused).
MADE_UP_WEIGHTS = {"root": "/models/tiny", "where": "container vfleet-serve", "digest": "sha256:" + "4e" * 32,
                   "files": 5, "bytes": 1234}  # fmt: skip


def write_report(
    root: Path,
    profile: str = "tiny/cpu",
    digest: str = DIGEST,
    source: str = "reference",
    skipped: tuple[str, ...] = (),
    not_applicable: dict[str, str] | None = None,
    suite_passed: bool = True,
    figures: dict[str, Any] | None = None,
    sign_with: str | None = "controller",
    signed_at: dt.datetime | None = None,
    **extra: Any,
) -> Path:
    """A report as `vfleet verify` writes it (report.build + report.write): one check, passed (or failed
    when not ``suite_passed``), plus ``skipped`` checks; ``extra`` overrides report keys afterwards. Its
    verification summary is signed with key ``sign_with`` (None: not signed) at ``signed_at`` (now)."""
    checks = [
        CheckResult(
            id="t::test_health",
            name="test_health",
            file="t",
            message="",
            duration_s=0.1,
            outcome="passed" if suite_passed else "failed",
        )
    ]
    checks += [
        CheckResult(id=f"t::{s}", name=s, file="t", outcome="skipped", message=f"{s} did not run", duration_s=0.0)
        for s in skipped
    ]
    meta = {
        "profile": profile, "production": profile != "tiny/cpu", "url": "http://node:8000", "served_model": "tiny",
        "image": {"ref": f"localhost:5000/vfleet-cpu@{digest}", "id": "sha256:" + "cd" * 32, "digest": digest,
                  "repo_digests": [f"localhost:5000/vfleet-cpu@{digest}"], "source": source, "reason": "test",
                  "container": None, "docker_host": None},
        "api_key": "none", "docker_host": None, "log": None, "selected": None,
        "started": "2026-12-02T00:00:00+00:00", "wall_s": 1.0,
    }  # fmt: skip
    figs = {"vllm_version": "0.30.0", "log_warnings": [], "weights": MADE_UP_WEIGHTS, **(figures or {})}
    if "answers" not in figs and (made_up := made_up_answers(profile)) is not None:
        figs["answers"] = made_up
    rep = report.build(checks, 0 if suite_passed else 1, figs, meta, not_applicable=not_applicable)
    rep = Report.model_validate({**rep.dump(), **extra})
    out = root / f"verify-{len(list(root.iterdir())) if root.exists() else 0}"
    report.write(rep, out)
    if sign_with is not None:
        attestation.write(out, rep, attestation.load_signer(key_files(sign_with)[0]), now=signed_at)
    return out


def resign(rdir: Path, edit: Any, sign_with: str = "controller") -> None:
    """Sign again, with a real key, the Statement of RDIR's report after ``edit`` changed it: what a
    signer that got one fact wrong would make, so that each check of the Statement is seen catching it."""
    from vfleet.paths import profiles_digest
    from vfleet.supply.statements import sign

    path = rdir / "report.json"
    stmt = attestation.statement(
        Report.load(path), attestation.file_sha256(path), profiles_digest(), dt.datetime.now(dt.UTC)
    )
    edit(stmt)
    signer = attestation.load_signer(key_files(sign_with)[0])
    (rdir / attestation.ATTESTATION).write_text(json.dumps(sign(stmt, signer)))
