"""Vulnerability report of an image's Python environment with pip-audit (pinned in pyproject.toml).

What is audited: the Python packages the image's SBOM lists (name and version, as syft read them from the
image's dist-info), written as a pinned requirements list and given to ``pip-audit --no-deps
--disable-pip``, so nothing is installed or resolved. A local version label (torch's ``+cpu``) is
dropped for the look-up, because advisories are filed against public versions; the report says so.

Honesty rules: a package the service could not look up is "not audited", never "clean"; when pip-audit
cannot reach its database, or the database knew none of the packages, the status is
``unknown: database unreachable (...)``. A fresh cache directory per run keeps an old answer from
standing in for the database.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_SERVICE = "pypi"


def pip_audit_bin() -> str:
    return str(Path(sys.executable).parent / "pip-audit")


def audit_packages(
    packages: list[tuple[str, str]],
    service: str = DEFAULT_SERVICE,
    timeout_s: int = 15,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """pip-audit of (name, version) pairs; the report dict written beside the SBOM."""
    lookups = []
    notes = []
    for name, version in packages:
        public = version.split("+", 1)[0]
        if public != version:
            notes.append(f"{name} {version} looked up as {public} (local version label dropped)")
        lookups.append((name, public))
    report: dict[str, Any] = {
        "tool": "pip-audit",
        "service": service,
        "audits": "the Python packages listed in the image's SBOM (pinned, no dependency resolution)",
        "packages": len(lookups),
        "notes": notes,
    }
    deps: list[dict[str, Any]] = []
    for batch in _batches(lookups):
        data = _run_pip_audit(batch, service, timeout_s, env)
        if isinstance(data, str):
            report["status"] = data
            return report
        deps += data.get("dependencies", [])
    return _summarise(report, {"dependencies": deps})


NETWORK_ERRORS = ("ConnectionError", "ProxyError", "Max retries", "NameResolution", "Timeout", "SSLError")


def _batches(lookups: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """pip-audit takes one pin per name in a requirements list; an image can hold two versions of one
    package (the system Python's and the venv's), so each batch has every name at most once."""
    batches: list[list[tuple[str, str]]] = []
    seen: list[set[str]] = []
    for name, version in lookups:
        key = name.lower().replace("_", "-").replace(".", "-")
        i = next((i for i, names in enumerate(seen) if key not in names), len(batches))
        if i == len(batches):
            batches.append([])
            seen.append(set())
        batches[i].append((name, version))
        seen[i].add(key)
    return batches


def _run_pip_audit(
    batch: list[tuple[str, str]], service: str, timeout_s: int, env: dict[str, str] | None
) -> dict[str, Any] | str:
    """pip-audit's JSON for one batch, or the "unknown: ..." status when it produced none."""
    with tempfile.TemporaryDirectory(prefix="vfleet-audit-") as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text("".join(f"{n}=={v}\n" for n, v in batch))
        out = Path(tmp) / "audit.json"
        argv = [pip_audit_bin(), "-r", str(req), "--no-deps", "--disable-pip", "-f", "json", "-s", service]
        argv += ["--progress-spinner", "off", "--timeout", str(timeout_s), "--cache-dir", str(Path(tmp) / "cache")]
        argv += ["-o", str(out)]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"unknown: pip-audit did not finish ({exc})"
        if not out.is_file():
            lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()] or [f"exit {proc.returncode}"]
            if any(e in proc.stderr for e in NETWORK_ERRORS):
                return f"unknown: database unreachable ({service}: {lines[-1][:400]})"
            return f"unknown: pip-audit failed ({lines[-1][:400]})"
        data: dict[str, Any] = json.loads(out.read_text())
    return data


def _summarise(report: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    deps = data.get("dependencies", [])
    report.setdefault("packages", len(deps))  # what was put to the service: the policy's denominator
    skipped = [d for d in deps if d.get("skip_reason")]
    audited = [d for d in deps if not d.get("skip_reason")]
    vulnerable = [d for d in audited if d.get("vulns")]
    report["not_audited"] = [{"name": d["name"], "reason": d["skip_reason"]} for d in skipped]
    report["vulnerable"] = [
        {
            "name": d["name"],
            "version": d.get("version"),
            "vulns": [v.get("id") for v in d["vulns"]],
            "details": [_detail(v) for v in d["vulns"]],
        }
        for d in vulnerable
    ]
    report["audited"] = len(audited)
    if deps and not audited:
        report["status"] = (
            f"unknown: database unreachable (the {report['service']} service could look up none of the "
            f"{len(deps)} packages; first: {skipped[0]['skip_reason']})"
        )
    elif vulnerable:
        n = sum(len(d["vulns"]) for d in vulnerable)
        report["status"] = (
            f"vulnerable: {n} known vulnerabilities in {len(vulnerable)} of {len(audited)} audited packages"
            + (f"; {len(skipped)} not audited (unknown)" if skipped else "")
        )
    else:
        report["status"] = f"no known vulnerabilities in {len(audited)} audited packages" + (
            f"; {len(skipped)} not audited (unknown)" if skipped else ""
        )
    return report


def _detail(vuln: dict[str, Any]) -> dict[str, Any]:
    """What the vulnerability policy (supply/policy.py) reads of one finding: the aliases an allow entry
    may name (a CVE for a PYSEC ID), the fixed versions the fix names, and a severity only where the
    report has one (pip-audit 2.10's JSON has none: the policy calls that unknown-severity)."""
    out: dict[str, Any] = {
        "id": vuln.get("id"),
        "aliases": list(vuln.get("aliases") or []),
        "fix_versions": list(vuln.get("fix_versions") or []),
    }
    if vuln.get("severity"):
        out["severity"] = vuln["severity"]
    return out
