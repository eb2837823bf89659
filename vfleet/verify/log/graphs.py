"""Graph mode, per model the server runs (the target, and a speculative draft when there is one): which
model ran captured CUDA graphs and which ran eager, as the log shows it. vfleet.verify.log.check's
graph_mode check turns this into a finding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vfleet.verify.log.parse import ParsedLog, as_log

GRAPH_DONE_RE = re.compile(r"Graph capturing finished in [\d.]+ secs?")
GRAPH_START_RE = re.compile(r"Capturing CUDA graphs")
EAGER_RE = re.compile(r"Enforce eager set")

TARGET_RE = re.compile(
    r"Starting to load model (\S+?)\.{0,3}$|Initializing a V1 LLM engine .*? with config: model='([^']+)'"
)
SPEC_CONFIG_RE = re.compile(r"speculative_config=SpeculativeConfig\((?P<body>[^)]*)\)")
SPEC_ARGS_RE = re.compile(r"'speculative_config': \{(?P<body>[^}]*)\}")
DRAFT_LOADING_RE = re.compile(r"Loading drafter model|\bdraft model loaded\b", re.I)
# Model Runner V2 captures the speculator in its own step (v1/worker/gpu/spec_decode/*/speculator.py).
DRAFT_CAPTURE_RE = re.compile(r"Capturing model for [\w -]*speculator|Capturing (?!CUDA graphs)[\w -]+CUDA graphs")
DRAFT_EAGER_RE = re.compile(r"running the draft(?: model)? eager", re.I)
DRAFT_CONFIG_EAGER_RE = re.compile(r"enforce_eager(?:': |=)True")
# The V1 model runner (gpu_model_runner.py) captures the drafter inside the target's capture loop and
# logs no line of its own; its `Graph capturing finished` covers both. (A JSON record may name the file
# without its line.)
V1_RUNNER_SRC_RE = re.compile(r"^gpu_model_runner\.py(?::|$)")


@dataclass(frozen=True)
class ModelGraphs:
    role: str  # "target" or "draft"
    name: str
    ok: bool
    seen: str


def _draft(log: ParsedLog) -> tuple[str, str] | None:
    """The draft model the server runs (a label), and its speculative config as the log shows it."""
    for ln in log.lines:
        for rx in (SPEC_CONFIG_RE, SPEC_ARGS_RE):
            m = rx.search(ln.msg)
            if m:
                body = m.group("body")
                model = re.search(r"model='([^']*)'|'model': '([^']*)'", body)
                method = re.search(r"method='([^']*)'|'method': '([^']*)'", body)
                name = (model.group(1) or model.group(2)) if model else None
                kind = (method.group(1) or method.group(2)) if method else None
                label = " ".join(x for x in (name, f"({kind})" if kind else None) if x)
                return label or "draft", body
    if any(DRAFT_LOADING_RE.search(ln.msg) for ln in log.lines):
        return "draft", ""
    return None


def graph_mode_per_model(log: str | ParsedLog) -> list[ModelGraphs]:
    parsed = as_log(log)
    lines = parsed.lines
    target = "target"
    for ln in lines:
        m = TARGET_RE.search(ln.msg)
        if m:
            target = m.group(1) or m.group(2)
            break
    eager = next((ln for ln in lines if EAGER_RE.search(ln.msg)), None)
    done = next((ln for ln in lines if GRAPH_DONE_RE.search(ln.msg)), None)
    started = next((ln for ln in lines if GRAPH_START_RE.search(ln.text)), None)
    out: list[ModelGraphs] = []
    if eager:
        out.append(ModelGraphs("target", target, False, f"eager mode (line {eager.no}): {eager.text.strip()[:200]}"))
    elif done:
        out.append(ModelGraphs("target", target, True, f"line {done.no}: {done.msg[done.msg.find('Graph') :][:120]}"))
    else:
        seen = "capture started but never finished" if started else "no graph capture at all"
        out.append(ModelGraphs("target", target, False, f"expected 'Graph capturing finished'; saw {seen}"))
    found = _draft(parsed)
    if found is None:
        return out
    draft, spec = found
    draft_eager = next((ln for ln in lines if DRAFT_EAGER_RE.search(ln.msg)), None) or eager
    captured = next((ln for ln in lines if DRAFT_CAPTURE_RE.search(ln.text)), None)
    if DRAFT_CONFIG_EAGER_RE.search(spec):
        out.append(
            ModelGraphs("draft", draft, False, f"eager: its speculative config sets enforce_eager ({spec[:160]})")
        )
    elif draft_eager:
        out.append(
            ModelGraphs("draft", draft, False, f"eager (line {draft_eager.no}): {draft_eager.text.strip()[:200]}")
        )
    elif captured and done:
        out.append(ModelGraphs("draft", draft, True, f"line {captured.no}: {captured.msg.strip()[:120]}"))
    elif done and done.src and V1_RUNNER_SRC_RE.match(done.src):
        out.append(
            ModelGraphs("draft", draft, True, f"captured with the target by the V1 model runner (line {done.no})")
        )
    else:
        out.append(
            ModelGraphs(
                "draft", draft, False, "no graph capture of the draft ('Capturing model for ... speculator' or its "
                "'Capturing ... CUDA graphs' bar, then 'Graph capturing finished')",
            )
        )  # fmt: skip
    return out
