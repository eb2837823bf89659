"""New warnings are news: a server log's WARNING records and raw stderr lines as message templates.

Faults below ERROR pass the deny-by-default fault check (vfleet.verify.log.check): vLLM's compiled ops
failing to import, a BLAS library falling back, a worker printing to stderr before it hangs. Each reads
the same on every boot of a build, so what matters is that a line is new. A line becomes a template by
keeping where it came from (the level and the source file, without the line number, which moves between
releases) and masking what changes between boots: URLs, paths, addresses, hex and ids, numbers.

Boot-verify writes the templates of the log into the report (figures.log_warnings), and, given the
last promoted report of the profile, lists the ones that report did not have (figures.new_warnings).
The promotion gate (vfleet.promotion) compares again, against the signed report of the image promoted
last: under `verify.warnings` a new template fails a production profile unless an allow entry (a
template pattern, the reason, the source) excuses it.

Lines of a traceback are left to the fault check, which fails on them anyway.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from vfleet.profile_schema import WarningsSpec
from vfleet.verify.log.parse import Line, ParsedLog, split_events

#: In order: each runs on what the ones before left.
MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    # a progress bar (tqdm's `42%|████ | 5/12 [00:01<00:02, 3.1it/s]`, vLLM's `100% Completed | 1/1 [...]`)
    (re.compile(r"\d+%\s*(?:\|[^|]*\||Completed\s*\|).*$"), "<progress>"),
    (re.compile(r"\b[a-z][a-z0-9+.-]*://\S+"), "<url>"),
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<id>"),
    (re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"), "<addr>"),
    (re.compile(r"(?<![\w<])(?:~|\.{1,2})?/[^\s'\"(),;:\]]+"), "<path>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<hex>"),
    # request ids and hashes: a run of 12+ hex digits, or a word holding one (chatcmpl-3f2a...)
    (re.compile(r"[\w-]*(?=[0-9a-f]*\d)[0-9a-f]{12,}[\w-]*"), "<id>"),
    (re.compile(r"(?<![\w<])[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"), "<n>"),
)
SPACES = re.compile(r"\s+")
#: The line above and below the banner `vfleet serve` (the image entrypoint) prints before vLLM starts.
BANNER_RULER = "=" * 100
#: The most templates a report lists (a log that prints a new line per request would otherwise flood it).
MAX_TEMPLATES = 200


@dataclass(frozen=True)
class Template:
    """One message template of a log: how often it occurs, its first line and that line's text."""

    template: str
    count: int
    first_line: int
    example: str


def mask(msg: str) -> str:
    out = msg.strip()
    for regex, repl in MASKS:
        out = regex.sub(repl, out)
    return SPACES.sub(" ", out)


def origin(line: Line) -> str | None:
    """`WARNING [file.py]` for a WARNING record (vLLM's, uvicorn's, torch's glog), `stderr` for a line
    printed outside the logger; None for any other line."""
    if line.level == "WARNING":
        src = (line.src or "").rsplit(":", 1)[0] if line.src else ""
        return f"WARNING [{src}]" if src else "WARNING"
    if line.level is None and line.kind == "other" and line.msg.strip():
        return "stderr"
    return None


def of_line(line: Line) -> str | None:
    where = origin(line)
    if where is None:
        return None
    masked = mask(line.msg)
    return f"{where} {masked}" if masked else None


def templates(log: ParsedLog) -> list[Template]:
    """The log's templates in order of first appearance (at most MAX_TEMPLATES). The image
    entrypoint's banner (between two BANNER_RULER lines: image, patches, profile, preflight) is left
    out: it changes with every build, and what it says is checked on its own."""
    seen: dict[str, list[int]] = {}
    example: dict[str, str] = {}
    in_banner = False
    for ev in split_events(log.lines):
        if ev.is_traceback:
            continue
        for line in ev.lines:
            if line.level is None and line.msg.strip() == BANNER_RULER:
                in_banner = not in_banner
                continue
            t = None if in_banner else of_line(line)
            if t is None:
                continue
            if t not in seen:
                if len(seen) >= MAX_TEMPLATES:
                    continue
                seen[t] = [line.no, 0]
                example[t] = line.text.strip()[:300]
            seen[t][1] += 1
    return [Template(t, n, first, example[t]) for t, (first, n) in seen.items()]


@dataclass(frozen=True)
class Allowed:
    """An excuse for a template: a pattern (the template's text, `*` standing for any text; every other
    character, `[` and `?` included, stands for itself), why it is harmless, and where that is shown."""

    pattern: str
    reason: str
    source: str

    def matches(self, template: str) -> bool:
        regex = ".*".join(re.escape(part) for part in self.pattern.split("*"))
        return re.fullmatch(regex, template, re.S) is not None


@dataclass(frozen=True)
class Comparison:
    """A log's templates against a baseline's: ``new`` are neither in the baseline nor excused,
    ``excused`` maps a new template to the allow entry that excused it. ``baseline`` None: there was
    nothing to compare against; every template is then in ``unjudged`` and none is new."""

    baseline: str | None
    new: list[str]
    excused: dict[str, str]
    unjudged: list[str]

    @property
    def note(self) -> str:
        if self.baseline is None:
            return (
                f"no promoted report of this profile to compare against: {len(self.unjudged)} template(s) listed, "
                "none judged new"
            )
        if not self.new:
            return f"no new warning template against {self.baseline}"
        return f"{len(self.new)} new warning template(s) against {self.baseline}"


def compare(
    current: Iterable[str], baseline: Iterable[str] | None, allow: Iterable[Allowed], baseline_name: str | None
) -> Comparison:
    cur = list(dict.fromkeys(current))
    if baseline is None:
        return Comparison(None, [], {}, cur)
    known = set(baseline)
    entries = list(allow)
    new: list[str] = []
    excused: dict[str, str] = {}
    for t in cur:
        if t in known:
            continue
        hit = next((a for a in entries if a.matches(t)), None)
        if hit is not None:
            excused[t] = f"{hit.pattern} ({hit.reason}; {hit.source})"
        else:
            new.append(t)
    return Comparison(baseline_name or "the baseline", new, excused, [])


@dataclass(frozen=True)
class Baseline:
    """The templates of the report compared against, and how to name it (its path, and whether its
    signature was checked)."""

    name: str
    templates: list[str]


def allowed_of(spec: WarningsSpec) -> list[Allowed]:
    return [Allowed(a.template, a.reason, a.source) for a in spec.allow]


def fails(spec: WarningsSpec, production: bool) -> bool:
    """Whether a new template fails the promotion gate: the profile says, else a production profile does."""
    return production if spec.new_fails is None else spec.new_fails


def judge(current: Iterable[str], baseline: Baseline | None, spec: WarningsSpec) -> Comparison:
    return compare(
        current, baseline.templates if baseline else None, allowed_of(spec), baseline.name if baseline else None
    )


def as_figures(cmp: Comparison) -> dict[str, object]:
    """figures.new_warnings of a report."""
    return {"baseline": cmp.baseline, "note": cmp.note, "new": cmp.new, "excused": cmp.excused}
