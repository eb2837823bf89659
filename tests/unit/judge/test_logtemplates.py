"""New warnings are news (vfleet.verify.log.templates): a healthy log's WARNING and stderr lines reduce to
templates that a second boot of the same build repeats exactly, and a fault of each class that prints
below ERROR (compiled ops that fail to import, a worker that hangs, a BLAS library that falls back)
shows up as a new template. The promotion gate on signed reports is tests/integration/judge/test_promotion.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vfleet.profile_schema import WarningAllow, WarningsSpec
from vfleet.profiles import Verify
from vfleet.verify.log import check as logcheck
from vfleet.verify.log import templates as logtemplates
from vfleet.verify.log.parse import parse
from vfleet.verify.log.templates import Allowed, Baseline, compare, judge, mask

FIX = Path(__file__).parents[2] / "fixtures"
CPU = FIX / "logs" / "cpu_healthy_with_sigterm.log"
GRAPH = FIX / "h200-verify" / "run1" / "boot-graph.log"


def names(path_or_text: Path | str) -> list[str]:
    text = path_or_text.read_text(errors="replace") if isinstance(path_or_text, Path) else path_or_text
    return [t.template for t in logtemplates.templates(parse(text))]


@pytest.mark.parametrize(
    ("msg", "want"),
    [
        ("Found ulimit of 20000 and failed", "Found ulimit of <n> and failed"),
        ("see https://docs.vllm.ai/en/latest/x.html for more", "see <url> for more"),
        ("model /models/tiny: 1 shard(s)", "model <path>: <n> shard(s)"),
        ("bound to 10.0.0.7:8000 now", "bound to <addr> now"),
        ("ptr 0x7f3a2c00 freed", "ptr <hex> freed"),
        ("request chatcmpl-3f2a9b8c7d6e5f40a1b2 aborted", "request <id> aborted"),
        ("took 1.25e-3 s, 1,234 tokens", "took <n> s, <n> tokens"),
        ("Capturing CUDA graphs (FULL):  42%|████      | 5/12 [00:01<00:02,  3.1it/s]",
         "Capturing CUDA graphs (FULL): <progress>"),
        ("Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00, 72.70it/s]",
         "Loading safetensors checkpoint shards: <progress>"),
    ],
)  # fmt: skip
def test_masks_what_changes_between_boots(msg: str, want: str) -> None:
    assert mask(msg) == want


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (FIX / "h200-verify" / "run1" / "boot-graph.log", FIX / "h200-verify" / "run2" / "boot-graph.log"),
        (FIX / "h200-verify" / "run1" / "boot-eager.log", FIX / "h200-verify" / "run2" / "boot-eager.log"),
        # the same boot with stdout and stderr in another order (docker logs interleaves them freely)
        (CPU, FIX / "logs" / "cpu_healthy_with_sigterm.stdout_then_stderr.log"),
    ],
    ids=["h200-graph", "h200-eager", "cpu-stream-order"],
)
def test_a_second_healthy_boot_of_the_same_build_has_no_new_template(first: Path, second: Path) -> None:
    a, b = names(first), names(second)
    assert a, first
    cmp = compare(b, a, [], str(first))
    assert cmp.new == [] and cmp.note.startswith("no new warning template"), cmp.new


def test_the_entrypoint_banner_and_tracebacks_are_not_templates() -> None:
    got = names(CPU)
    assert not any("vfleet serve" in t or "patches" in t for t in got), got
    assert "WARNING [system_utils.py] Found ulimit of <n> and failed" in got[0]
    tb = CPU.read_text() + 'Traceback (most recent call last):\n  File "/x.py", line 1, in f\nValueError: boom\n'
    assert names(tb) == got  # the fault check owns tracebacks


# One fault of each class the fault check lets through (it prints below ERROR), added to a healthy log.
BELOW_ERROR = {
    # vllm/platforms/cpu.py and rocm.py: `logger.warning("Failed to import from vllm._C ...")`
    "compiled ops fail to import": "(EngineCore pid=23) WARNING 12-01 07:55:12 [cpu.py:609] Failed to import from "
    "vllm._C: ImportError('libgomp.so.1: cannot open shared object file: No such file or directory')",
    # vllm/distributed/device_communicators/shm_broadcast.py, LONG_WAIT_TIME_LOG_MSG: a worker that stopped reading
    "a worker hangs": "(EngineCore pid=23) WARNING 12-01 07:56:40 [shm_broadcast.py:680] No available shared memory "
    "broadcast block found in 60 seconds. This typically happens when some processes are hanging or doing some "
    "time-consuming work (e.g. compilation, weight/kv cache quantization).",
    # OpenBLAS prints this to stderr, outside any logger, when it falls back to a generic kernel
    "BLAS falls back (raw stderr)": "OpenBLAS WARNING - could not determine the L2 cache size on this system, "
    "assuming 256k",
}


@pytest.mark.parametrize("fault", BELOW_ERROR)
def test_a_fault_printed_below_error_passes_the_fault_check_but_is_a_new_template(fault: str) -> None:
    healthy = CPU.read_text()
    sick = healthy + BELOW_ERROR[fault] + "\n"
    verify = Verify(max_model_len=2048, min_kv_tokens=1, graph_mode=False)
    assert logcheck.check_faults(sick, graphs_expected=verify.graph_mode).ok, "the fault check would catch it"
    cmp = compare(names(sick), names(healthy), [], "the healthy boot")
    assert len(cmp.new) == 1 and cmp.new[0] == next(t for t in names(sick) if t not in names(healthy)), cmp.new
    assert cmp.note == "1 new warning template(s) against the healthy boot"


def test_an_allow_entry_excuses_only_what_it_matches() -> None:
    healthy, sick = names(CPU), names(CPU.read_text() + BELOW_ERROR["a worker hangs"] + "\n")
    entry = WarningAllow(
        template="WARNING [shm_broadcast.py] No available shared memory broadcast block found*",
        reason="the first compile of a new shape holds the workers for over a minute on this platform",
        source="vllm/distributed/device_communicators/shm_broadcast.py",
    )
    cmp = judge(sick, Baseline("last", healthy), WarningsSpec(allow=[entry]))
    assert cmp.new == [] and list(cmp.excused) == [t for t in sick if t not in healthy]
    assert "shm_broadcast.py" in next(iter(cmp.excused.values()))
    other = Allowed("WARNING [cpu.py] *", "unrelated entry", "nowhere")
    assert compare(sick, healthy, [other], "last").new != []


def test_without_a_baseline_every_template_is_listed_and_none_judged_new() -> None:
    got = names(CPU)
    cmp = judge(got, None, WarningsSpec())
    assert cmp.new == [] and cmp.unjudged == got and cmp.baseline is None
    assert cmp.note.startswith("no promoted report of this profile to compare against")


def test_who_fails_on_a_new_template() -> None:
    assert logtemplates.fails(WarningsSpec(), production=True)
    assert not logtemplates.fails(WarningsSpec(), production=False)
    assert logtemplates.fails(WarningsSpec(new_fails=True), production=False)
    assert not logtemplates.fails(WarningsSpec(new_fails=False), production=True)


def test_an_allow_entry_needs_its_reason_and_source() -> None:
    with pytest.raises(ValueError, match="reason"):
        WarningAllow(template="WARNING [x.py] y", reason="short", source="vllm/x.py")
    with pytest.raises(ValueError, match="source"):
        WarningAllow(template="WARNING [x.py] y", reason="a reason that is long enough", source="")


def test_the_report_figures_carry_the_templates() -> None:
    log = parse(GRAPH.read_text())
    figs = logcheck.REGISTRY[0].figures(log, Verify(max_model_len=1, min_kv_tokens=1, graph_mode=True))
    assert [w["template"] for w in figs["log_warnings"]] == names(GRAPH)
    assert all(w["count"] >= 1 and w["first_line"] >= 1 and w["example"] for w in figs["log_warnings"])
