"""Promotion rules on real report files (report.build + report.write, as `vfleet verify` writes them,
and the verification summary signed with a real ed25519 key, as `vfleet verify --sign-key` signs it) and
the one absolute reports root: no server, no docker.

The registry digest of a tag (docker RepoDigests) is tested against a real local registry in
tests/e2e/judge/test_verify_image_digest.py.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from support.answers import allow_drift
from support.reports import DIGEST, MADE_UP_WEIGHTS, key_files, resign, trusted, write_report

from vfleet import promotion
from vfleet.errors import VfleetError
from vfleet.verify.record import attestation

IMAGE = f"localhost:5000/vfleet-cpu@{DIGEST}"
ENV_DROP = (
    "VFLEET_REPORTS",
    "VFLEET_PROMOTIONS",
    "VFLEET_HOME",
    "VFLEET_SIGN_KEY",
    "VFLEET_TRUSTED_KEYS",
    "VFLEET_TRUSTED_KEYS_PROVENANCE",
    "VFLEET_TRUSTED_KEYS_VERIFY",
    "VFLEET_TRUSTED_KEYS_AB",
)


def test_an_unexcused_skip_fails_the_report_and_is_listed(tmp_path: Path) -> None:
    rep = json.loads((write_report(tmp_path, skipped=("test_log[faults]",)) / "report.json").read_text())
    assert rep["passed"] is False
    assert rep["unexcused_skips"] == [{"id": "test_log[faults]", "message": "test_log[faults] did not run"}]
    assert "Not verified" in (tmp_path / "verify-0" / "report.md").read_text()
    excused = write_report(tmp_path, skipped=("test_probes",), not_applicable={"test_probes": "random weights here"})
    rep = json.loads((excused / "report.json").read_text())
    assert rep["passed"] is True and rep["unexcused_skips"] == []
    assert rep["not_applicable"] == {"test_probes": "random weights here"}


def test_promotion_refuses_a_report_with_unexcused_skips(tmp_path: Path) -> None:
    reg = tmp_path / "promotions.jsonl"
    rdir = write_report(tmp_path / "r", skipped=("test_gpu_health", "test_log[faults]"), passed=True)
    # tiny/cpu declares test_gpu_health not applicable (the verdict is recomputed under the profile), not
    # test_log[faults].
    with pytest.raises(VfleetError, match=r"not verified \(skipped, not declared not applicable\): test_log\[faults\]"):
        promotion.promote(IMAGE, "tiny/cpu", rdir, reg, keys=trusted())
    assert not reg.exists()


def test_production_promotion_needs_the_digest_read_from_the_container(tmp_path: Path) -> None:
    reg = tmp_path / "promotions.jsonl"
    from_ref = write_report(tmp_path / "r", profile="glm-5.3-flash/h200", source="reference")
    with pytest.raises(VfleetError, match=r"digest taken from reference, not read from the verified container"):
        promotion.promote(IMAGE, "glm-5.3-flash/h200", from_ref, reg, keys=trusted())
    from_container = write_report(tmp_path / "r", profile="glm-5.3-flash/h200", source="container")
    entry = promotion.promote(IMAGE, "glm-5.3-flash/h200", from_container, reg, keys=trusted())
    assert entry["digest"] == DIGEST and entry["digest_source"] == "container"
    # tiny/cpu is not a production profile: a digest from the operator's reference is enough.
    assert (
        promotion.promote(IMAGE, "tiny/cpu", write_report(tmp_path / "t"), reg, keys=trusted())["digest_source"]
        == "reference"
    )


def test_reports_of_the_old_schema_are_refused(tmp_path: Path) -> None:
    old = write_report(tmp_path, schema=1)
    with pytest.raises(VfleetError, match="report schema 1 predates fail-closed gating"):
        promotion.promote(IMAGE, "tiny/cpu", old, tmp_path / "promotions.jsonl", keys=trusted())


def test_a_report_that_does_not_fit_the_schema_is_never_promoted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: a report that says passed but carries a key the model does not know, or a value of the
    wrong type, promotes nothing; the refusal names the file and the key."""
    reg = tmp_path / "promotions.jsonl"
    for key, value, words in (
        ("gate", "skipped", "gate: unknown key"),
        ("partial", "no", 'partial: Input should be a valid boolean (value "no")'),
    ):
        rdir = write_report(tmp_path / key)
        data = json.loads((rdir / "report.json").read_text())
        assert data["passed"] is True
        (rdir / "report.json").write_text(json.dumps({**data, key: value}, indent=1))
        with pytest.raises(VfleetError, match="no passing boot-verify report") as err:
            promotion.promote(IMAGE, "tiny/cpu", rdir, reg, keys=trusted())
        assert f"{rdir / 'report.json'}: not a boot-verify report of schema 2: {words}" in str(err.value)
        assert not reg.exists()
    # The search of the reports root skips them too, and says why.
    monkeypatch.setenv("VFLEET_REPORTS", str(tmp_path))
    with pytest.raises(VfleetError, match=r"gate: unknown key"):
        promotion.find_report(promotion.gate(DIGEST, "tiny/cpu", trusted()), None)


def test_a_bare_image_id_is_not_a_registry_digest(tmp_path: Path) -> None:
    with pytest.raises(VfleetError, match=r"a bare sha256 is ambiguous .* promote REPO@sha256:DIGEST"):
        promotion.promote(DIGEST, "tiny/cpu", write_report(tmp_path), tmp_path / "promotions.jsonl", keys=trusted())


def _vfleet(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vfleet", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120,
        check=False,
    )  # fmt: skip


def test_promote_in_one_cwd_and_check_in_another_use_the_same_files(tmp_path: Path) -> None:
    """ansible-playbook runs in ansible/: its `promote --check` must read the registry `vfleet promote`
    wrote from the checkout root. Defaults only (no --report, no --registry), one reports root."""
    root = tmp_path / "reports"
    root.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROP} | {"VFLEET_REPORTS": str(root)}
    a, b = tmp_path / "operator", tmp_path / "ansible"
    a.mkdir()
    b.mkdir()
    # vfleet verify's default --out is under the same root (a dead server: the report fails, but exists).
    dead = _vfleet(
        "verify", "--url", "http://127.0.0.1:9", "--profile", "tiny/cpu", "-k", "test_health", cwd=b, env=env
    )
    assert dead.returncode == 1, dead.stdout[-1500:] + dead.stderr
    assert "NOT SIGNED, so this result cannot promote the image: no signing key" in dead.stdout, dead.stdout
    written = list(root.glob("verify-tiny-cpu-*/report.json"))
    assert len(written) == 1, f"expected vfleet verify to write under {root}: {list(root.rglob('*'))}"
    write_report(root)
    # No trusted key: refused, with the fix named (fail closed).
    keyless = _vfleet("promote", IMAGE, "--profile", "tiny/cpu", cwd=a, env=env)
    assert keyless.returncode == 2 and "no trusted key" in keyless.stderr, keyless.stderr
    assert "--trusted-key verify=PUB" in keyless.stderr, keyless.stderr
    assert not (root / "promotions.jsonl").exists()
    pub = str(key_files()[1])
    ok = _vfleet("promote", IMAGE, "--profile", "tiny/cpu", cwd=a, env=env | {"VFLEET_TRUSTED_KEYS_VERIFY": pub})
    assert ok.returncode == 0, ok.stderr
    assert (root / "promotions.jsonl").is_file() and not (a / "reports").exists()
    trust = ("--trusted-key", f"verify={pub}")
    check = _vfleet("promote", "--check", IMAGE, "--profile", "tiny/cpu", *trust, cwd=b, env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"promoted: {DIGEST} for tiny/cpu" in check.stdout
    # What the rollout's preflight reads (--json): the entry, and the weights its report names, which every node's
    # are compared with before its drain (tests/integration/ops/test_fleet_weights.py).
    as_json = _vfleet("promote", "--check", "--json", IMAGE, "--profile", "tiny/cpu", *trust, cwd=b, env=env)
    assert as_json.returncode == 0, as_json.stdout + as_json.stderr
    handed = json.loads(as_json.stdout)
    assert handed["entry"]["digest"] == DIGEST and handed["weights"] == MADE_UP_WEIGHTS, handed
    keyless = _vfleet("promote", "--check", IMAGE, "--profile", "tiny/cpu", cwd=b, env=env)
    assert keyless.returncode == 1 and "not promoted: no trusted key" in keyless.stdout, keyless.stdout


def test_the_default_reports_root_is_the_checkout_whatever_the_cwd(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROP}
    want = str(REPO / "reports" / "promotions.jsonl")
    for cwd in (tmp_path, REPO / "ansible"):
        out = _vfleet("promote", "--help", cwd=cwd, env=env).stdout
        assert want in " ".join(out.split()), f"from {cwd}: {out}"


# -- tamper evidence: each of these promoted (or passed --check) before the summary was signed ------------


def _refused(rdir: Path, *words: str, keys: Any = None, image: str = IMAGE) -> str:
    """Promote IMAGE on RDIR's report: it must be refused, naming each of ``words``; nothing recorded."""
    reg = rdir.parent / "promotions.jsonl"
    with pytest.raises(VfleetError) as err:
        promotion.promote(image, "tiny/cpu", rdir, reg, keys=trusted() if keys is None else keys)
    for w in words:
        assert w in str(err.value), str(err.value)
    assert not reg.exists()
    return str(err.value)


def _edit(rdir: Path, fn: Any) -> None:
    path = rdir / "report.json"
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data, indent=1) + "\n")


def test_the_healthy_path_promotes_and_checks(tmp_path: Path) -> None:
    rdir = write_report(tmp_path / "r")
    reg = tmp_path / "promotions.jsonl"
    entry = promotion.promote(IMAGE, "tiny/cpu", rdir, reg, keys=trusted())
    assert entry["attestation"] == str((rdir / attestation.ATTESTATION).resolve())
    assert promotion.promoted_entry(IMAGE, "tiny/cpu", reg, keys=trusted())["report"] == entry["report"]


def test_a_report_that_names_no_weights_or_other_weights_is_refused(tmp_path: Path, config_tree: Any) -> None:
    """Promotion binds image, weights and profile: the registry line records the weights' manifest digest, a
    report that names none cannot promote, and a profile that pins its weights (verify.weights_accept) refuses
    others."""
    reg = tmp_path / "promotions.jsonl"
    entry = promotion.promote(IMAGE, "tiny/cpu", write_report(tmp_path / "ok"), reg, keys=trusted())
    assert entry["weights"] == MADE_UP_WEIGHTS["digest"]
    none = write_report(tmp_path / "none", figures={"weights": None})
    with pytest.raises(VfleetError, match=r"names no model manifest of the weights it served \(figures\.weights\)"):
        promotion.promote(IMAGE, "tiny/cpu", none, tmp_path / "r2.jsonl", keys=trusted())
    pinned = "sha256:" + "5f" * 32
    config_tree.edit("models/tiny/model.yaml", lambda d: d["verify"].update(weights_accept=[pinned]))
    other = write_report(tmp_path / "other")
    with pytest.raises(VfleetError) as err:
        promotion.promote(IMAGE, "tiny/cpu", other, tmp_path / "r3.jsonl", keys=trusted())
    assert f"served weights {MADE_UP_WEIGHTS['digest']}, which the profile does not accept" in str(err.value)
    assert pinned in str(err.value)


def test_the_signed_summary_is_an_in_toto_slsa_verification_summary(tmp_path: Path) -> None:
    from vfleet.paths import profiles_digest
    from vfleet.supply.statements import PAYLOAD_TYPE, VERIFY, open_statement

    rdir = write_report(tmp_path)
    env = json.loads((rdir / attestation.ATTESTATION).read_text())
    assert env["payloadType"] == PAYLOAD_TYPE
    stmt, _ = open_statement(env, VERIFY, trusted())
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    assert stmt["subject"] == [{"name": "localhost:5000/vfleet-cpu", "digest": {"sha256": "ab" * 32}}]
    assert stmt["predicateType"] == "https://slsa.dev/verification_summary/v1"
    pred = stmt["predicate"]
    assert pred["verificationResult"] == "PASSED" and pred["verifiedLevels"] == ["VFLEET_BOOT_VERIFIED"]
    assert pred["resourceUri"] == f"docker-image://localhost:5000/vfleet-cpu@{DIGEST}"
    assert pred["policy"]["name"] == "tiny/cpu"
    assert pred["policy"]["digest"] == {"sha256": profiles_digest().removeprefix("sha256:")}
    assert pred["vfleetReport"]["digest"] == {"sha256": attestation.file_sha256(rdir / "report.json")}
    assert pred["vfleetWeights"]["digest"] == {"sha256": MADE_UP_WEIGHTS["digest"].removeprefix("sha256:")}
    failed = write_report(tmp_path, suite_passed=False)
    pred, _ = open_statement(json.loads((failed / attestation.ATTESTATION).read_text()), VERIFY, trusted())
    assert pred["predicate"]["verificationResult"] == "FAILED" and pred["predicate"]["verifiedLevels"] == ["FAILED"]


def test_a_forged_report_is_refused(tmp_path: Path) -> None:
    """A failing report of another image, copied and edited to name this digest and say passed: the stored
    flag is not read (the checks failed), and the summary beside it is of another image and report."""
    other = write_report(tmp_path / "other", digest="sha256:" + "ef" * 32, suite_passed=False)
    forged = tmp_path / "forged"
    shutil.copytree(other, forged)

    def forge(d: dict[str, Any]) -> None:
        d["passed"] = True
        d["image"]["digest"] = DIGEST

    _edit(forged, forge)
    _refused(
        forged,
        "did not pass (recomputed from its checks): failed: t::test_health",
        "stored passed=true does not match its checks",
        f"the signed summary is about {'ef' * 32}, not {DIGEST}",
        "changed after signing",
    )
    # Written from scratch, all checks passing, and never signed: nothing vouches for it.
    unsigned = write_report(tmp_path / "unsigned", sign_with=None)
    _refused(unsigned, "no signed verification summary (verification.dsse.json)", "--sign-key PRIV")


def test_a_report_edited_after_signing_is_refused(tmp_path: Path) -> None:
    # A failed run, made consistent by hand (the check flipped to passed, passed flipped to true): only the
    # signature sees it.
    failed = write_report(tmp_path / "a", suite_passed=False)

    def flip(d: dict[str, Any]) -> None:
        d["passed"] = True
        d["pytest_exitstatus"] = 0
        d["counts"] = {"passed": 1, "failed": 0, "skipped": 0}
        d["checks"][0]["outcome"] = "passed"

    _edit(failed, flip)
    why = _refused(failed, "is not the report that was signed", "the signed result is 'FAILED', not PASSED")
    assert "recomputed" not in why  # the content is consistent now: the signature alone catches it
    # Passed flipped only: the recomputation catches it too.
    flipped = write_report(tmp_path / "b", suite_passed=False)
    _edit(flipped, lambda d: d.update(passed=True))
    _refused(flipped, "failed: t::test_health", "is not the report that was signed")
    # A check's detail edited on a passing report (the verdict unchanged): the sha256 differs.
    detail = write_report(tmp_path / "c")
    _edit(detail, lambda d: d["checks"][0].update(message="edited"))
    _refused(detail, "is not the report that was signed")


def test_a_missing_report_is_refused_and_removes_the_promotion(tmp_path: Path) -> None:
    reg = tmp_path / "promotions.jsonl"
    rdir = write_report(tmp_path / "r")
    promotion.promote(IMAGE, "tiny/cpu", rdir, reg, keys=trusted())
    (rdir / "report.json").unlink()
    with pytest.raises(VfleetError, match=r"not a readable report"):
        promotion.promoted_entry(IMAGE, "tiny/cpu", reg, keys=trusted())
    with pytest.raises(VfleetError, match=r"no passing boot-verify report .*not a readable report"):
        promotion.promote(IMAGE, "tiny/cpu", rdir, reg, keys=trusted())


def test_a_summary_of_another_digest_is_refused(tmp_path: Path) -> None:
    """The report names this digest, but the signed summary beside it is about another image."""
    rdir = write_report(tmp_path / "r")
    other = "cd" * 32
    resign(rdir, lambda st: st["subject"][0]["digest"].update(sha256=other))
    _refused(rdir, f"the signed summary is about {other}, not {DIGEST}")
    # A report of another digest, promoted as this one: refused by the report and the summary.
    _refused(write_report(tmp_path / "o", digest="sha256:" + other), f"digest sha256:{other}")


def test_a_summary_of_other_serve_profiles_is_refused(tmp_path: Path, config_tree: Any) -> None:
    rdir = write_report(tmp_path / "r")
    promotion.promote(IMAGE, "tiny/cpu", rdir, tmp_path / "ok.jsonl", keys=trusted())
    config_tree.edit("models/tiny/model.yaml", lambda d: d.update(description="another serve profile tree"))
    why = _refused(rdir, "the profiles changed since; verify the image again")
    from vfleet.paths import profiles_digest

    assert f"but this checkout has {profiles_digest()}" in why
    with pytest.raises(VfleetError, match="the profiles changed since"):
        promotion.promoted_entry(IMAGE, "tiny/cpu", tmp_path / "ok.jsonl", keys=trusted())


def test_a_summary_for_another_profile_is_refused(tmp_path: Path) -> None:
    rdir = write_report(tmp_path / "r")
    resign(rdir, lambda st: st["predicate"]["policy"].update(name="glm-5.3-flash/h200"))
    _refused(rdir, "signed for profile 'glm-5.3-flash/h200', not tiny/cpu")


def test_a_stale_report_is_refused_at_the_profiles_max_age(tmp_path: Path, config_tree: Any) -> None:
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=31)
    rdir = write_report(tmp_path / "r", signed_at=old)
    _refused(rdir, "stale: verified", "31 days ago", "verify.report_max_age_days (30)")
    fresh = write_report(tmp_path / "f", signed_at=dt.datetime.now(dt.UTC) - dt.timedelta(days=29))
    promotion.promote(IMAGE, "tiny/cpu", fresh, tmp_path / "ok.jsonl", keys=trusted())
    # --check goes stale too: the entry's report is judged at the time of the check.
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=2)
    with pytest.raises(VfleetError, match="stale"):
        promotion.promoted_entry(IMAGE, "tiny/cpu", tmp_path / "ok.jsonl", keys=trusted(), now=later)
    # The profile sets the bound (its tree changes, so the report is signed again under it).
    config_tree.edit("models/tiny/model.yaml", lambda d: d["verify"].update(report_max_age_days=60))
    promotion.promote(IMAGE, "tiny/cpu", write_report(tmp_path / "s", signed_at=old), tmp_path / "ok.jsonl",
                      keys=trusted())  # fmt: skip
    # A time ahead of this clock is refused too.
    ahead = write_report(tmp_path / "a", signed_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    _refused(ahead, "is in the future")


def test_a_summary_signed_by_an_untrusted_key_is_refused(tmp_path: Path) -> None:
    rdir = write_report(tmp_path / "r", sign_with="intruder")
    _refused(rdir, "verification.dsse.json: not signed by a trusted key")
    # Trusting that key as well accepts it: the refusal was the key, nothing else.
    promotion.promote(IMAGE, "tiny/cpu", rdir, tmp_path / "ok.jsonl", keys=trusted("controller", "intruder"))
    # No trusted key at all: nothing could be checked, nothing is promoted; the fix is named.
    from vfleet.supply.statements import Keyring

    no_keys = Keyring()
    _refused(write_report(tmp_path / "n"), "no trusted key", "--trusted-key verify=PUB", "VFLEET_TRUSTED_KEYS_VERIFY",
             keys=no_keys)  # fmt: skip


def test_a_key_of_another_role_does_not_make_a_verification_summary(tmp_path: Path) -> None:
    """Issue 31, item 6: the key that signed the summary is trusted to sign image builds only. `vfleet
    promote` and the `promote --check` a rollout's preflight runs refuse it, naming the key's role; the same
    key declared for the verify role too promotes. A key with no role, and the old one-list variable, are
    refused with the fix named."""
    rdir, reg = write_report(tmp_path / "r"), tmp_path / "promotions.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROP}
    pub, other = key_files()[1], key_files("intruder")[1]
    trust = ("--trusted-key", f"provenance={pub}", "--trusted-key", f"verify,ab={other}")
    where = ("--profile", "tiny/cpu", "--registry", str(reg))
    refused = _vfleet("promote", IMAGE, *where, "--report", str(rdir), *trust, cwd=tmp_path, env=env)
    assert refused.returncode == 2 and not reg.exists(), refused.stdout + refused.stderr
    said = " ".join(refused.stderr.split())
    assert "a key of the provenance role, not of the verify role (boot-verify verification summaries)" in said, said
    ok = _vfleet("promote", IMAGE, *where, "--report", str(rdir), "--trusted-key", f"provenance,verify={pub}",
                 cwd=tmp_path, env=env)  # fmt: skip
    assert ok.returncode == 0 and reg.is_file(), ok.stdout + ok.stderr
    check = _vfleet("promote", "--check", IMAGE, *where, *trust, cwd=tmp_path, env=env)
    assert check.returncode == 1 and "a key of the provenance role, not of the verify role" in check.stdout
    bare = _vfleet("promote", "--check", IMAGE, *where, "--trusted-key", str(pub), cwd=tmp_path, env=env)
    assert bare.returncode == 1 and f"trusted key '{pub}' names no role" in bare.stdout, bare.stdout
    legacy = _vfleet("promote", "--check", IMAGE, *where, cwd=tmp_path, env=env | {"VFLEET_TRUSTED_KEYS": str(pub)})
    assert legacy.returncode == 1 and "VFLEET_TRUSTED_KEYS is no longer read" in legacy.stdout, legacy.stdout
    assert "VFLEET_TRUSTED_KEYS_VERIFY" in legacy.stdout


def test_an_ab_summary_signed_by_a_key_of_the_verify_role_is_refused(tmp_path: Path) -> None:
    """Issue 31, item 6: a key trusted for boot-verify summaries does not make an A/B summary."""
    from support.ab_reports import PROFILE, ab_report

    from vfleet.ab import attest as ab_attest

    old, new = "sha256:" + "11" * 32, "sha256:" + "22" * 32
    ab_json = ab_report(tmp_path, "ab", old, new, effect=1.0) / "ab.json"
    keys = attestation.load_trusted([f"verify={key_files()[1]}", f"ab={key_files('intruder')[1]}"])
    why = " ".join(ab_attest.check(ab_json, keys, old, new, PROFILE))
    assert "ab.dsse.json: signed by keyid" in why and "a key of the verify role, not of the ab role" in why, why
    assert ab_attest.check(ab_json, trusted(), old, new, PROFILE) == []


def test_the_summary_names_the_revision_and_the_suite_that_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31, item 12: the signed verifier is not just vfleet's version: the checkout's revision and the
    sha256 of the smoke_tests/ suite; inside an image, the revision its build recorded."""
    from vfleet import __version__
    from vfleet.digests import tree_digest
    from vfleet.images.build import git_revision
    from vfleet.supply.statements import VERIFY, open_statement

    def verifier(rdir: Path) -> dict[str, Any]:
        stmt, _ = open_statement(json.loads((rdir / attestation.ATTESTATION).read_text()), VERIFY, trusted())
        return dict(stmt["predicate"]["verifier"])

    signed = verifier(write_report(tmp_path / "a"))
    suite = tree_digest([REPO / "smoke_tests"], REPO)
    assert signed["version"] == {"vfleet": __version__, "revision": git_revision(REPO), "smoke_tests": suite}
    assert len(signed["version"]["revision"].removesuffix("-dirty")) == 40, signed
    monkeypatch.setenv("VFLEET_REVISION", "0123abc")
    assert verifier(write_report(tmp_path / "b"))["version"]["revision"] == "0123abc"


def test_a_failed_result_signed_is_not_a_pass(tmp_path: Path) -> None:
    rdir = write_report(tmp_path / "r")
    resign(rdir, lambda st: st["predicate"].update(verificationResult="FAILED", verifiedLevels=["FAILED"]))
    _refused(rdir, "the signed result is 'FAILED', not PASSED")


def test_a_malformed_or_unreadable_summary_is_refused_not_a_crash(tmp_path: Path) -> None:
    rdir = write_report(tmp_path / "m")
    resign(rdir, lambda st: st.update(subject="x") or st["predicate"].update(verifier="x", policy=[], verifiedLevels=1))
    _refused(
        rdir,
        "the signed summary is about no digest",
        "verifier 'x' is not vfleet boot-verify",
        "the signed verifiedLevels 1 lack VFLEET_BOOT_VERIFIED",
        "signed for profile None, not tiny/cpu",
        "verified under serve profiles sha256:None",
    )
    broken = write_report(tmp_path / "b")
    (broken / attestation.ATTESTATION).write_text("{not json")
    _refused(broken, "verification.dsse.json: ")
    (broken / attestation.ATTESTATION).write_text("[]")
    _refused(broken, "verification.dsse.json: not a DSSE envelope")


def test_a_hand_written_registry_line_proves_nothing(tmp_path: Path) -> None:
    reg = tmp_path / "promotions.jsonl"
    line = {"digest": DIGEST, "profile": "tiny/cpu", "promoted_at": "2026-12-02T00:00:00+00:00",
            "report": str(tmp_path / "nowhere" / "report.json")}  # fmt: skip
    reg.write_text(json.dumps(line) + "\n")
    with pytest.raises(VfleetError, match=r"no entry passes the gate now: .*nowhere.*not a readable report"):
        promotion.promoted_entry(IMAGE, "tiny/cpu", reg, keys=trusted())
    # A line naming a report that exists but was never signed; a line naming no report at all.
    unsigned = write_report(tmp_path / "u", sign_with=None)
    with reg.open("a") as f:
        f.write(json.dumps({**line, "report": str(unsigned / "report.json")}) + "\n")
        f.write(json.dumps({k: v for k, v in line.items() if k != "report"}) + "\n")
    with pytest.raises(VfleetError) as err:
        promotion.promoted_entry(IMAGE, "tiny/cpu", reg, keys=trusted())
    assert "names no report" in str(err.value) and "no signed verification summary" in str(err.value)
    # The CLI, as the rollout's preflight runs it: exit 1, the reason printed.
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROP}
    proc = _vfleet("promote", "--check", IMAGE, "--profile", "tiny/cpu", "--registry", str(reg),
                   "--trusted-key", f"verify={key_files()[1]}", cwd=tmp_path, env=env)  # fmt: skip
    assert proc.returncode == 1 and "not promoted:" in proc.stdout and "not a readable report" in proc.stdout
    # A real promotion appended after the forged lines is found.
    promotion.promote(IMAGE, "tiny/cpu", write_report(tmp_path / "g"), reg, keys=trusted())
    assert promotion.promoted_entry(IMAGE, "tiny/cpu", reg, keys=trusted())["report"].endswith("g/verify-0/report.json")


def test_a_bad_signing_key_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """`vfleet verify --sign-key` with a file that is no ed25519 key: exit 2 before the suite, no report."""
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key\n")
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROP}
    out = tmp_path / "out"
    proc = _vfleet("verify", "--url", "http://127.0.0.1:9", "--profile", "tiny/cpu", "--out", str(out),
                   "--sign-key", str(bad), cwd=tmp_path, env=env)  # fmt: skip
    assert proc.returncode == 2 and f"signing key {bad}" in proc.stderr, proc.stderr
    assert not out.exists()


def test_vfleet_verify_signs_its_result_and_a_failed_one_cannot_promote(tmp_path: Path) -> None:
    """The real `vfleet verify` (a dead server: every check fails) with VFLEET_SIGN_KEY and a digest
    reference: it writes the signed summary, FAILED, and promote refuses it."""
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROP} | {"VFLEET_SIGN_KEY": str(key_files()[0])}
    out = tmp_path / "out"
    proc = _vfleet("verify", "--url", "http://127.0.0.1:9", "--profile", "tiny/cpu", "--image", IMAGE,
                   "-k", "test_health", "--out", str(out), cwd=tmp_path, env=env)  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-1500:] + proc.stderr
    assert f"signed verification summary: {out / attestation.ATTESTATION}" in proc.stdout, proc.stdout
    # Through the same key as the controller's trusted one: refused on its checks and its signed result.
    why = _refused(out, "the signed result is 'FAILED', not PASSED", "partial run (-k)")
    assert "recomputed from its checks" in why


# -- release snapshots: a rollback is judged against the release the image was promoted under -------------


def test_a_promotion_keeps_its_release_and_a_rollback_across_a_profile_change_is_judged_by_it(
    tmp_path: Path, config_tree: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`vfleet promote` keeps the release data (vfleet.verify.record.releases) under the image digest. After the
    checkout's serve profiles change, `promote --check` of the old image fails against the checkout and
    passes with VFLEET_RELEASE_DIR on the snapshot (what rollback.yml sets); a snapshot edited after the
    promotion fails the check again, until a promotion from the same release puts it right."""
    from vfleet.digests import tree_digest
    from vfleet.paths import profiles_digest
    from vfleet.verify.record import releases

    rdir = write_report(tmp_path / "r")
    reg = tmp_path / "promotions.jsonl"
    before = profiles_digest()
    entry = promotion.promote(IMAGE, "tiny/cpu", rdir, reg, keys=trusted())
    snap = releases.find(reg, DIGEST)
    assert snap is not None and entry["release"] == str(snap) and entry["profiles_digest"] == before
    assert tree_digest([snap / "serve_configs"], snap) == before
    assert all((snap / part).exists() for part in releases.PARTS)
    # The same promotion again keeps the snapshot it finds (same data).
    assert promotion.promote(IMAGE, "tiny/cpu", rdir, reg, keys=trusted())["release"] == str(snap)

    # The checkout moves on: the old image's promotion no longer holds against it ...
    config_tree.edit("models/tiny/model.yaml", lambda d: d.update(description="the next release"))
    with pytest.raises(VfleetError, match="the profiles changed since"):
        promotion.promoted_entry(IMAGE, "tiny/cpu", reg, keys=trusted())
    # ... and holds against its own release, as a rollback runs it.
    monkeypatch.delenv("VFLEET_SERVE_CONFIGS")
    monkeypatch.setenv("VFLEET_RELEASE_DIR", str(snap))
    assert profiles_digest() == before
    assert promotion.promoted_entry(IMAGE, "tiny/cpu", reg, keys=trusted())["digest"] == DIGEST
    # The CLI lookup rollback_image.yml runs: the snapshot of the digest, nothing for another one.
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROP and k != "VFLEET_RELEASE_DIR"}
    found = _vfleet("promote", "--release-of", IMAGE, "--registry", str(reg), cwd=tmp_path, env=env)
    assert found.returncode == 0 and found.stdout.strip() == str(snap), found.stdout + found.stderr
    other = IMAGE.replace("ab" * 32, "cd" * 32)
    none = _vfleet("promote", "--release-of", other, "--registry", str(reg), cwd=tmp_path, env=env)
    assert none.returncode == 0 and none.stdout.strip() == "", none.stdout + none.stderr

    # A snapshot edited after the promotion: its profiles are no longer the signed ones.
    edited = snap / "serve_configs" / "models" / "tiny" / "model.yaml"
    edited.write_text(edited.read_text() + "# edited after the promotion\n")
    with pytest.raises(VfleetError, match="serve profiles"):
        promotion.promoted_entry(IMAGE, "tiny/cpu", reg, keys=trusted())
    # Promoting the digest again from the release it was built from puts the snapshot right.
    assert releases.save(reg, DIGEST, REPO) == snap
    assert promotion.promoted_entry(IMAGE, "tiny/cpu", reg, keys=trusted())["digest"] == DIGEST


# -- new warnings are news (vfleet.verify.log.templates) ---------------------------------------------------------

PROD = "glm-5.3-flash/h200"


@pytest.fixture
def drift_allowed(config_tree: Any) -> None:
    """PROD's answers gate with a drift allowance, so that a second promotion is judged on what these tests
    are about (the answers gate itself: tests/integration/judge/test_answers_gate_live.py)."""
    allow_drift(config_tree, PROD.split("/")[0])


def _tpl(template: str, line: int = 1) -> dict[str, Any]:
    return {"template": template, "count": 1, "first_line": line, "example": template}


OLD = [_tpl("WARNING [system_utils.py] Found ulimit of <n> and failed")]
NEW = "WARNING [cpu.py] Failed to import from vllm._C: ImportError('libgomp.so.<n>: cannot open shared object file')"


BASE = "sha256:" + "12" * 32


def _promote_baseline(root: Path, reg: Path, profile: str = PROD) -> Path:
    rdir = write_report(root, profile=profile, digest=BASE, source="container", figures={"log_warnings": OLD})
    entry = promotion.promote(f"localhost:5000/vfleet-cpu@{BASE}", profile, rdir, reg, keys=trusted())
    assert entry["baseline"] is None and entry["baseline_note"] == "no baseline: first promotion"
    return rdir


def _ab(root: Path, baseline: str = BASE, candidate: str = DIGEST, profile: str = PROD, **kw: Any) -> Path:
    """A signed promotion A/B of CANDIDATE (arm B) against BASELINE (arm A), showing no regression, as
    `vfleet ab --promotion --sign-key` writes it (tests/integration/judge/test_ab.py's synthetic rounds)."""
    from support.ab_reports import ab_report

    name = f"ab-{baseline[7:11]}-{candidate[7:11]}-{len(list(root.iterdir())) if root.exists() else 0}"
    return ab_report(root, name, baseline, candidate, effect=1.0, profile=profile, **kw)


def test_a_new_warning_template_stops_a_production_promotion(tmp_path: Path, drift_allowed: None) -> None:
    reg = tmp_path / "promotions.jsonl"
    base = _promote_baseline(tmp_path / "r", reg)
    same = write_report(tmp_path / "r", profile=PROD, source="container", figures={"log_warnings": OLD})
    entry = promotion.promote(IMAGE, PROD, same, reg, _ab(tmp_path / "ab"), keys=trusted())
    assert entry["new_warnings"] == f"no new warning template against {base / 'report.json'}"
    assert entry["baseline"]["digest"] == BASE and entry["ab_baseline"] == BASE
    # The next image prints a warning the promoted one never did: refused, the template named, nothing appended.
    reg2 = tmp_path / "promotions2.jsonl"
    _promote_baseline(tmp_path / "b", reg2)
    sick = write_report(
        tmp_path / "r", profile=PROD, source="container", figures={"log_warnings": [*OLD, _tpl(NEW, 40)]}
    )
    lines = reg2.read_text()
    with pytest.raises(VfleetError, match="1 new warning template") as exc:
        promotion.promote(IMAGE, PROD, sick, reg2, keys=trusted())
    assert NEW in str(exc.value) and "verify.warnings.allow" in str(exc.value)
    assert reg2.read_text() == lines


def test_the_baseline_must_be_the_signed_report_it_was_promoted_on(tmp_path: Path) -> None:
    """Whoever can edit the promoted report cannot hide a new warning by adding it to the baseline."""
    reg = tmp_path / "promotions.jsonl"
    base = _promote_baseline(tmp_path / "b", reg)
    _edit(base, lambda d: d["figures"]["log_warnings"].append(_tpl(NEW)))
    sick = write_report(tmp_path / "r", profile=PROD, source="container", figures={"log_warnings": [*OLD, _tpl(NEW)]})
    with pytest.raises(VfleetError, match=r"the baseline of this promotion \(.*\) cannot be checked: report.json is"):
        promotion.promote(IMAGE, PROD, sick, reg, keys=trusted())


def test_an_allow_entry_in_the_profile_excuses_a_new_template(
    tmp_path: Path, config_tree: Any, drift_allowed: None
) -> None:
    reg = tmp_path / "promotions.jsonl"
    _promote_baseline(tmp_path / "b", reg)
    allow = {"template": "WARNING [cpu.py] Failed to import from vllm._C*", "reason": "this platform has no "
             "AVX512 build; the portable ops serve", "source": "vllm/platforms/cpu.py"}  # fmt: skip
    config_tree.edit(
        "models/glm-5.3-flash/h200.yaml", lambda d: d.setdefault("verify", {}).update(warnings={"allow": [allow]})
    )
    sick = write_report(tmp_path / "r", profile=PROD, source="container", figures={"log_warnings": [*OLD, _tpl(NEW)]})
    entry = promotion.promote(IMAGE, PROD, sick, reg, _ab(tmp_path / "ab"), keys=trusted())
    assert entry["new_warnings"].startswith("no new warning template against")


def test_a_production_report_without_templates_is_refused_and_a_first_image_has_nothing_to_compare(
    tmp_path: Path,
) -> None:
    reg = tmp_path / "promotions.jsonl"
    bare = write_report(tmp_path / "r", profile=PROD, source="container", figures={"log_warnings": None})
    with pytest.raises(VfleetError, match="holds no warning templates"):
        promotion.promote(IMAGE, PROD, bare, reg, keys=trusted())
    first = write_report(tmp_path / "r", profile=PROD, source="container", figures={"log_warnings": [_tpl(NEW)]})
    entry = promotion.promote(IMAGE, PROD, first, reg, keys=trusted())
    assert entry["new_warnings"].startswith("no promoted report of this profile to compare against")


def test_a_non_production_profile_lists_a_new_template_and_promotes(tmp_path: Path) -> None:
    reg = tmp_path / "promotions.jsonl"
    _promote_baseline(tmp_path / "b", reg, profile="tiny/cpu")
    sick = write_report(tmp_path / "r", figures={"log_warnings": [*OLD, _tpl(NEW)]})
    entry = promotion.promote(IMAGE, "tiny/cpu", sick, reg, keys=trusted())
    assert entry["new_warnings"].startswith("1 new warning template(s) against")


# -- one judgement, two entry points: `promote --check` judges what `vfleet promote` judges ---------------


def _append(reg: Path, *lines: dict[str, Any], top: bool = False) -> None:
    old = reg.read_text() if reg.exists() else ""
    new = "".join(json.dumps(line) + "\n" for line in lines)
    reg.write_text(new + old if top else old + new)


def _check_refused(reg: Path, *words: str, cli: bool = False) -> str:
    """`promote --check` of IMAGE on PROD refuses, naming each of ``words``; with ``cli`` the CLI the
    rollout's preflight runs, too (exit 1, `not promoted:`)."""
    with pytest.raises(VfleetError) as err:
        promotion.promoted_entry(IMAGE, PROD, reg, keys=trusted())
    for w in words:
        assert w in str(err.value), str(err.value)
    if not cli:
        return str(err.value)
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROP}
    proc = _vfleet("promote", "--check", IMAGE, "--profile", PROD, "--registry", str(reg),
                   "--trusted-key", f"verify,ab={key_files()[1]}", cwd=reg.parent, env=env)  # fmt: skip
    assert proc.returncode == 1 and "not promoted:" in proc.stdout, proc.stdout + proc.stderr
    for w in words:
        assert w in " ".join(proc.stdout.split()), proc.stdout
    return str(err.value)


def test_an_image_promote_refused_does_not_pass_check_however_the_registry_is_edited(
    tmp_path: Path, drift_allowed: None
) -> None:
    """The image prints a warning the promoted one never did: `vfleet promote` refuses it, though its report
    is signed and passing and a signed A/B shows it not worse. No registry line makes `promote --check` pass
    it: a hand-written line (with or without a baseline), one naming another baseline, one inserted for
    that other image above it, one saying "no baseline: first promotion", one moved to the top."""
    reg = tmp_path / "promotions.jsonl"
    base = _promote_baseline(tmp_path / "b", reg)
    sick = write_report(tmp_path / "s", profile=PROD, source="container", figures={"log_warnings": [*OLD, _tpl(NEW)]})
    ab = _ab(tmp_path / "ab")
    with pytest.raises(VfleetError, match="1 new warning template"):
        promotion.promote(IMAGE, PROD, sick, reg, ab, keys=trusted())
    clean = reg.read_text()
    real = json.loads(clean.splitlines()[0])
    line = {**real, "image": IMAGE, "digest": DIGEST, "report": str(sick / "report.json"),
            "attestation": str(sick / attestation.ATTESTATION), "ab_report": str(ab / "ab.json"),
            "ab_baseline": BASE, "baseline": {"digest": BASE, "report": str(base / "report.json"),
                                              "promoted_at": real["promoted_at"]}}  # fmt: skip
    # A hand-written line, as `vfleet promote` would have written it, and one without a baseline.
    _append(reg, line)
    _check_refused(reg, "1 new warning template", NEW, cli=True)
    reg.write_text(clean)
    _append(reg, {k: v for k, v in line.items() if k not in ("baseline", "baseline_note")})
    _check_refused(reg, "1 new warning template")
    # Another image whose signed, passing report has the warning, named as the baseline: refused, the
    # baseline is the image promoted before the line, and its line says so.
    other = "sha256:" + "34" * 32
    odir = write_report(tmp_path / "o", profile=PROD, digest=other, source="container",
                        figures={"log_warnings": [*OLD, _tpl(NEW)]})  # fmt: skip
    reg.write_text(clean)
    _append(reg, {**line, "baseline": {"digest": other, "report": str(odir / "report.json"), "promoted_at": "x"}})
    _check_refused(reg, f"the line says baseline {other}", f"the image promoted before it for its profile is {BASE}")
    # A line for that image inserted above it: the new warning is no news against it, but a production
    # promotion needs an A/B against the image promoted before, signed, and there is none.
    reg.write_text(clean)
    oline = {**real, "digest": other, "report": str(odir / "report.json"), "promoted_at": "2026-12-02T00:00:01"}
    _append(reg, oline, {**line, "baseline": {**line["baseline"], "digest": other, "report": str(odir / "report.json"),
                                               "promoted_at": oline["promoted_at"]}})  # fmt: skip
    _check_refused(reg, f"arm A runs {BASE}, not the promoted {other}", f"A/B summary's baseline is not {other}")
    # "No baseline: first promotion" below the promoted image: refused.
    reg.write_text(clean)
    _append(reg, {**line, "baseline": None, "baseline_note": "no baseline: first promotion"})
    _check_refused(reg, "the line says 'no baseline: first promotion'", f"promoted before it for its profile is {BASE}")
    # The same line moved to the top, above the image it was refused against: a first promotion comes
    # before every other, and the promoted image was verified before this one.
    reg.write_text(clean)
    _append(reg, {**line, "baseline": None, "baseline_note": "no baseline: first promotion"}, top=True)
    _check_refused(reg, "its line is the first of glm-5.3-flash/h200 in the registry", f"but {BASE}", "was verified at")
    # The real promotion of a clean image against the same baseline passes the check, and says against what.
    reg.write_text(clean)
    fine = write_report(tmp_path / "f", profile=PROD, source="container", figures={"log_warnings": OLD})
    promotion.promote(IMAGE, PROD, fine, reg, ab, keys=trusted())
    found = promotion.checked_entry(IMAGE, PROD, reg, keys=trusted())
    assert found.note.startswith(f"judged against {BASE}") and found.entry["report"] == str(fine / "report.json")


def test_a_production_promotion_needs_a_signed_ab_and_the_first_says_it_has_no_baseline(
    tmp_path: Path, drift_allowed: None
) -> None:
    """Every production profile sets verify.ab_not_worse. The first promotion of a profile has nothing to
    compare against and says "no baseline: first promotion" (output, registry line, check); the next one
    without a signed A/B summary against it is refused by `vfleet promote` and by `promote --check`."""
    from vfleet.profiles import Catalog

    prods = [p for p in Catalog().load_all() if p.production]
    assert prods and all(p.verify.ab_not_worse for p in prods), [p.name for p in prods if not p.verify.ab_not_worse]
    reg = tmp_path / "promotions.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROP}
    trust = ("--trusted-key", f"verify,ab={key_files()[1]}")
    first = write_report(tmp_path / "b", profile=PROD, digest=BASE, source="container", figures={"log_warnings": OLD})
    base_ref = f"localhost:5000/vfleet-cpu@{BASE}"
    proc = _vfleet("promote", base_ref, "--profile", PROD, "--report", str(first), "--registry", str(reg), *trust,
                   cwd=tmp_path, env=env)  # fmt: skip
    assert proc.returncode == 0 and "no baseline: first promotion" in proc.stdout, proc.stdout + proc.stderr
    entry = json.loads(reg.read_text())
    assert entry["baseline"] is None and entry["baseline_note"] == "no baseline: first promotion"
    assert entry["ab_report"] is None and entry["ab_baseline"] is None
    check = _vfleet("promote", "--check", base_ref, "--profile", PROD, "--registry", str(reg), *trust,
                    cwd=tmp_path, env=env)  # fmt: skip
    assert check.returncode == 0 and "no baseline: first promotion" in check.stdout, check.stdout + check.stderr
    # The next image: no A/B at all, then an A/B without its signed summary: refused, nothing appended.
    nxt = write_report(tmp_path / "n", profile=PROD, source="container", figures={"log_warnings": OLD})
    lines = reg.read_text()
    for ab_dir, words in ((tmp_path / "none", "ab.json: not a readable A/B report"),
                          (_ab(tmp_path / "ab", sign_with=None), "no signed A/B summary (ab.dsse.json)")):  # fmt: skip
        ab_dir.mkdir(exist_ok=True)
        proc = _vfleet("promote", IMAGE, "--profile", PROD, "--report", str(nxt), "--registry", str(reg),
                       "--ab-report", str(ab_dir), *trust, cwd=tmp_path, env=env)  # fmt: skip
        out = " ".join(proc.stderr.split())
        assert proc.returncode == 2 and "sets verify.ab_not_worse" in out and words in out, proc.stdout + proc.stderr
        assert reg.read_text() == lines
        # A line written by hand for it, naming that A/B: `promote --check` refuses it the same way.
        said = {"digest": BASE, "report": str(first / "report.json"), "promoted_at": entry["promoted_at"]}
        _append(reg, {**entry, "digest": DIGEST, "report": str(nxt / "report.json"),
                      "ab_report": str(ab_dir / "ab.json"), "baseline": said})  # fmt: skip
        _check_refused(reg, "its A/B report", str(ab_dir / "ab.json"), cli=words.startswith("no signed"))
        reg.write_text(lines)


def test_vfleet_check_refuses_a_production_profile_without_the_ab_gate(config_tree: Any, tmp_path: Path) -> None:
    """`verify.ab_not_worse` is a production floor (rule production-ab-gate): `vfleet check` refuses a
    production model that turns it off, naming the key and the fix, and no waiver lifts it."""
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROP}
    ok = _vfleet("check", PROD, cwd=tmp_path, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    config_tree.edit("models/glm-5.3-flash/model.yaml", lambda d: d["verify"].update(ab_not_worse=False))
    off = _vfleet("check", PROD, cwd=tmp_path, env=env)
    out = " ".join((off.stdout + off.stderr).split())
    assert off.returncode != 0 and "rule production-ab-gate: verify.ab_not_worse: is not true" in out, out
    assert "set verify.ab_not_worse: true" in out, out
    rules = _vfleet("check", "--rules", cwd=tmp_path, env=env)
    assert "production-ab-gate" in rules.stdout, rules.stdout
