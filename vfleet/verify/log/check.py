"""Checks on a vLLM server log, as pure functions of the log text.

Each check returns a `LogFinding`: ``ok`` (True, False, or None when the check does not apply to the
profile, with the reason) and a message that says what was expected and what was seen. Lines are
matched as families, so the wording of vLLM 0.26-0.34 (with or without the `(Proc pid=N)` prefix,
`GPU`/`CPU` KV cache, the 0.30, 0.33 and 0.34 auto-fit texts) is all recognised. Where each line the
checks read is printed, per base, is vfleet.verify.log.wording.WORDING.

The fault check denies by default: every ERROR/CRITICAL record, every traceback and every line of a
fault family (vfleet.verify.log.rules.FAMILIES), and every access line answering 5xx, fails it unless
an entry of ALLOW (vfleet.verify.log.allow) matches; a traceback is named by its first line and the
exception that ended it. A log that cannot be read (empty, binary, cut mid-line, not vLLM's format,
another vLLM version; vfleet.verify.log.parse) fails every check that would otherwise pass, with what
could not be read: no check passes a log it could not parse. Colored and JSON logs are read as the
plain one (logparse).

The parts: logparse reads the log, logallow holds the allow-list, logrequests ties an error to its
request's answer and its exception to where it was raised, loggraphs works out graph mode per model;
this module holds the checks and their registry. Each name is imported from its own module.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vfleet.profiles import Verify
from vfleet.verify.log import templates as logtemplates
from vfleet.verify.log.allow import (
    ALLOW,
    Allow,
)
from vfleet.verify.log.graphs import (
    graph_mode_per_model,
)
from vfleet.verify.log.parse import Event, ParsedLog, as_log, parse, split_events
from vfleet.verify.log.requests import access
from vfleet.verify.log.rules import FAMILY_IDS, line_families
from vfleet.verify.log.shapes import TRACEBACK_RE

BACKEND_RE = re.compile(r"Using (?:[\w-]+ )?['\"]?([A-Z][A-Z0-9_]+)['\"]? (?:attention )?backend")
KV_RE = re.compile(r"(GPU|CPU|XPU) KV cache size: ([\d,]+) tokens")
AUTOFIT_RE = re.compile(r"Auto-fit max_model_len: reduced from ([\d,]+) to ([\d,]+)")
# vLLM 0.34 with the extensible KV cache (its default on CUDA and ROCm) fits the length twice: before
# graph capture and warm-up, tentatively (the line ends with AUTOFIT_TENTATIVE_RE), and again after
# them. The second fit says either that the length stays (AUTOFIT_SETTLED_RE) or that it was cut
# (AUTOFIT_FINAL_RE, which is also 0.34's only wording of a reduction without the extensible cache).
AUTOFIT_FINAL_RE = re.compile(r"--max-model-len auto reduced max_model_len from ([\d,]+) to ([\d,]+)")
AUTOFIT_TENTATIVE_RE = re.compile(r"the final length is set after CUDA graph capture and warmup")
AUTOFIT_SETTLED_RE = re.compile(r"Auto-fit max_model_len: using max_model_len=([\d,]+), which fits")


@dataclass(frozen=True)
class LogFinding:
    check: str
    ok: bool | None
    message: str

    @property
    def skipped(self) -> bool:
        return self.ok is None


def _num(s: str) -> int:
    return int(s.replace(",", ""))


def _closed(finding: LogFinding, log: ParsedLog) -> LogFinding:
    """Fail closed: a check that would pass (or fail) on a log that could not be read fails and says why."""
    if log.readable or finding.ok is None:
        return finding
    why = "could not read the log, so this check cannot pass: " + "; ".join(log.problems)
    if finding.ok is False:
        why += f". The check also failed: {finding.message}"
    return LogFinding(finding.check, False, why)


@dataclass
class FaultScan:
    """What the fault check saw: events that alarm, and events an allow-list entry excused."""

    denied: list[Event]
    allowed: list[tuple[Event, Allow]]


def scan_faults(log: str | ParsedLog, graphs_expected: bool = True) -> FaultScan:
    parsed = as_log(log)
    denied: list[Event] = []
    allowed: list[tuple[Event, Allow]] = []
    for ev in split_events(parsed.lines):
        fams: list[str] = []
        for ln in ev.lines:
            here: list[str] = []
            if ln.level in ("ERROR", "CRITICAL"):
                here.append("error-level")
            if TRACEBACK_RE.search(ln.text):
                here.append("traceback")
            answer = access(ln)
            if answer is not None and answer.status >= 500:
                here.append("http-5xx")
            here += line_families(ln.text, graphs_expected)
            if here:
                ev.hits.append((ln, here))
                fams += [f for f in here if f not in fams]
        if not fams:
            continue
        ev.families = sorted(fams, key=FAMILY_IDS.index)
        entry = next((a for a in ALLOW if set(fams) <= a.covers and a.match(ev, parsed)), None)
        if entry is None:
            ev.notes = [f"{a.id}: {why}" for a in ALLOW if set(fams) <= a.covers and (why := a.explain(ev, parsed))]
            denied.append(ev)
        else:
            allowed.append((ev, entry))
    return FaultScan(denied, allowed)


def describe_event(ev: Event) -> str:
    """`line N [families]: the line`. A traceback is named by its first line (the record that introduces
    it) and the exception that ended it, its type and message (and the first one raised, when a chain
    started elsewhere); another event by the line that best shows the fault (the first with a runtime
    family, else the first). Then why an allow-list entry of its kind did not excuse it."""
    fams = ", ".join(ev.families)
    if ev.is_traceback:
        secs = ev.sections()
        end = secs[-1].exc if secs else None
        if end is None:
            ended = "ended by no exception line (the traceback is cut off)"
        else:
            ended = f"ended by {end.msg.strip()[:300]} (line {end.no})"
            root = secs[0].exc
            if len(secs) > 1 and root is not None and root.msg.strip() != end.msg.strip():
                ended += f"; first raised: {root.msg.strip()[:200]} (line {root.no})"
        if ev.first.from_json and ev.first.no == ev.last.no:
            span = f" (traceback in the JSON record of line {ev.first.no})"
        else:
            span = f" (traceback block, lines {ev.first.no}-{ev.last.no})"
        out = f"line {ev.first.no} [{fams}]{span}: {ev.first.text.strip()[:200]} -- {ended}"
    else:
        pattern_hits = [(ln, f) for ln, f in ev.hits if set(f) - {"error-level", "traceback"}]
        ln = pattern_hits[0][0] if pattern_hits else ev.hits[0][0]
        out = f"line {ln.no} [{fams}]: {ln.text.strip()[:300]}"
    return out + "".join(f"; not excused ({note})" for note in ev.notes)


def check_faults(log: str | ParsedLog, graphs_expected: bool = True) -> LogFinding:
    parsed = as_log(log)
    scan = scan_faults(parsed, graphs_expected)
    if scan.denied:
        seen = [describe_event(ev) for ev in scan.denied]
        more = f"\n  (and {len(seen) - 8} more)" if len(seen) > 8 else ""
        finding = LogFinding(
            "faults",
            False,
            "expected no fault: no ERROR/CRITICAL line, traceback or runtime fault line that the allow-list "
            "does not excuse; saw:\n  " + "\n  ".join(seen[:8]) + more,
        )
    else:
        excused = sorted({a.id for _, a in scan.allowed})
        note = f"; allowed: {', '.join(f'{a} x{sum(1 for _, x in scan.allowed if x.id == a)}' for a in excused)}"
        finding = LogFinding(
            "faults",
            True,
            f"no fault in {len(parsed.lines)} lines ({len(FAMILY_IDS)} families checked"
            + (note if excused else "")
            + ")",
        )
    return _closed(finding, parsed)


def attention_backends(text: str | ParsedLog) -> list[str]:
    """The attention backends the log names ('Using X backend' lines), sorted."""
    return sorted({m.group(1) for m in BACKEND_RE.finditer(as_log(text).plain)})


def check_attention_backend(log: str | ParsedLog, verify: Verify, production: bool = True) -> LogFinding:
    parsed = as_log(log)
    return _closed(_attention_backend(parsed, verify, production), parsed)


def _attention_backend(log: ParsedLog, verify: Verify, production: bool) -> LogFinding:
    want = verify.attention_backend
    found = attention_backends(log)
    if not want:
        if not production:
            return LogFinding("attention_backend", None, "the profile names no attention backend")
        # A production profile must not pass without knowing what ran: any named backend will do,
        # and the report records which.
        if found:
            return LogFinding(
                "attention_backend", True, f"attention backend {', '.join(found)} in the log (the profile names none)"
            )
        return LogFinding(
            "attention_backend",
            False,
            "expected a 'Using X backend' line naming the attention backend (the profile names no "
            "verify.attention_backend, so any backend is accepted, but the log must say which); saw none",
        )
    if want in found:
        return LogFinding("attention_backend", True, f"attention backend {want} in the log")
    seen = ", ".join(found) if found else "no 'Using ... backend' line"
    return LogFinding("attention_backend", False, f"expected attention backend {want}; saw {seen}")


def check_graph_mode(log: str | ParsedLog, verify: Verify) -> LogFinding:
    if not verify.graph_mode:
        return LogFinding("graph_mode", None, "the profile does not expect graph mode (eager is waived for it)")
    parsed = as_log(log)
    models = graph_mode_per_model(parsed)
    bad = [m for m in models if not m.ok]
    if bad:
        what = "; ".join(f"{m.role} {m.name}: {m.seen}" for m in bad)
        finding = LogFinding("graph_mode", False, f"expected graph mode for every model the server runs; saw {what}")
    else:
        what = "; ".join(f"{m.role} {m.name}: {m.seen}" for m in models)
        finding = LogFinding("graph_mode", True, f"graph capture finished for every model ({what})")
    return _closed(finding, parsed)


def kv_tokens(text: str | ParsedLog) -> int | None:
    found = [_num(m.group(2)) for m in KV_RE.finditer(as_log(text).plain)]
    return min(found) if found else None


def check_kv_tokens(log: str | ParsedLog, verify: Verify) -> LogFinding:
    parsed = as_log(log)
    tokens = kv_tokens(parsed)
    want = verify.min_kv_tokens
    if tokens is None:
        finding = LogFinding(
            "kv_tokens", False, f"expected a 'KV cache size: N tokens' line with N >= {want:,}; saw none"
        )
    elif tokens < want:
        finding = LogFinding("kv_tokens", False, f"expected KV cache >= {want:,} tokens; saw {tokens:,}")
    else:
        finding = LogFinding("kv_tokens", True, f"KV cache {tokens:,} tokens >= {want:,}")
    return _closed(finding, parsed)


def autofit_reductions(log: str | ParsedLog) -> list[tuple[int, int, bool]]:
    """Every auto-fit reduction the log states, in order: (from, to, final), where final marks 0.34's
    re-fit after graph capture and warm-up."""
    found: list[tuple[int, int, bool]] = []
    for ln in as_log(log).lines:
        for rx, final in ((AUTOFIT_RE, False), (AUTOFIT_FINAL_RE, True)):
            m = rx.search(ln.msg)
            if m:
                found.append((_num(m.group(1)), _num(m.group(2)), final))
    return found


def check_autofit(log: str | ParsedLog) -> LogFinding:
    """No auto-fit reduction of max_model_len. The reduction reported runs from the first length asked
    for to the last one fitted (on 0.34 a tentative fit can be cut again after warm-up). A tentative
    fit with no later final line fails closed: the length the server runs is not in the log."""
    parsed = as_log(log)
    cuts = autofit_reductions(parsed)
    tentative = next((ln for ln in parsed.lines if AUTOFIT_TENTATIVE_RE.search(ln.msg)), None)
    settled = tentative is not None and any(
        AUTOFIT_SETTLED_RE.search(ln.msg) or AUTOFIT_FINAL_RE.search(ln.msg) for ln in parsed.lines[tentative.pos + 1 :]
    )
    if cuts:
        first, last = cuts[0], cuts[-1]
        when = " after CUDA graph capture and warm-up" if last[2] else ""
        finding = LogFinding(
            "autofit",
            False,
            f"expected no auto-fit reduction; saw max_model_len reduced from {first[0]:,} to {last[1]:,}{when}",
        )
    elif tentative is not None and not settled:
        finding = LogFinding(
            "autofit",
            False,
            f"expected the final max_model_len after a tentative auto-fit (line {tentative.no}: vLLM fits it "
            "again after CUDA graph capture and warm-up); saw no final length line, so a reduction cannot be "
            "ruled out",
        )
    else:
        finding = LogFinding("autofit", True, "no auto-fit reduction")
    return _closed(finding, parsed)


# ---------------------------------------------------------------------------------------------------
# The registry: every log check, once. all_checks runs it in this order, smoke_tests/test_6_log.py is
# parametrized by it (one test_log[NAME] per entry), and vfleet.checkids.LOG_CHECKS (the ids
# `verify.not_applicable` accepts) names its entries in order (tests/unit/judge/test_verify_checks.py). Adding a
# check is one entry here and its name there (docs/boot-verify.md, "Adding a log check").
# ---------------------------------------------------------------------------------------------------


def _no_figures(log: ParsedLog, verify: Verify) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class LogCheck:
    """One log check: its name (LogFinding.check, the test id `test_log[NAME]` and the report's key), how
    it runs on a parsed log (the profile's verify section, whether the profile is production), and the
    figures it adds to the report (figures.json), whatever its outcome."""

    name: str
    run: Callable[[ParsedLog, Verify, bool], LogFinding]
    figures: Callable[[ParsedLog, Verify], dict[str, Any]] = _no_figures


def _fault_figures(log: ParsedLog, verify: Verify) -> dict[str, Any]:
    """What the deny-by-default fault check looked for, and what its allow-list excused."""
    scan = scan_faults(log, graphs_expected=verify.graph_mode)
    return {
        "log_families": list(FAMILY_IDS),
        "log_allowed": [{"entry": a.id, "line": ev.first.no} for ev, a in scan.allowed],
        # New warnings are news (vfleet.verify.log.templates): the runner and the promotion gate compare them.
        "log_warnings": [dataclasses.asdict(t) for t in logtemplates.templates(log)],
    }


REGISTRY: tuple[LogCheck, ...] = (
    LogCheck(
        "faults",
        lambda log, verify, production: check_faults(log, graphs_expected=verify.graph_mode),
        _fault_figures,
    ),
    LogCheck(
        "attention_backend",
        check_attention_backend,
        lambda log, verify: {"attention_backends": attention_backends(log)},
    ),
    LogCheck("graph_mode", lambda log, verify, production: check_graph_mode(log, verify)),
    LogCheck(
        "kv_tokens",
        lambda log, verify, production: check_kv_tokens(log, verify),
        lambda log, verify: {"kv_tokens": kv_tokens(log)},
    ),
    LogCheck("autofit", lambda log, verify, production: check_autofit(log)),
)


def all_checks(text: str, verify: Verify, production: bool = True) -> list[LogFinding]:
    log = parse(text)
    return [c.run(log, verify, production) for c in REGISTRY]
