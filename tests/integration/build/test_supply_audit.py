"""The vulnerability report: pip-audit against its database for real, and for real with the database
unreachable (a proxy address that refuses connections), where the report must say "unknown", never
"no known vulnerabilities"."""

from __future__ import annotations

import os

import httpx
import pytest
from support.network import refusing_address

from vfleet.supply.audit import _summarise, audit_packages

PKG = ("httpx", "0.28.1")


def test_unreachable_database_is_unknown() -> None:
    proxy = refusing_address()
    env = {**os.environ, "HTTPS_PROXY": proxy, "https_proxy": proxy}
    report = audit_packages([PKG], env=env, timeout_s=5)
    assert report["status"].startswith("unknown: database unreachable (")
    assert "refused" in report["status"].lower() or "proxy" in report["status"].lower()
    assert "no known vulnerabilities" not in report["status"]


def test_real_run_says_what_it_could_audit() -> None:
    """One real audit of one pinned package. Whether the service knows that version is probed first, here,
    with the same JSON API pip-audit's pypi service reads; the report must agree with the probe."""
    try:
        code = httpx.get(f"https://pypi.org/pypi/{PKG[0]}/{PKG[1]}/json", timeout=15).status_code
    except httpx.HTTPError:
        code = 0
    report = audit_packages([PKG])
    if code == 200:
        assert report["audited"] == 1 and not report["status"].startswith("unknown"), report
    else:
        # The index answers (or not) but holds no per-version record: nothing was audited, so "unknown".
        assert report["status"].startswith("unknown: database unreachable"), report
        assert report["not_audited"][0]["name"] == PKG[0]


def test_two_versions_of_one_package_are_both_looked_up() -> None:
    """An image can hold two versions of one package; pip-audit takes one pin per name, so both are put to
    the service (in two runs) and both appear in the report, audited or not."""
    report = audit_packages([("setuptools", "77.0.3"), ("setuptools", "78.1.1"), PKG])
    assert report["packages"] == 3
    assert report["audited"] + len(report["not_audited"]) == 3, report["status"]


@pytest.mark.injected_fault
def test_findings_and_partial_audits_are_reported() -> None:
    """pip-audit's JSON with a finding and a skipped package, which the real service cannot be made to
    return here (it audits nothing): the summary counts the finding and calls the skipped one unknown."""
    data = {
        "dependencies": [
            {"name": "a", "version": "1.0", "vulns": [{"id": "PYSEC-0000-1"}, {"id": "GHSA-x"}]},
            {"name": "b", "version": "2.0", "vulns": []},
            {"name": "c", "skip_reason": "Dependency not found on PyPI"},
        ]
    }
    rep = _summarise({"service": "pypi"}, data)
    assert rep["status"] == "vulnerable: 2 known vulnerabilities in 1 of 2 audited packages; 1 not audited (unknown)"
    rep = _summarise({"service": "pypi"}, {"dependencies": data["dependencies"][1:]})
    assert rep["status"] == "no known vulnerabilities in 1 audited packages; 1 not audited (unknown)"
