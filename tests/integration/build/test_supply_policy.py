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
from support.network import refusing_address
from support.supply_records import CLEAN, IDENT, IMAGE_ID, signed_record

from vfleet.commands.image import vuln_rules
from vfleet.images import ROOT
from vfleet.pages.fleet_html import node_cells
from vfleet.pins import load as load_pins
from vfleet.profiles import ProfileError
from vfleet.supply import policy as vpolicy
from vfleet.supply.audit import _summarise, audit_packages
from vfleet.supply.check import Result, profile_is_production, provenance_entry, verify_identity
from vfleet.supply.store import SupplyError

TODAY = dt.date.today()
REASON = "the affected code path is not used by vLLM"

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
    until = TODAY + dt.timedelta(days=30)
    policy = f"production:\n  severity:\n    low: {{action: ignore, reason: {REASON}, expires: {until}}}\n"
    res = run(tmp_path / "a", _summarise({"service": "pypi"}, data), policy=policy)
    ok, msg = policy_check(res)
    assert not ok and "GHSA-34jh-p97f-mpxf" not in msg.split("FAIL", 1)[1] and "PYSEC-2099-1 in urllib3" in msg
    assert (
        f"GHSA-34jh-p97f-mpxf in urllib3 2.2.1 (low; fixed in 2.2.2) (ignored by the production policy until {until}"
        in msg
    )
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
            run(tmp_path / "5", {"status": "unknown: not run"}, policy=ignore_rule("unchecked", TODAY)),
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


def ignore_rule(key: str, expires: dt.date, extra: str = "") -> str:
    """A production policy that ignores KEY (a level, or unchecked) with a reason until EXPIRES."""
    rule = f"{{action: ignore, reason: {REASON}, expires: {expires}}}"
    body = f"  unchecked: {rule}\n" if key == "unchecked" else f"  severity:\n    {key}: {rule}\n"
    return f"production:\n{body}{extra}"


def partial(audited: int = 1, skipped: int = 299, answered: bool = True) -> dict[str, Any]:
    """The report of an audit that looked up AUDITED of AUDITED + SKIPPED packages: the others skipped by
    the service (pip-audit's skip_reason) or, with ANSWERED false, missing from its answer."""
    deps: list[dict[str, Any]] = [{"name": f"ok{i}", "version": "1.0", "vulns": []} for i in range(audited)]
    if answered:
        deps += [{"name": f"pkg{i}", "skip_reason": "Dependency not found on PyPI"} for i in range(skipped)]
    return _summarise({"service": "pypi", "packages": audited + skipped}, {"dependencies": deps})


@pytest.mark.injected_fault
def test_packages_not_looked_up_are_unknown_and_follow_the_unchecked_rule(tmp_path: Path) -> None:
    """Issue 31: a report that audited 1 of 300 packages is not "0 known" and not a checked pass. Under
    production it fails (unchecked: fail), naming how many were not looked up; under a policy that warns on
    unchecked it passes with NOT CHECKED; a non-production profile warns. The fleet page is not green."""
    for n, report in enumerate((partial(), partial(answered=False))):
        res = run(tmp_path / f"p{n}", report)
        ok, msg = policy_check(res)
        assert not ok and not res.ok, msg
        assert res.judgement and not res.judgement.checked and res.judgement.verdict == "fail"
        assert "vulnerabilities: 0 known in the packages looked up" in msg, msg
        assert "FAIL under the production policy" in msg and "NOT CHECKED: 299 of 300 packages not looked up" in msg
        assert ("pkg0 (Dependency not found on PyPI)" if n == 0 else "299 not in the service's answer") in msg, msg
    relaxed = run(tmp_path / "relaxed", partial(), policy="production:\n  unchecked: warn\n")
    assert relaxed.ok and relaxed.judgement and relaxed.judgement.verdict == "warn", relaxed.reason
    assert "NOT CHECKED: 299 of 300 packages not looked up" in relaxed.reason
    other = run(tmp_path / "other", partial(), production=False)
    assert other.ok and other.judgement and other.judgement.verdict == "warn" and not other.judgement.checked
    for res in (relaxed, other):
        row = {"node": "n", "container": "running", "image_id": IMAGE_ID, "provenance": provenance_entry(res, IMAGE_ID)}
        cell = node_cells(row)["provenance"]
        assert cell.state == "unknown" and "299 of 300 packages not looked up" in cell.why, cell
    # Every package looked up: a checked pass, as before.
    full = run(tmp_path / "full", partial(audited=3, skipped=0))
    assert full.ok and full.judgement and full.judgement.checked, full.reason


def test_a_production_ignore_needs_a_reason_and_an_expiry_and_is_named(tmp_path: Path) -> None:
    """Issue 31: production may not `ignore` a level (or unchecked) bare; a rule with its reason and expiry
    ignores until then, and the result line names each finding it ignored, with the expiry. An expired
    rule, or one further away than 90 days, ignores nothing (production fails)."""
    for key in ("critical", "unchecked"):
        path = tmp_path / f"bare-{key}.yaml"
        path.write_text(
            f"production:\n  {'unchecked: ignore' if key == 'unchecked' else 'severity: {critical: ignore}'}\n"
        )
        with pytest.raises(SupplyError) as exc:
            vpolicy.rules(ROOT, True, path)
        where = "production.unchecked" if key == "unchecked" else "production.severity.critical"
        assert f"{where}: a production ignore needs a reason and an expiry" in str(exc.value)
        assert "{action: ignore, reason: WHY, expires: YYYY-MM-DD}" in str(exc.value)
    until = TODAY + dt.timedelta(days=10)
    res = run(
        tmp_path / "ok", _summarise({"service": "pypi"}, VULNERABLE), policy=ignore_rule("unknown-severity", until)
    )
    assert res.ok and res.judgement and len(res.judgement.ignored) == 2, res.reason
    for vid in ("GHSA-34jh-p97f-mpxf", "PYSEC-2099-1"):
        assert f"{vid} in urllib3 2.2.1 (unknown-severity;" in res.reason
    assert f"ignored by the production policy until {until}: {REASON}" in res.reason
    for n, when in enumerate((TODAY - dt.timedelta(days=1), dt.date(9999, 12, 31))):
        res = run(
            tmp_path / f"void{n}",
            _summarise({"service": "pypi"}, VULNERABLE),
            policy=ignore_rule("unknown-severity", when),
        )
        ok, msg = policy_check(res)
        assert not ok and "FAIL under the production policy" in msg, msg
        assert f"the ignore rule for unknown-severity {'expired' if n == 0 else 'expires'} on {when}" in msg, msg
    # A non-production ignore needs nothing more, and is still named.
    path = tmp_path / "other.yaml"
    path.write_text("other:\n  severity: {unknown-severity: ignore}\n")
    j = vpolicy.judge(_summarise({"service": "pypi"}, VULNERABLE), vpolicy.rules(ROOT, False, path))
    assert j.verdict == "pass" and "ignored by the non-production policy (no expiry)" in j.line, j.line


@pytest.mark.injected_fault
def test_an_allow_entry_expiring_too_far_away_excuses_nothing(tmp_path: Path) -> None:
    """Issue 31: an allow entry that expires on 9999-12-31 excused a finding for ever. Its expiry is at most
    90 days away (a class may set less with allow_max_days); a later one excuses nothing and says the fix."""
    far = dt.date(9999, 12, 31)
    res = run(
        tmp_path / "far",
        _summarise({"service": "pypi"}, VULNERABLE),
        policy=allow([("GHSA-34jh-p97f-mpxf", far), ("PYSEC-2099-1", TODAY)]),
    )
    ok, msg = policy_check(res)
    assert not ok and "GHSA-34jh-p97f-mpxf in urllib3 2.2.1" in msg.split("FAIL", 1)[1], msg
    latest = TODAY + dt.timedelta(days=90)
    assert f"the allow entry for GHSA-34jh-p97f-mpxf expires on {far}, more than 90 days away" in msg
    assert f"set its expires to {latest} or sooner" in msg
    at_limit = allow([("GHSA-34jh-p97f-mpxf", latest), ("PYSEC-2099-1", TODAY)])
    assert run(tmp_path / "limit", _summarise({"service": "pypi"}, VULNERABLE), policy=at_limit).ok
    stricter = at_limit + "production:\n  allow_max_days: 30\n"
    res = run(tmp_path / "stricter", _summarise({"service": "pypi"}, VULNERABLE), policy=stricter)
    assert not res.ok and "more than 30 days away (the most the production policy allows)" in res.reason
    path = tmp_path / "bad.yaml"
    path.write_text("production:\n  allow_max_days: 365\n")
    with pytest.raises(SupplyError, match=r"production\.allow_max_days"):
        vpolicy.rules(ROOT, True, path)


@pytest.mark.injected_fault
def test_fleet_page_names_each_finding_allowed_or_ignored_with_its_expiry(tmp_path: Path) -> None:
    until = TODAY + dt.timedelta(days=20)
    policy = allow([("CVE-2024-37891", until)], ignore_rule("unknown-severity", until))
    res = run(tmp_path, _summarise({"service": "pypi"}, VULNERABLE), policy=policy)
    assert res.ok, res.reason
    row = {"node": "n", "container": "running", "image_id": IMAGE_ID, "provenance": provenance_entry(res, IMAGE_ID)}
    cell = node_cells(row)["provenance"]
    assert cell.state == "ok", cell
    assert f"allowed: GHSA-34jh-p97f-mpxf (until {until}: {REASON})" in cell.text, cell.text
    assert "ignored: PYSEC-2099-1 in urllib3 2.2.1" in cell.text and f"until {until}" in cell.text, cell.text
