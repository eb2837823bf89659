"""The boot-verify report as one typed model: what report.json holds, read and written here only.

The runner builds it (vfleet.verify.record.report.build), the report writer writes it (report.json, report.md),
`vfleet verify` summarizes it and promotion reads it back. On disk it is schema 2 as it always was:
keys in the same order, a key that was never written is still absent (``exclude_unset``), so a report
loaded here and dumped again is byte-identical (tests/integration/judge/test_verify_units.py proves it on recorded
reports). Every model forbids keys it does not know; a report.json that does not fit is a VfleetError
naming the file, the key and the value it holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, field_serializer

from vfleet.errors import VfleetError
from vfleet.verify.answers.compare import AnswersCompared
from vfleet.verify.answers.figure import AnswersFigure
from vfleet.verify.log.templates import Template
from vfleet.verify.probe.cache import PrefixHitResult
from vfleet.verify.probe.integrity import IntegrityResult
from vfleet.verify.probe.load import LevelResult

#: 2: `passed` fails closed on unexcused skips (`unexcused_skips`, `not_applicable`); `image` holds the
#: image id and the registry manifest digest with its source (vfleet.verify.record.image.ImageRecord).
SCHEMA = 2

#: figures.integrity keys of the noise rule (issue 22), absent from reports written before it
NOISE_RULE_KEYS = (
    "noise_factor",
    "noise_bound",
    "noise_floor",
    "allowance",
    "noise_rounds",
    "questions_judged",
    "too_noisy",
    "records",
)

Outcome = Literal["passed", "failed", "skipped"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class CheckResult(_Strict):
    """One check (a pytest test of smoke_tests/) as the suite reported it."""

    id: str  # the pytest node id, e.g. test_1_endpoints.py::test_health
    name: str  # the check id (vfleet.checkids), e.g. test_health
    file: str
    outcome: Outcome
    message: str
    duration_s: float
    doc: str = ""
    not_applicable: str | None = None  # set on a skipped check the profile declares not applicable


class Counts(_Strict):
    passed: int
    failed: int
    skipped: int


class UnexcusedSkip(_Strict):
    id: str
    message: str


class ImageInfo(_Strict):
    """vfleet.verify.record.image.ImageRecord.as_dict()."""

    ref: str | None
    id: str | None = None
    digest: str | None = None
    repo_digests: list[str] = []
    source: str | None = None
    reason: str | None = None
    container: str | None = None
    docker_host: str | None = None


class ProbeAnswer(_Strict):
    prompt: str
    expect: str
    text: str
    finish_reason: str | None


class LogAllowed(_Strict):
    entry: str
    line: int


class NewWarnings(_Strict):
    """The log's warning templates against a baseline report's (vfleet.verify.log.templates.compare)."""

    baseline: str | None  # the report compared against; None: there was none
    note: str
    new: list[str]
    excused: dict[str, str]


class Figures(_Strict):
    """What the checks measured, in the order the suite writes it; a check that did not run leaves its
    keys out. The prefix-cache and load figures are the probes' own result types (stdlib dataclasses:
    pydantic validates them field by field and refuses a key they do not have)."""

    start_metrics_error: str | None = None
    max_model_len: int | None = None
    model_root: str | None = None
    #: the manifest of the weights the server loaded (vfleet.verify.probe.weights.WeightsFigure)
    weights: dict[str, Any] | None = None
    #: the first sampling request against the next ones (vfleet.verify.probe.firstreq.FirstRequest)
    first_request: dict[str, Any] | None = None
    vllm_version: str | None = None
    expected_vllm_version: str | None = None
    probes: list[ProbeAnswer] | None = None
    #: the answers check (vfleet.verify.answers.figure): the question set's answers and the reference text's
    #: log-probabilities, which promotion compares with the promoted build's (docs/answers.md)
    answers: AnswersFigure | None = None
    #: the run against the last promoted one of the profile, as `vfleet verify` found it (a view; the gate is
    #: promotion's)
    answers_compared: AnswersCompared | None = None
    prefix_hit: PrefixHitResult | None = None
    integrity: IntegrityResult | None = None
    load: list[LevelResult] | None = None
    finished_reasons: dict[str, float] | None = None
    log_families: list[str] | None = None
    log_allowed: list[LogAllowed] | None = None
    #: the WARNING and stderr message templates of the log, and the new ones against the last promoted report
    log_warnings: list[Template] | None = None
    new_warnings: NewWarnings | None = None
    attention_backends: list[str] | None = None
    kv_tokens: int | None = None
    #: vfleet.verify.probe.gpuhealth.run_gpu_health: ok, problems, devices, diag (the tool's own output).
    gpu_health: dict[str, Any] | None = None
    suite_finished_unix: float | None = None

    @field_serializer("integrity", mode="wrap")
    def _integrity_as_written(self, v: IntegrityResult | None, nxt: SerializerFunctionWrapHandler) -> Any:
        """The noise-rule keys the probe leaves None (a report written before the rule) stay out."""
        out = nxt(v)
        if isinstance(out, dict):
            for key in NOISE_RULE_KEYS:
                if out.get(key, 0) is None:
                    del out[key]
        return out


class Report(_Strict):
    """report.json."""

    schema_: int = Field(SCHEMA, alias="schema")  # `schema` is a BaseModel method
    passed: bool
    profile: str
    production: bool
    url: str
    served_model: str
    image: ImageInfo
    api_key: str  # where the key came from, never the key
    docker_host: str | None
    log: str | None
    selected: str | None
    started: str
    wall_s: float
    vllm_version: str | None
    pytest_exitstatus: int
    counts: Counts
    unexcused_skips: list[UnexcusedSkip]
    not_applicable: dict[str, str]
    checks: list[CheckResult]
    figures: Figures
    partial: bool  # a partial run (-k) never supports a promotion
    plots_missing: str | None = None
    plots: list[str] = []

    def dump(self) -> dict[str, Any]:
        """The report.json object: the keys that were set, in schema order."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def to_json(self) -> str:
        return json.dumps(self.dump(), indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> Report:
        """The report in ``text`` (report.json), strictly typed as written; VfleetError naming ``where``,
        each bad key and its value otherwise."""
        try:
            return cls.model_validate_json(text, strict=True)
        except ValidationError as exc:
            raise VfleetError(f"{where}: not a boot-verify report of schema {SCHEMA}: {_problems(exc)}") from None

    @classmethod
    def load(cls, path: Path) -> Report:
        try:
            text = path.read_text()
        except OSError as exc:
            raise VfleetError(f"{path}: not a readable report ({exc.strerror or exc})") from None
        return cls.from_json(text, str(path))


def unexcused(checks: list[CheckResult], declared: dict[str, str]) -> list[CheckResult]:
    """The skipped checks that ``declared`` (the profile's verify.not_applicable: check id -> reason)
    does not excuse."""
    return [c for c in checks if c.outcome == "skipped" and not declared.get(c.name)]


def verdict_problems(checks: list[CheckResult], exitstatus: int, declared: dict[str, str]) -> list[str]:
    """Why these check results do not pass (empty: they pass): the one rule a report's `passed` is made
    by (vfleet.verify.record.report.build) and promotion recomputes it by, never trusting the stored flag. A
    run passes only when pytest exited 0, some check passed, none failed, and every skipped check is one
    ``declared`` excuses."""
    why: list[str] = []
    failed = [c.id for c in checks if c.outcome == "failed"]
    if failed:
        why.append("failed: " + ", ".join(failed))
    skipped = unexcused(checks, declared)
    if skipped:
        why.append("not verified (skipped, not declared not applicable): " + ", ".join(c.name for c in skipped))
    if not any(c.outcome == "passed" for c in checks):
        why.append("no check passed")
    if exitstatus != 0:
        why.append(f"pytest exited {exitstatus}")
    return why


def _problems(exc: ValidationError) -> str:
    """Each error as KEY.PATH: what is wrong (value): the key as report.json spells it."""
    out = []
    for e in exc.errors():
        key = ".".join(str(p) for p in e["loc"]) or "the file"
        value = "" if e["type"] == "missing" else f" (value {json.dumps(e.get('input'), default=str)[:120]})"
        what = "unknown key" if e["type"] in ("extra_forbidden", "unexpected_keyword_argument") else e["msg"]
        out.append(f"{key}: {what}{value}")
    return "; ".join(out[:8]) + (f"; and {len(out) - 8} more" if len(out) > 8 else "")
