"""The signed verification summary of a boot-verify run: what lets a report promote an image.

A report.json is a file anyone can copy and edit; its `passed` proves nothing. So `vfleet verify`,
given the controller's ed25519 key, writes beside it DIR/verification.dsse.json: an in-toto Statement
(v1) with the SLSA Verification Summary predicate (https://slsa.dev/verification_summary/v1), in a DSSE
envelope signed by the key of the verify role (vfleet.supply.statements: a key trusted for another role,
image provenance or A/B summaries, does not make a verification summary):

  subject               the image's registry manifest digest (REPO, sha256), as a rollout pulls it
  verifier.id           BOOT_VERIFY_ID; verifier.version: vfleet's version, the vfleet revision that ran
                        the suite (the checkout's git commit, "-dirty" when its build inputs changed; in an
                        image, the revision its build recorded) and the sha256 of the smoke_tests/ suite it
                        ran (vfleet.digests.tree_digest)
  timeVerified          when it was signed, right after the suite; promotion refuses a pass older
                        than the profile's verify.report_max_age_days
  resourceUri           docker-image://REPO@sha256:D
  policy                the serve profile the checks applied (name) and the serve-profiles digest of
                        the checkout that ran them (vfleet.paths.profiles_digest, the image label
                        org.vfleet.profiles.digest)
  verificationResult    PASSED or FAILED, recomputed from the checks (vfleet.verify.record.model.verdict_problems)
  verifiedLevels        [VERIFIED_LEVEL] on a pass, [FAILED] otherwise
  vfleetReport          report.json by name and sha256: an edit of any byte after signing is seen
  vfleetWeights         the model manifest digest of the weights the server loaded (figures.weights;
                        vfleet.verify.probe.weights), absent when the run could not name them

`check` is what `vfleet promote` and `promote --check` ask of it. The private key is read only to sign,
never copied, logged or written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vfleet import __version__, settings
from vfleet.digests import tree_digest
from vfleet.errors import VfleetError
from vfleet.imageref import parse as parse_ref
from vfleet.paths import profiles_digest as checkout_profiles
from vfleet.paths import suite_dir
from vfleet.supply import statements
from vfleet.supply.statements import STATEMENT_TYPE, TIME_FORMAT, VERIFY, Keyring
from vfleet.supply.store import SupplyError, hex_of
from vfleet.verify.record.model import Report, verdict_problems

if TYPE_CHECKING:
    from securesystemslib.signer import CryptoSigner, Key  # type: ignore[attr-defined]

ATTESTATION = "verification.dsse.json"
PREDICATE_TYPE = VERIFY.predicate_type
BOOT_VERIFY_ID = "https://github.com/vfleet/vfleet/boot-verify/v1"
#: A custom level (the VSA spec allows any not starting with SLSA_): boot-verify passed on this image.
VERIFIED_LEVEL = "VFLEET_BOOT_VERIFIED"
SIGN_KEY_ENV = "VFLEET_SIGN_KEY"
#: A signed time this far ahead of this clock is a clock out of step, not a future verification.
CLOCK_SKEW = dt.timedelta(minutes=5)

NO_SIGN_KEY = (
    f"give the controller's ed25519 signing key as --sign-key PRIV or {SIGN_KEY_ENV}=PRIV "
    "(`openssl genpkey -algorithm ed25519 -out PRIV`)"
)
NO_TRUSTED_KEY = statements.how_to_trust(VERIFY)


def sign_key_path(given: Path | None) -> Path | None:
    """--sign-key, else VFLEET_SIGN_KEY (a path to the private key, never the key), else None."""
    if given is not None:
        return given
    env = settings.load().sign_key
    return env.expanduser() if env else None


def load_signer(path: Path) -> CryptoSigner:
    """The signer of the private key at PATH; SupplyError naming the file when it is not an ed25519 key."""
    return statements.load_private_key(path)


def load_trusted(given: list[str]) -> Keyring:
    """The keys of --trusted-key ROLE=PUB and VFLEET_TRUSTED_KEYS_<ROLE>, by role; SupplyError naming a bad
    file or spec. A role without a key is empty: the gate that needs one refuses and says how to declare it."""
    return statements.keyring(given)


def verifier_version() -> dict[str, str]:
    """What ran the suite: vfleet's version, its revision (the image's recorded VFLEET_REVISION inside an
    image, else the checkout's git commit) and the sha256 of the smoke_tests/ suite (vfleet.verify.suite)."""
    from vfleet.images.build import git_revision  # noqa: PLC0415

    suite = suite_dir()
    revision = settings.load().revision or git_revision(suite.parent)
    return {"vfleet": __version__, "revision": revision, "smoke_tests": tree_digest([suite], suite.parent)}


def public_key_of(signer: CryptoSigner) -> Key:
    key: Key = signer.public_key
    return key


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def statement(rep: Report, report_sha256: str, profiles_digest: str, verified_at: dt.datetime) -> dict[str, Any]:
    """The Statement for the report ``rep`` (report.json's sha256 ``report_sha256``); VfleetError when
    the report names no registry digest (nothing a rollout pulls can be attested)."""
    digest = rep.image.digest
    if not digest:
        raise VfleetError(
            f"the report names no registry digest ({rep.image.reason or 'no image'}), so there is no image to "
            "attest: verify with --container NAME (or --image REPO@sha256:D)"
        )
    named = rep.image.ref or next(iter(rep.image.repo_digests), "")
    repo = parse_ref(named).repo
    problems = _verdict(rep)
    weights = rep.figures.weights or {}
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": repo, "digest": {"sha256": hex_of(digest)}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "verifier": {"id": BOOT_VERIFY_ID, "version": verifier_version()},
            "timeVerified": verified_at.astimezone(dt.UTC).strftime(TIME_FORMAT),
            "resourceUri": f"docker-image://{repo}@{digest}",
            "policy": {
                "name": rep.profile,
                "uri": f"serve_configs/#{rep.profile}",
                "digest": {"sha256": hex_of(profiles_digest)},
            },
            "verificationResult": "FAILED" if problems else "PASSED",
            "verifiedLevels": ["FAILED"] if problems else [VERIFIED_LEVEL],
            "slsaVersion": "1.0",
            "vfleetReport": {
                "name": "report.json",
                "digest": {"sha256": report_sha256},
                "production": rep.production,
                "digestSource": rep.image.source,
                "partial": rep.partial,
            },
            **(
                {"vfleetWeights": {"root": weights.get("root"), "digest": {"sha256": hex_of(str(weights["digest"]))}}}
                if weights.get("digest")
                else {}
            ),
        },
    }


def _verdict(rep: Report) -> list[str]:
    """Why the report does not pass, from its checks and the not-applicable declarations it records
    (the profile's at the time; promotion checks them against the profile again)."""
    why = verdict_problems(rep.checks, rep.pytest_exitstatus, rep.not_applicable)
    return [*why, "partial run (-k)"] if rep.partial else why


def write(
    out: Path,
    rep: Report,
    signer: CryptoSigner,
    profiles_digest: str | None = None,
    now: dt.datetime | None = None,
) -> Path:
    """Sign the report OUT/report.json (``rep``, as written) and write OUT/verification.dsse.json; returns
    its path. ``profiles_digest``: the checkout's (default vfleet.paths.profiles_digest()); ``now``: the
    time verified (default: now)."""
    report = out / "report.json"
    stmt = statement(rep, file_sha256(report), profiles_digest or checkout_profiles(), now or dt.datetime.now(dt.UTC))
    path = out / ATTESTATION
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(statements.sign(stmt, signer), indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def check(
    report: Path,
    keys: Keyring,
    digest: str,
    profile: str,
    profiles_digest: str,
    max_age: dt.timedelta,
    now: dt.datetime | None = None,
) -> list[str]:
    """Why the attestation beside REPORT does not show that ``digest`` passed boot-verify for ``profile``
    under this checkout's serve profiles within ``max_age`` (empty: it does). Fails closed: no key, no
    attestation, an unreadable one, a signature no trusted key made, or any field that does not match
    is a problem, each named."""
    if not keys.of(VERIFY):
        return [f"no trusted key to check its signed verification summary: {NO_TRUSTED_KEY}"]
    path = report.parent / ATTESTATION
    if not path.is_file():
        return [
            f"no signed verification summary ({path.name}) beside it: the run was not signed; verify again "
            f"with the signing key ({NO_SIGN_KEY})"
        ]
    try:
        stmt, _ = statements.open_statement(json.loads(path.read_text()), VERIFY, keys)
    except (OSError, ValueError, SupplyError) as exc:
        return [f"{path.name}: {exc}"]
    if not isinstance(stmt, dict):
        return [f"{path.name}: its payload is not an in-toto Statement"]
    return statement_problems(stmt, report, digest, profile, profiles_digest, max_age, now or dt.datetime.now(dt.UTC))


def statement_problems(
    stmt: dict[str, Any],
    report: Path,
    digest: str,
    profile: str,
    profiles_digest: str,
    max_age: dt.timedelta,
    now: dt.datetime,
) -> list[str]:
    """The checks of a signed Statement's content (see `check`). A field of the wrong shape reads as
    absent, which fails its check: a malformed summary is refused with a reason, never a crash."""
    if stmt.get("_type") != STATEMENT_TYPE or stmt.get("predicateType") != PREDICATE_TYPE:
        return [f"{ATTESTATION}: not a verification summary ({stmt.get('predicateType')!r})"]
    pred = _obj(stmt.get("predicate"))
    why: list[str] = []
    subject = stmt.get("subject")
    subjects = {str(_obj(_obj(s).get("digest")).get("sha256")) for s in subject} if isinstance(subject, list) else set()
    if hex_of(digest) not in subjects:
        why.append(f"the signed summary is about {', '.join(sorted(subjects)) or 'no digest'}, not {digest}")
    if _obj(pred.get("verifier")).get("id") != BOOT_VERIFY_ID:
        why.append(f"verifier {pred.get('verifier')!r} is not vfleet boot-verify")
    levels = pred.get("verifiedLevels")
    if pred.get("verificationResult") != "PASSED":
        why.append(f"the signed result is {pred.get('verificationResult')!r}, not PASSED")
    elif not isinstance(levels, list) or VERIFIED_LEVEL not in levels:
        why.append(f"the signed verifiedLevels {levels!r} lack {VERIFIED_LEVEL}")
    policy = _obj(pred.get("policy"))
    if policy.get("name") != profile:
        why.append(f"signed for profile {policy.get('name')!r}, not {profile}")
    signed_profiles = _obj(policy.get("digest")).get("sha256")
    if signed_profiles != hex_of(profiles_digest):
        why.append(
            f"verified under serve profiles sha256:{signed_profiles}, but this checkout has {profiles_digest}: "
            "the profiles changed since; verify the image again"
        )
    signed_report = _obj(_obj(pred.get("vfleetReport")).get("digest")).get("sha256")
    try:
        actual = file_sha256(report)
    except OSError as exc:
        actual = f"unreadable ({exc.strerror or exc})"
    if signed_report != actual:
        why.append(
            f"{report.name} is not the report that was signed (sha256 {actual}, signed {signed_report}): it changed "
            "after signing"
        )
    why += _age_problems(pred.get("timeVerified"), max_age, now)
    return why


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _age_problems(stamp: Any, max_age: dt.timedelta, now: dt.datetime) -> list[str]:
    try:
        when = dt.datetime.strptime(str(stamp), TIME_FORMAT).replace(tzinfo=dt.UTC)
    except ValueError:
        return [f"signed timeVerified {stamp!r} is not a time ({TIME_FORMAT})"]
    age = now - when
    if age > max_age:
        days = max_age.total_seconds() / 86400
        return [
            f"stale: verified {when:%Y-%m-%d %H:%M}Z, {age.days} days ago, older than the profile's "
            f"verify.report_max_age_days ({days:g}); verify the image again"
        ]
    if age < -CLOCK_SKEW:
        return [f"signed timeVerified {stamp} is in the future by {-age}: this clock or the signer's is wrong"]
    return []
