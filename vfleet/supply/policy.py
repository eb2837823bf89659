"""The vulnerability policy: what an image's signed pip-audit report (vulns.json) does to `vfleet image
verify`, the rollout's supply-chain gate and the fleet page (docs/supply-chain.md).

A known vulnerability is judged by its severity: ``fail``, ``warn`` or ``ignore``. pip-audit's JSON
(2.10) carries no severity, so today every finding is of the level ``unknown-severity``, which has a
policy of its own; a report entry that does name one (``critical``, ``high``, ``medium``, ``low``) is
judged by it. A report whose status is ``unknown`` (the database could not be reached, or the audit did
not run) is judged by ``unchecked``. An allow entry excuses one vulnerability ID (or an alias of it,
such as the CVE of a PYSEC entry) with a reason until its expiry date; an expired entry excuses
nothing and the result says it expired.

Where it lives: one fleet-level file, ``vulnerability-policy.yaml`` at the checkout's root (or
``--policy FILE``), with a section for production profiles and one for the others, and one allow list.
It is not in serve_configs/ on purpose: serve_configs/ is a signed material of every image, and an
allow entry (or its expiry) must be changeable without making every signed image stale. What a file
does not set keeps the built-in default: production fails on any known vulnerability and on an
unchecked report; the other profiles warn on both. A run whose profile is not known is judged as
production, because a gate fails closed.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vfleet.supply.store import SupplyError

Action = Literal["fail", "warn", "ignore"]
Level = Literal["critical", "high", "medium", "low", "unknown-severity"]
LEVELS: tuple[Level, ...] = get_args(Level)
POLICY_FILE = "vulnerability-policy.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AllowEntry(_Strict):
    id: str = Field(min_length=3, description="a vulnerability ID or alias: PYSEC-..., GHSA-..., CVE-...")
    reason: str = Field(min_length=10, description="why the image may run with it")
    expires: dt.date = Field(description="the last day the entry excuses the vulnerability (YYYY-MM-DD)")


class ClassPolicy(_Strict):
    severity: dict[Level, Action] = Field(default_factory=dict)
    unchecked: Action | None = None


class PolicyFile(_Strict):
    production: ClassPolicy = ClassPolicy()
    other: ClassPolicy = ClassPolicy()
    allow: list[AllowEntry] = Field(default_factory=list)


BUILT_IN: dict[bool, tuple[Action, Action]] = {True: ("fail", "fail"), False: ("warn", "warn")}


@dataclass(frozen=True)
class Rules:
    """The policy for one class of profile, resolved: an action for every level, for an unchecked report,
    and the allow list; ``source`` names where it came from (for the messages)."""

    production: bool
    severity: dict[str, Action]
    unchecked: Action
    allow: tuple[AllowEntry, ...]
    source: str

    @property
    def what(self) -> str:
        return "production" if self.production else "non-production"


def load_file(path: Path) -> PolicyFile:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise SupplyError(f"vulnerability policy {path}: cannot read it ({exc.strerror or exc})") from exc
    except yaml.YAMLError as exc:
        raise SupplyError(f"vulnerability policy {path}: not YAML ({exc})") from exc
    try:
        return PolicyFile.model_validate(data)
    except ValidationError as exc:
        errs = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors())
        raise SupplyError(
            f"vulnerability policy {path}: {errs} (keys: production/other: {{severity: {{LEVEL: fail|warn|ignore}}, "
            f"unchecked: fail|warn|ignore}}, allow: [{{id, reason, expires: YYYY-MM-DD}}]; levels: {', '.join(LEVELS)})"
        ) from exc


def rules(home: Path, production: bool, policy: Path | None = None) -> Rules:
    """The rules for a production (or other) profile: --policy FILE (which must exist), else the checkout's
    vulnerability-policy.yaml when there is one, over the built-in defaults."""
    path = policy if policy is not None else home / POLICY_FILE
    if policy is not None and not policy.is_file():
        raise SupplyError(f"--policy {policy}: no such file (docs/supply-chain.md shows one)")
    data = load_file(path) if path.is_file() else PolicyFile()
    cls = data.production if production else data.other
    level_default, unchecked_default = BUILT_IN[production]
    sev: dict[str, Action] = {lvl: cls.severity.get(lvl, level_default) for lvl in LEVELS}
    source = str(path) if path.is_file() else f"the built-in default (no {path})"
    return Rules(production, sev, cls.unchecked or unchecked_default, tuple(data.allow), source)


@dataclass(frozen=True)
class Finding:
    id: str
    package: str
    version: str
    aliases: tuple[str, ...] = ()
    fix_versions: tuple[str, ...] = ()
    severity: str = "unknown-severity"

    def describe(self) -> str:
        fix = f"fixed in {', '.join(self.fix_versions)}" if self.fix_versions else "no fixed version known"
        return f"{self.id} in {self.package} {self.version} ({self.severity}; {fix})"


@dataclass
class Judgement:
    """What the policy makes of one report. ``verdict``: pass, warn or fail; ``checked``: whether the report
    says which vulnerabilities are known; ``line`` is the one line the gate, verify and the page show."""

    status: str
    verdict: Literal["pass", "warn", "fail"]
    checked: bool
    line: str
    known: int = 0
    failing: list[str] = field(default_factory=list)
    warning: list[str] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    policy: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def findings(report: dict[str, Any]) -> list[Finding]:
    """Every known vulnerability of a report, one per (package, ID). The details (aliases, fixed versions,
    severity) are there for reports written since audit.py kept them; an older report has the IDs only."""
    out = []
    for dep in report.get("vulnerable") or []:
        details = {str(d.get("id")): d for d in dep.get("details") or [] if isinstance(d, dict)}
        for vid in dep.get("vulns") or []:
            d = details.get(str(vid), {})
            sev = str(d.get("severity") or "").lower()
            out.append(
                Finding(
                    id=str(vid),
                    package=str(dep.get("name")),
                    version=str(dep.get("version")),
                    aliases=tuple(str(a) for a in d.get("aliases") or []),
                    fix_versions=tuple(str(v) for v in d.get("fix_versions") or []),
                    severity=sev if sev in LEVELS else "unknown-severity",
                )
            )
    return out


def judge(report: dict[str, Any], r: Rules, today: dt.date | None = None) -> Judgement:
    today = today or dt.date.today()
    status = str(report.get("status") or "")
    found = findings(report)
    if not status.startswith(("vulnerable", "no known vulnerabilities")) or (status.startswith("no") and found):
        return _unchecked(status or "the report has no status", r)
    j = Judgement(status, "pass", True, "", known=len(found), policy=r.source)
    for f in found:
        names = {f.id, *f.aliases}
        entries = [a for a in r.allow if a.id in names]
        valid = [a for a in entries if a.expires >= today]
        if valid:
            a = valid[0]
            j.allowed.append(f"{f.id} (until {a.expires}: {a.reason})")
            continue
        j.expired += [f"the allow entry for {a.id} expired on {a.expires}" for a in entries]
        action = r.severity[f.severity]
        if action == "fail":
            j.failing.append(f.describe())
        elif action == "warn":
            j.warning.append(f.describe())
    j.verdict = "fail" if j.failing else "warn" if j.warning else "pass"
    head = f"vulnerabilities: {j.known} known" + (f", allowed: {', '.join(j.allowed)}" if j.allowed else "")
    parts = [head]
    if j.expired:
        parts.append("; ".join(j.expired) + " (it excuses nothing now)")
    if j.failing:
        parts.append(
            f"FAIL under the {r.what} policy ({r.source}): {', '.join(j.failing)}. Fix: upgrade each to a fixed "
            "version and rebuild the image, or add an allow entry (id, reason, expires: YYYY-MM-DD) to the policy"
        )
    if j.warning:
        parts.append(f"WARNING under the {r.what} policy: {', '.join(j.warning)}")
    j.line = "; ".join(parts)
    return j


def _unchecked(status: str, r: Rules) -> Judgement:
    action = r.unchecked
    if action == "fail":
        line = (
            f"vulnerabilities: NOT CHECKED ({status}): FAIL under the {r.what} policy ({r.source}). Fix: rebuild "
            "(or re-audit) when the vulnerability database is reachable, or set unchecked: warn for this class "
            "of profile in the policy"
        )
        return Judgement(status, "fail", False, line, failing=[status], policy=r.source)
    line = f"NOT CHECKED: vulnerabilities: {status}"
    return Judgement(status, "warn" if action == "warn" else "pass", False, line, policy=r.source)
