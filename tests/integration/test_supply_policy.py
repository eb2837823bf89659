"""The vulnerability policy (vfleet/supply/policy.py) applied by `vfleet image verify`'s checks and shown on
the fleet page, without Docker: a signed record is written into a tmp store the way `vfleet image build`
writes one (the report summarised by audit.py, the Statement with this checkout's materials for the cuda
family, whose base is named by a registry digest, signed with a real ed25519 key), and the checks after
the digest (check.verify_identity) run on it for an identity as a registry would report it. The registry
look-up itself is test_supply_verify.py's (it needs Docker).

A pip-audit answer with a finding cannot be had on demand (the database may be unreachable here, and a
package's advisories change), so the findings are pip-audit's JSON written by the test and summarised by
audit.py's real code: those tests are marked injected_fault. The unreachable database is real."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pytest
from supply_helpers import make_key
from test_supply_audit import refusing_address

from vfleet.commands.image import vuln_rules
from vfleet.images import ROOT
from vfleet.pages.fleet_html import node_cells
from vfleet.pins import load as load_pins
from vfleet.profiles import ProfileError
from vfleet.supply import policy as vpolicy
from vfleet.supply import provenance as prov
from vfleet.supply.attest import byproduct
from vfleet.supply.audit import _summarise, audit_packages
from vfleet.supply.check import Result, profile_is_production, provenance_entry, verify_identity
from vfleet.supply.identity import KIND_MANIFEST, Identity
from vfleet.supply.store import SBOM, STATEMENT, VULNS, SupplyError, envelope_path, record_dir

TODAY = dt.date.today()
IMAGE_ID = "sha256:" + "1" * 64
IDENT = Identity(
    "registry.test:5000/vfleet-cuda@sha256:" + "2" * 64,
    IMAGE_ID,
    "registry.test:5000/vfleet-cuda",
    "sha256:" + "2" * 64,
    KIND_MANIFEST,
)

# pip-audit's JSON (2.10: id, fix_versions, aliases; no severity) for one vulnerable and one clean package.
VULNERABLE = {
    "dependencies": [
        {
            "name": "urllib3",
            "version": "2.2.1",
            "vulns": [
                {"id": "GHSA-34jh-p97f-mpxf", "fix_versions": ["2.2.2"], "aliases": ["CVE-2024-37891"]},
                {"id": "PYSEC-2099-1", "fix_versions": [], "aliases": []},
            ],
        },
        {"name": "httpx", "version": "0.28.1", "vulns": []},
    ]
}
CLEAN = {"dependencies": [{"name": "httpx", "version": "0.28.1", "vulns": []}]}


def signed_record(
    tmp: Path, report: dict[str, Any], vllm_base: str | None = None, ident: Identity = IDENT
) -> tuple[Path, list[Any]]:
    """A store holding IDENT's record with REPORT as its vulnerability report, signed for IDENT's digest
    with the key tmp/release.pem (public: tmp/release.pub); and the trusted keys. VLLM_BASE: the base the
    build labels name (default: the default base), with its base image and series."""
    tmp.mkdir(parents=True, exist_ok=True)
    # One release key per TMP: records signed into one store by several calls are all trusted by its pub.
    priv, pub = tmp / "release.pem", tmp / "release.pub"
    if not priv.is_file():
        priv, pub = make_key(tmp, "release")
    store = tmp / "store"
    rec = record_dir(store, ident.image_id)
    rec.mkdir(parents=True)
    (rec / SBOM).write_text(json.dumps({"bomFormat": "CycloneDX", "components": []}))
    (rec / VULNS).write_text(json.dumps(report, indent=1))
    pinned = load_pins(ROOT / "versions.json")
    vllm_base = vllm_base or pinned.vllm_version
    known = pinned.bases.get(vllm_base)
    image = (known.base_images if known else pinned.base_images)["cuda"].ref
    base = f"{image}@sha256:{'3' * 64}"
    mats = prov.materials(ROOT, "cuda", base, None, vllm_base if known else None)
    products = [byproduct("sbom", rec / SBOM, "application/json"), byproduct("vulnerabilities", rec / VULNS, "x")]
    subject = prov.subject_of(ident.name, ident.digest, ident.image_id, ident.kind)
    stmt = prov.statement(subject, "cuda", mats, products, {"VLLM_VERSION": vllm_base})
    (rec / STATEMENT).write_text(json.dumps(stmt))
    env = envelope_path(store, ident.image_id, ident.digest)
    env.parent.mkdir()
    env.write_text(json.dumps(prov.sign(stmt, prov.load_private_key(priv))))
    return store, [prov.load_public_key(pub)]


def run(
    tmp: Path,
    report: dict[str, Any],
    *,
    production: bool = True,
    policy: str | None = None,
    vllm_base: str | None = None,
) -> Result:
    store, keys = signed_record(tmp, report, vllm_base)
    path = None
    if policy is not None:
        path = tmp / "policy.yaml"
        path.write_text(policy)
    return verify_identity(IDENT, keys, store, ROOT, vpolicy.rules(ROOT, production, path))


def policy_check(res: Result) -> tuple[bool, str]:
    assert [c.name for c in res.checks][-2:] == ["materials", "vulnerability-policy"], res.checks
    return res.checks[-1].ok, res.checks[-1].message


def test_a_clean_image_passes_the_production_policy(tmp_path: Path) -> None:
    res = run(tmp_path, _summarise({"service": "pypi"}, CLEAN))
    assert res.ok, res.reason
    assert res.reason.endswith("SBOM and materials match; vulnerabilities: 0 known"), res.reason
    assert res.judgement and res.judgement.verdict == "pass" and res.judgement.checked
    assert res.to_dict()["vulnerability_policy"]["line"] == "vulnerabilities: 0 known"


@pytest.mark.injected_fault
def test_a_vulnerable_image_fails_the_production_default_with_the_ids_and_the_fix(tmp_path: Path) -> None:
    res = run(tmp_path, _summarise({"service": "pypi"}, VULNERABLE))
    assert not res.ok
    ok, msg = policy_check(res)
    assert not ok and res.reason == f"NOT verified {IDENT.ref}: vulnerability-policy: {msg}"
    assert "vulnerabilities: 2 known" in msg
    assert "GHSA-34jh-p97f-mpxf in urllib3 2.2.1 (unknown-severity; fixed in 2.2.2)" in msg
    assert "PYSEC-2099-1 in urllib3 2.2.1 (unknown-severity; no fixed version known)" in msg
    assert "upgrade" in msg and "allow entry (id, reason, expires: YYYY-MM-DD)" in msg
    assert f"FAIL under the production policy ({ROOT / vpolicy.POLICY_FILE})" in msg  # where the rule came from


def test_an_image_of_each_known_base_passes_and_an_unknown_base_is_refused(tmp_path: Path) -> None:
    """Issue 24, item 5: the gate takes the image's vLLM base from its signed build labels. An image of
    any base this checkout's versions.json knows passes, checked against that base's base image and
    series; one built on a base the checkout does not know is refused, naming the base and the fix."""
    for i, known in enumerate(load_pins(ROOT / "versions.json").bases):
        res = run(tmp_path / f"k{i}", _summarise({"service": "pypi"}, CLEAN), vllm_base=known)
        assert res.ok, (known, res.reason)
    res = run(tmp_path / "u", _summarise({"service": "pypi"}, CLEAN), vllm_base="0.99.0")
    assert not res.ok and res.checks[-1].name == "materials"
    assert "built on vLLM 0.99.0, a base this checkout's versions.json does not know" in res.reason
    assert "update the controller's checkout" in res.reason


def allow(entries: list[tuple[str, dt.date]], extra: str = "") -> str:
    lines = "".join(
        f"  - id: {i}\n    reason: the affected code path is not used by vLLM\n    expires: {d}\n" for i, d in entries
    )
    return f"allow:\n{lines}{extra}"


@pytest.mark.injected_fault
def test_valid_allow_entries_excuse_by_id_or_alias(tmp_path: Path) -> None:
    later = TODAY + dt.timedelta(days=30)
    res = run(
        tmp_path,
        _summarise({"service": "pypi"}, VULNERABLE),
        policy=allow([("CVE-2024-37891", later), ("PYSEC-2099-1", TODAY)]),
    )
    assert res.ok, res.reason
    line = res.judgement.line if res.judgement else ""
    assert line.startswith(f"vulnerabilities: 2 known, allowed: GHSA-34jh-p97f-mpxf (until {later}: the affected")
    assert f"PYSEC-2099-1 (until {TODAY}:" in line  # an entry excuses through its expiry day
    assert line in res.reason


@pytest.mark.injected_fault
def test_an_expired_allow_entry_excuses_nothing_and_says_so(tmp_path: Path) -> None:
    later, before = TODAY + dt.timedelta(days=30), TODAY - dt.timedelta(days=1)
    res = run(
        tmp_path,
        _summarise({"service": "pypi"}, VULNERABLE),
        policy=allow([("GHSA-34jh-p97f-mpxf", before), ("PYSEC-2099-1", later)]),
    )
    ok, msg = policy_check(res)
    assert not ok and not res.ok
    assert f"the allow entry for GHSA-34jh-p97f-mpxf expired on {before} (it excuses nothing now)" in msg
    assert "FAIL under the production policy" in msg and "GHSA-34jh-p97f-mpxf in urllib3" in msg
    assert "PYSEC-2099-1 (until" in msg and "PYSEC-2099-1 in urllib3" not in msg


def unreachable_report() -> dict[str, Any]:
    """The report of a real pip-audit run whose database cannot be reached (a proxy that refuses)."""
    proxy = refusing_address()
    report = audit_packages(
        [("httpx", "0.28.1")], env={**os.environ, "HTTPS_PROXY": proxy, "https_proxy": proxy}, timeout_s=5
    )
    assert report["status"].startswith("unknown: database unreachable"), report
    return report


def test_an_unchecked_report_fails_production_unless_the_policy_says_otherwise(tmp_path: Path) -> None:
    report = unreachable_report()
    res = run(tmp_path / "default", report)
    ok, msg = policy_check(res)
    assert not ok and msg.startswith("vulnerabilities: NOT CHECKED (unknown: database unreachable")
    assert "FAIL under the production policy" in msg and "unchecked: warn" in msg
    # The same report under a policy that lets production run unchecked: it passes, and says NOT CHECKED.
    res = run(tmp_path / "relaxed", report, policy="production:\n  unchecked: warn\n")
    assert res.ok, res.reason
    assert res.judgement and not res.judgement.checked and res.judgement.verdict == "warn"
    assert "; NOT CHECKED: vulnerabilities: unknown: database unreachable" in res.reason


@pytest.mark.injected_fault
def test_warn_passes_with_a_warning_line(tmp_path: Path) -> None:
    """A non-production profile's default is warn: the image verifies and the result says what it warns of."""
    res = run(tmp_path, _summarise({"service": "pypi"}, VULNERABLE), production=False)
    assert res.ok, res.reason
    j = res.judgement
    assert j and j.verdict == "warn" and len(j.warning) == 2
    assert "WARNING under the non-production policy: GHSA-34jh-p97f-mpxf in urllib3 2.2.1" in res.reason


@pytest.mark.injected_fault
def test_a_severity_the_report_names_has_its_own_rule(tmp_path: Path) -> None:
    """pip-audit 2.10 names no severity; a report entry that does is judged by its level, the rest as
    unknown-severity."""
    data = json.loads(json.dumps(VULNERABLE))
    data["dependencies"][0]["vulns"][0]["severity"] = "LOW"
    policy = "production:\n  severity:\n    low: ignore\n"
    res = run(tmp_path / "a", _summarise({"service": "pypi"}, data), policy=policy)
    ok, msg = policy_check(res)
    assert not ok and "GHSA-34jh-p97f-mpxf" not in msg.split("FAIL", 1)[1] and "PYSEC-2099-1 in urllib3" in msg
    policy += "    unknown-severity: warn\n"
    res = run(tmp_path / "b", _summarise({"service": "pypi"}, data), policy=policy)
    assert (
        res.ok
        and res.judgement
        and res.judgement.warning == ["PYSEC-2099-1 in urllib3 2.2.1 (unknown-severity; no fixed version known)"]
    )


def test_a_report_that_does_not_say_is_unchecked(tmp_path: Path) -> None:
    """A report with no status, or one that says "no known" while listing findings, is no pass."""
    for n, report in enumerate(
        (
            {"tool": "pip-audit"},
            {"status": "no known vulnerabilities", "vulnerable": [{"name": "a", "version": "1", "vulns": ["X-1"]}]},
        )
    ):
        ok, msg = policy_check(run(tmp_path / str(n), report))
        assert not ok and "NOT CHECKED" in msg


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("production:\n  unchecked: maybe\n", "production.unchecked"),
        ("production:\n  severity:\n    severe: fail\n", "production.severity.severe"),
        ("allow:\n  - id: CVE-2024-1\n    expires: 2030-01-01\n", "allow.0.reason"),
        ("allow:\n  - id: CVE-2024-1\n    reason: not reachable from vLLM\n", "allow.0.expires"),
        ("allow:\n  - id: CVE-2024-1\n    reason: not reachable from vLLM\n    expires: soon\n", "allow.0.expires"),
        ("everyone: fine\n", "everyone"),
        ("allow: [\n", "not YAML"),
    ],
)
def test_a_bad_policy_file_is_named_with_the_fix(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(SupplyError) as exc:
        vpolicy.rules(ROOT, True, path)
    assert str(exc.value).startswith(f"vulnerability policy {path}: ") and named in str(exc.value)


def test_the_checkouts_policy_file_spells_out_the_built_in_default(tmp_path: Path) -> None:
    for production in (True, False):
        shipped, built_in = vpolicy.rules(ROOT, production), vpolicy.rules(tmp_path, production)
        assert "built-in default" in built_in.source and shipped.source == str(ROOT / vpolicy.POLICY_FILE)
        assert (shipped.severity, shipped.unchecked, shipped.allow) == (
            built_in.severity,
            built_in.unchecked,
            built_in.allow,
        )
    assert set(vpolicy.rules(ROOT, True).severity.values()) == {"fail"}


def test_policy_sources_and_profiles(tmp_path: Path) -> None:
    with pytest.raises(SupplyError, match=r"--policy .*nope.yaml: no such file"):
        vpolicy.rules(ROOT, True, tmp_path / "nope.yaml")
    # the checkout's file is read by default
    (tmp_path / vpolicy.POLICY_FILE).write_text("other:\n  unchecked: fail\n")
    r = vpolicy.rules(tmp_path, False)
    assert r.unchecked == "fail" and r.severity["unknown-severity"] == "warn" and r.source.endswith(vpolicy.POLICY_FILE)
    # --profile: production if any profile is; none named is production; an unknown name is an error
    assert vuln_rules(["tiny/cpu"], None, ROOT).production is False
    assert vuln_rules(["tiny/cpu", "glm-5.3-flash/h200"], None, ROOT).production is True
    assert vuln_rules([], None, ROOT).production is True
    with pytest.raises(ProfileError):
        vuln_rules(["nope/cpu"], None, ROOT)
    assert profile_is_production("tiny/cpu", ROOT) is False
    assert profile_is_production("?", ROOT) and profile_is_production("", ROOT)


@pytest.mark.injected_fault
def test_fleet_page_provenance_cell_is_green_only_for_a_checked_pass(tmp_path: Path) -> None:
    """The page's provenance cell from the same entry `vfleet fleet status` writes (provenance_entry of
    a verification): a warning, an unchecked report and a failure are not green."""
    allowed = allow([("GHSA-34jh-p97f-mpxf", TODAY), ("PYSEC-2099-1", TODAY)])
    cases = {
        "clean": (run(tmp_path / "1", _summarise({"service": "pypi"}, CLEAN)), "ok"),
        "allowed": (run(tmp_path / "2", _summarise({"service": "pypi"}, VULNERABLE), policy=allowed), "ok"),
        "warn": (run(tmp_path / "3", _summarise({"service": "pypi"}, VULNERABLE), production=False), "unknown"),
        "unchecked": (run(tmp_path / "4", {"status": "unknown: not run"}, production=False), "unknown"),
        "ignored-unchecked": (
            run(tmp_path / "5", {"status": "unknown: not run"}, policy="production:\n  unchecked: ignore\n"),
            "unknown",
        ),
        "fail": (run(tmp_path / "6", _summarise({"service": "pypi"}, VULNERABLE)), "bad"),
    }
    for name, (res, state) in cases.items():
        row = {
            "node": name,
            "container": "running",
            "image_id": IMAGE_ID,
            "provenance": provenance_entry(res, IMAGE_ID),
        }
        cell = node_cells(row)["provenance"]
        assert cell.state == state, (name, cell)
        if state != "ok":
            assert res.judgement and res.judgement.line in cell.why, (name, cell)
    assert (
        node_cells(
            {
                "node": "n",
                "container": "running",
                "image_id": IMAGE_ID,
                "provenance": {"status": "verified", "detail": "x"},
            }
        )["provenance"].state
        == "unknown"
    )
