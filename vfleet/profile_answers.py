"""The profile's ``verify.answers`` section (docs/answers.md, "The profile's section"): what the answers gate
of boot-verify and promotion (vfleet.verify.answers, judge floor) asks of a profile. It lives on the core
floor so that the profile schema can hold it (imports point down only, docs/architecture.md)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DriftAllowance(_Strict):
    """How far the candidate's teacher-forced log-probabilities of the reference text may move from the
    baseline's: each bound comes from an A/A measurement of this profile (the same image twice), and
    ``measured_by`` says which (the command, the nodes and the date), so that a reader can measure it again."""

    mean_abs: float = Field(ge=0.0, description="mean absolute log-probability difference (nats) per position")
    p99: float = Field(ge=0.0, description="99th percentile (nearest rank) of the absolute differences (nats)")
    top1_share: float = Field(ge=0.0, le=1.0, description="share of positions whose most likely token changed")
    measured_by: str = Field(min_length=10, description="the A/A command that measured these bounds, where and when")


class AnswersSpec(_Strict):
    """What boot-verify asks of the answers gate for this profile, and what promotion allows."""

    questions: str = Field(default="basic-v1", description="the question set, a file of vfleet/verify/answers/sets/")
    reference: str = Field(default="reference-v1", description="the reference text of the log-probability record")
    concurrency: int = Field(default=8, ge=1, le=256, description="questions in flight at once")
    max_tokens: int = Field(default=16, ge=1, le=256, description="the longest answer asked for")
    margin: float = Field(
        default=0.05,
        gt=0.0,
        le=0.2,
        description="the largest accuracy drop (a fraction of the items) that is not a regression",
    )
    confidence: float = Field(
        default=0.95,
        ge=0.8,
        lt=1.0,
        description="one-sided confidence of the bound on the drop and the level of the McNemar test",
    )
    min_accuracy: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description="boot-verify fails on its own when the Wilson upper bound of the accuracy is below it "
        "(a collapse with no promoted build to compare with); None: only promotion's comparison judges",
    )
    #: None: no A/A floor measured yet; the drift part of the verdict is NOT MEASURED, which is no pass.
    drift: DriftAllowance | None = None

    @field_validator("questions", "reference")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(f"{v!r} is not a plain file name such as basic-v1")
        return v
