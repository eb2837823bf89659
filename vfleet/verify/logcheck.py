"""Checks on a vLLM server log (REFERENCE section 4), as pure functions of the log text.

Each check returns a `Finding`: ``ok`` (True, False, or None when the check does not apply to the
profile, with the reason) and a message that says what was expected and what was seen. Lines are
matched as families, so the wording of vLLM 0.26-0.33 (with or without the `(Proc pid=N)` prefix,
`GPU`/`CPU` KV cache, 0.30 and 0.33 auto-fit texts) is all recognised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vfleet.profiles import Verify

# Faults seen in the field; they count anywhere in the log.
FAULT_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("GPU memory access fault", re.compile(r"Memory access fault by GPU node-\d+")),
    ("illegal memory access", re.compile(r"an illegal memory access was encountered", re.I)),
    ("HIP error", re.compile(r"\bHIP error\b")),
    ("CUDA error", re.compile(r"\bCUDA error\b")),
    ("Triton JIT during inference", re.compile(r"Triton kernel JIT compilation during inference")),
    ("eager draft", re.compile(r"running the draft eagerly")),
    ("device-side assert", re.compile(r"device-side assert(ion)? triggered", re.I)),
    ("kernel assert", re.compile(r"Assertion `[^`]*` failed|\bAssertionError\b")),
    ("segfault", re.compile(r"Segmentation fault|SIGSEGV|Fatal Python error")),
]
# An engine that died by itself. After an orderly shutdown (SIGTERM) vLLM prints the same
# EngineDeadError traceback, so these only count before the first shutdown marker.
CRASH_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "engine died",
        re.compile(r"EngineDeadError|EngineCore encountered a fatal error|Engine core proc .* died"),
    ),
]
SHUTDOWN_MARK = re.compile(r"\[shutdown\]|received signal=SIG(TERM|INT)|Shutting down")

BACKEND_RE = re.compile(r"Using (?:[\w-]+ )?['\"]?([A-Z][A-Z0-9_]+)['\"]? (?:attention )?backend")
KV_RE = re.compile(r"(GPU|CPU|XPU) KV cache size: ([\d,]+) tokens")
GRAPH_DONE_RE = re.compile(r"Graph capturing finished in [\d.]+ secs?")
GRAPH_START_RE = re.compile(r"Capturing CUDA graphs")
EAGER_RE = re.compile(r"Enforce eager set")
AUTOFIT_RE = re.compile(r"Auto-fit max_model_len: reduced from ([\d,]+) to ([\d,]+)")


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool | None
    message: str

    @property
    def skipped(self) -> bool:
        return self.ok is None


def _num(s: str) -> int:
    return int(s.replace(",", ""))


def _first_line(pattern: re.Pattern[str], lines: list[str]) -> str | None:
    for line in lines:
        if pattern.search(line):
            return line.strip()
    return None


def check_faults(text: str) -> Finding:
    lines = text.splitlines()
    seen: list[str] = []
    for i, line in enumerate(lines):
        for name, pat in FAULT_PATTERNS:
            if pat.search(line):
                seen.append(f"line {i + 1} [{name}]: {line.strip()[:200]}")
    for i, line in enumerate(lines):
        if SHUTDOWN_MARK.search(line):
            break
        for name, pat in CRASH_PATTERNS:
            if pat.search(line):
                seen.append(f"line {i + 1} [{name}]: {line.strip()[:200]}")
    if seen:
        more = f" (and {len(seen) - 5} more)" if len(seen) > 5 else ""
        return Finding("faults", False, "expected no fault or assert lines; saw:\n  " + "\n  ".join(seen[:5]) + more)
    return Finding("faults", True, f"no fault or assert pattern in {len(lines)} lines")


def attention_backends(text: str) -> list[str]:
    """The attention backends the log names ('Using X backend' lines), sorted."""
    return sorted({m.group(1) for m in BACKEND_RE.finditer(text)})


def check_attention_backend(text: str, verify: Verify, production: bool = True) -> Finding:
    want = verify.attention_backend
    found = attention_backends(text)
    if not want:
        if not production:
            return Finding("attention_backend", None, "the profile names no attention backend")
        # A production profile must not pass without knowing what ran: any named backend will do,
        # and the report records which.
        if found:
            return Finding(
                "attention_backend", True, f"attention backend {', '.join(found)} in the log (the profile names none)"
            )
        return Finding(
            "attention_backend",
            False,
            "expected a 'Using X backend' line naming the attention backend (the profile names no "
            "verify.attention_backend, so any backend is accepted, but the log must say which); saw none",
        )
    if want in found:
        return Finding("attention_backend", True, f"attention backend {want} in the log")
    seen = ", ".join(found) if found else "no 'Using ... backend' line"
    return Finding("attention_backend", False, f"expected attention backend {want}; saw {seen}")


def check_graph_mode(text: str, verify: Verify) -> Finding:
    if not verify.graph_mode:
        return Finding("graph_mode", None, "the profile does not expect graph mode (eager is waived for it)")
    lines = text.splitlines()
    eager = _first_line(EAGER_RE, lines)
    done = _first_line(GRAPH_DONE_RE, lines)
    if eager:
        return Finding("graph_mode", False, f"expected graph mode; saw eager mode: {eager[:200]}")
    if not done:
        started = _first_line(GRAPH_START_RE, lines)
        seen = "capture started but never finished" if started else "no graph capture at all"
        return Finding("graph_mode", False, f"expected 'Graph capturing finished'; saw {seen}")
    return Finding("graph_mode", True, f"graph capture finished: {done[done.find('Graph') :][:120]}")


def kv_tokens(text: str) -> int | None:
    found = [_num(m.group(2)) for m in KV_RE.finditer(text)]
    return min(found) if found else None


def check_kv_tokens(text: str, verify: Verify) -> Finding:
    tokens = kv_tokens(text)
    want = verify.min_kv_tokens
    if tokens is None:
        return Finding("kv_tokens", False, f"expected a 'KV cache size: N tokens' line with N >= {want:,}; saw none")
    if tokens < want:
        return Finding("kv_tokens", False, f"expected KV cache >= {want:,} tokens; saw {tokens:,}")
    return Finding("kv_tokens", True, f"KV cache {tokens:,} tokens >= {want:,}")


def check_autofit(text: str) -> Finding:
    m = AUTOFIT_RE.search(text)
    if m:
        return Finding(
            "autofit",
            False,
            f"expected no auto-fit reduction; saw max_model_len reduced from {_num(m.group(1)):,} "
            f"to {_num(m.group(2)):,}",
        )
    return Finding("autofit", True, "no auto-fit reduction")


def all_checks(text: str, verify: Verify, production: bool = True) -> list[Finding]:
    return [
        check_faults(text),
        check_attention_backend(text, verify, production),
        check_graph_mode(text, verify),
        check_kv_tokens(text, verify),
        check_autofit(text),
    ]
