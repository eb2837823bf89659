"""The vulnerability policy: what an image's signed pip-audit report (vulns.json) does to `vfleet image
verify`, the rollout's supply-chain gate and the fleet page (docs/supply-chain.md).

A known vulnerability is judged by its severity: ``fail``, ``warn`` or ``ignore``. pip-audit's JSON
(2.10) carries no severity, so today every finding is of the level ``unknown-severity``, which has a
policy of its own; a report entry that does name one (``critical``, ``high``, ``medium``, ``low``) is
judged by it. What the report could not look up is judged by ``unchecked``: a report whose status is
``unknown`` (the database could not be reached, or the audit did not run), and the packages of a report
that it did not audit (skipped by the service, or missing from its answer), which are ``unknown``, never
clean. An allow entry excuses one vulnerability ID (or an alias of it, such as the CVE of a PYSEC entry)
with a reason until its expiry date, which is at most ``MAX_ALLOW_DAYS`` away (a class may set less with
``allow_max_days``); an expired entry, or one that expires further away, excuses nothing and the result
says so.

A production ``ignore`` (of a level or of ``unchecked``) is written with its reason and its expiry,
``{action: ignore, reason: ..., expires: YYYY-MM-DD}``, bounded like an allow entry: a bare ``ignore`` in
the production class is a file error, and an ignore rule that expired (or expires too far away) falls back
to the built-in ``fail``. The result line names every finding ignored or allowed, with its expiry.

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
#: The furthest an allow entry's (or a production ignore rule's) expiry may be from the day it is judged.
MAX_ALLOW_DAYS = 90
#: The key of the rule for what the report could not look up, beside the levels.
UNCHECKED = "unchecked"
#: How many names of packages not looked up a line shows (the report holds them all).
SHOWN = 5


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AllowEntry(_Strict):
    id: str = Field(min_length=3, description="a vulnerability ID or alias: PYSEC-..., GHSA-..., CVE-...")
    reason: str = Field(min_length=10, description="why the image may run with it")
    expires: dt.date = Field(description="the last day the entry excuses the vulnerability (YYYY-MM-DD)")


class IgnoreRule(_Strict):
    """``ignore`` with its reason and expiry: the only ``ignore`` a production class may hold."""

    action: Literal["ignore"]
    reason: str = Field(min_length=10, description="why findings of this level may be ignored")
    expires: dt.date = Field(description="the last day the rule ignores them (YYYY-MM-DD)")


Rule = Action | IgnoreRule


class ClassPolicy(_Strict):
    severity: dict[Level, Rule] = Field(default_factory=dict)
    unchecked: Rule | None = None
    allow_max_days: int | None = Field(None, ge=1, le=MAX_ALLOW_DAYS)


class PolicyFile(_Strict):
    production: ClassPolicy = ClassPolicy()
    other: ClassPolicy = ClassPolicy()
    allow: list[AllowEntry] = Field(default_factory=list)


BUILT_IN: dict[bool, tuple[Action, Action]] = {True: ("fail", "fail"), False: ("warn", "warn")}


@dataclass(frozen=True)
class Rules:
    """The policy for one class of profile, resolved: an action for every level, for an unchecked report,
    the ignore rules with their reason and expiry (by level, or ``unchecked``), the allow list and the most
    days ahead an entry may expire; ``source`` names where it came from (for the messages)."""

    production: bool
    severity: dict[str, Action]
    unchecked: Action
    allow: tuple[AllowEntry, ...]
    source: str
    ignores: dict[str, IgnoreRule] = field(default_factory=dict)
    allow_max_days: int = MAX_ALLOW_DAYS

    @property
    def what(self) -> str:
        return "production" if self.production else "non-production"

    def action(self, key: str, today: dt.date) -> tuple[Action, str]:
        """The action for level KEY (or ``unchecked``) today, and a note: for an ignore rule, how long it
        ignores and why; for one that expired or expires too far away, that it ignores nothing (the action
        is then the built-in one of the class)."""
        act = self.unchecked if key == UNCHECKED else self.severity[key]
        rule = self.ignores.get(key)
        if act != "ignore":
            return act, ""
        if rule is None:
            return "ignore", f"ignored by the {self.what} policy (no expiry)"
        built_in = BUILT_IN[self.production][1 if key == UNCHECKED else 0]
        void = self.void(f"the ignore rule for {key}", rule.expires, today)
        if void:
            return built_in, void
        return "ignore", f"ignored by the {self.what} policy until {rule.expires}: {rule.reason}"

    def void(self, what: str, expires: dt.date, today: dt.date) -> str:
        """Why an entry or rule expiring on EXPIRES excuses nothing today ('' when it excuses)."""
        if expires < today:
            return f"{what} expired on {expires} (it excuses nothing now)"
        latest = today + dt.timedelta(days=self.allow_max_days)
        if expires > latest:
            return (
                f"{what} expires on {expires}, more than {self.allow_max_days} days away (the most the {self.what} "
                f"policy allows): it excuses nothing; set its expires to {latest} or sooner"
            )
        return ""


def load_file(path: Path) -> PolicyFile:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise SupplyError(f"vulnerability policy {path}: cannot read it ({exc.strerror or exc})") from exc
    except yaml.YAMLError as exc:
        raise SupplyError(f"vulnerability policy {path}: not YAML ({exc})") from exc
    try:
        parsed = PolicyFile.model_validate(data)
    except ValidationError as exc:
        errs = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors())
        raise SupplyError(
            f"vulnerability policy {path}: {errs} (keys: production/other: {{severity: {{LEVEL: RULE}}, "
            f"unchecked: RULE, allow_max_days: 1..{MAX_ALLOW_DAYS}}}, allow: [{{id, reason, expires: YYYY-MM-DD}}]; "
            f"RULE: fail, warn, ignore or {{action: ignore, reason, expires}}; levels: {', '.join(LEVELS)})"
        ) from exc
    bare = [f"production.severity.{k}" for k, v in parsed.production.severity.items() if v == "ignore"]
    bare += ["production.unchecked"] if parsed.production.unchecked == "ignore" else []
    if bare:
        raise SupplyError(
            f"vulnerability policy {path}: {', '.join(bare)}: a production ignore needs a reason and an expiry; "
            f"write {{action: ignore, reason: WHY, expires: YYYY-MM-DD}} (at most {MAX_ALLOW_DAYS} days away), "
            "or fail or warn"
        )
    return parsed


def _resolve(rule: Rule | None, default: Action) -> tuple[Action, IgnoreRule | None]:
    if rule is None:
        return default, None
    if isinstance(rule, IgnoreRule):
        return "ignore", rule
    return rule, None


def rules(home: Path, production: bool, policy: Path | None = None) -> Rules:
    """The rules for a production (or other) profile: --policy FILE (which must exist), else the checkout's
    vulnerability-policy.yaml when there is one, over the built-in defaults."""
    path = policy if policy is not None else home / POLICY_FILE
    if policy is not None and not policy.is_file():
        raise SupplyError(f"--policy {policy}: no such file (docs/supply-chain.md shows one)")
    data = load_file(path) if path.is_file() else PolicyFile()
    cls = data.production if production else data.other
    level_default, unchecked_default = BUILT_IN[production]
    sev: dict[str, Action] = {}
    ignores: dict[str, IgnoreRule] = {}
    for lvl in LEVELS:
        sev[lvl], rule = _resolve(cls.severity.get(lvl), level_default)
        if rule:
            ignores[lvl] = rule
    unchecked, rule = _resolve(cls.unchecked, unchecked_default)
    if rule:
        ignores[UNCHECKED] = rule
    source = str(path) if path.is_file() else f"the built-in default (no {path})"
    days = cls.allow_max_days or MAX_ALLOW_DAYS
    return Rules(production, sev, unchecked, tuple(data.allow), source, ignores, days)


@dataclass(frozen=True)
class VulnFinding:
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
    says which vulnerabilities are known for every package it lists; ``line`` is the one line the gate,
    verify and the page show. ``allowed`` and ``ignored`` name each finding excused, with its expiry;
    ``unknown`` says which packages were not looked up ('' when all were)."""

    status: str
    verdict: Literal["pass", "warn", "fail"]
    checked: bool
    line: str
    known: int = 0
    failing: list[str] = field(default_factory=list)
    warning: list[str] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    unknown: str = ""
    policy: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def findings(report: dict[str, Any]) -> list[VulnFinding]:
    """Every known vulnerability of a report, one per (package, ID). The details (aliases, fixed versions,
    severity) are there for reports written since audit.py kept them; an older report has the IDs only."""
    out = []
    for dep in report.get("vulnerable") or []:
        details = {str(d.get("id")): d for d in dep.get("details") or [] if isinstance(d, dict)}
        for vid in dep.get("vulns") or []:
            d = details.get(str(vid), {})
            sev = str(d.get("severity") or "").lower()
            out.append(
                VulnFinding(
                    id=str(vid),
                    package=str(dep.get("name")),
                    version=str(dep.get("version")),
                    aliases=tuple(str(a) for a in d.get("aliases") or []),
                    fix_versions=tuple(str(v) for v in d.get("fix_versions") or []),
                    severity=sev if sev in LEVELS else "unknown-severity",
                )
            )
    return out


def not_looked_up(report: dict[str, Any]) -> str:
    """Which packages of REPORT were not looked up: '' when it says it audited every package it lists,
    else "N of M packages not looked up (unknown: NAMES)". A report that does not say how many packages it
    listed and audited counts as not looked up at all."""
    total, audited = report.get("packages"), report.get("audited")
    if not isinstance(total, int) or not isinstance(audited, int) or isinstance(total, bool) or total < audited:
        return "the report does not say how many of its packages were looked up (no packages/audited counts)"
    skipped = [d for d in report.get("not_audited") or [] if isinstance(d, dict)]
    missing = total - audited
    if missing <= 0:
        return ""
    names = [f"{d.get('name')} ({d.get('reason') or 'no reason'})" for d in skipped[:SHOWN]]
    if missing > len(skipped):
        names.append(f"{missing - len(skipped)} not in the service's answer")
    more = ", ..." if len(skipped) > SHOWN else ""
    return f"{missing} of {total} packages not looked up (unknown: {', '.join(names)}{more})"


def judge(report: dict[str, Any], r: Rules, today: dt.date | None = None) -> Judgement:
    today = today or dt.date.today()
    status = str(report.get("status") or "")
    found = findings(report)
    if not status.startswith(("vulnerable", "no known vulnerabilities")) or (status.startswith("no") and found):
        return _unchecked(status or "the report has no status", r, today)
    unknown = not_looked_up(report)
    j = Judgement(status, "pass", not unknown, "", known=len(found), unknown=unknown, policy=r.source)
    for f in found:
        _judge_finding(j, f, r, today)
    unknown_action, unknown_part = _judge_unknown(j, r, today) if unknown else ("pass", "")
    if j.failing or unknown_action == "fail":
        j.verdict = "fail"
    elif j.warning or unknown_action == "warn":
        j.verdict = "warn"
    head = f"vulnerabilities: {j.known} known" + (" in the packages looked up" if unknown else "")
    head += f", allowed: {', '.join(j.allowed)}" if j.allowed else ""
    parts = [head + (f", ignored: {', '.join(j.ignored)}" if j.ignored else ""), *j.expired]
    if j.failing:
        parts.append(
            f"FAIL under the {r.what} policy ({r.source}): {', '.join(j.failing)}. Fix: upgrade each to a fixed "
            "version and rebuild the image, or add an allow entry (id, reason, expires: YYYY-MM-DD) to the policy"
        )
    if j.warning:
        parts.append(f"WARNING under the {r.what} policy: {', '.join(j.warning)}")
    if unknown_part:
        parts.append(unknown_part)
    j.line = "; ".join(parts)
    return j


def _judge_finding(j: Judgement, f: VulnFinding, r: Rules, today: dt.date) -> None:
    names = {f.id, *f.aliases}
    entries = [a for a in r.allow if a.id in names]
    for a in entries:
        why = r.void(f"the allow entry for {a.id}", a.expires, today)
        if not why:
            j.allowed.append(f"{f.id} (until {a.expires}: {a.reason})")
            return
        j.expired.append(why)
    action, note = r.action(f.severity, today)
    if action == "fail":
        j.failing.append(f.describe())
    elif action == "warn":
        j.warning.append(f.describe())
    else:
        j.ignored.append(f"{f.describe()} ({note})")
    if note and action != "ignore":
        j.expired.append(note)


def _judge_unknown(j: Judgement, r: Rules, today: dt.date) -> tuple[Action | Literal["pass"], str]:
    """The ``unchecked`` rule applied to the packages not looked up: its action and the part of the line."""
    action, note = r.action(UNCHECKED, today)
    if action != "ignore" and note:
        j.expired.append(note)
    if action == "fail":
        return action, (
            f"FAIL under the {r.what} policy ({r.source}): NOT CHECKED: {j.unknown}. Fix: re-audit (or rebuild) "
            "when the vulnerability database knows every package, or set unchecked: warn for this class of "
            "profile in the policy"
        )
    if action == "warn":
        return action, f"NOT CHECKED: {j.unknown}"
    return action, f"NOT CHECKED: {j.unknown} ({note})"


def _unchecked(status: str, r: Rules, today: dt.date) -> Judgement:
    action, note = r.action(UNCHECKED, today)
    expired = [note] if note and action != "ignore" else []
    if action == "fail":
        line = (
            f"vulnerabilities: NOT CHECKED ({status}): FAIL under the {r.what} policy ({r.source}). Fix: rebuild "
            "(or re-audit) when the vulnerability database is reachable, or set unchecked: warn for this class "
            "of profile in the policy"
        )
        line = "; ".join([line, *expired])
        return Judgement(status, "fail", False, line, failing=[status], expired=expired, policy=r.source)
    line = f"NOT CHECKED: vulnerabilities: {status}" + (f" ({note})" if action == "ignore" else "")
    verdict: Literal["warn", "pass"] = "warn" if action == "warn" else "pass"
    return Judgement(status, verdict, False, "; ".join([line, *expired]), expired=expired, policy=r.source)
