"""The profile loader: layering, clear errors for malformed input, and fuzzing (never a traceback)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, ConfigTree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vfleet.cli import main
from vfleet.errors import ProfileError
from vfleet.profiles import Catalog
from vfleet.rules import evaluate


def test_layers_merge_in_order() -> None:
    cat = Catalog()
    h200 = cat.load("glm-5.3-flash/h200")
    assert h200.sources == [
        "models/glm-5.3-flash/model.yaml",
        "models/glm-5.3-flash/cuda.yaml",
        "models/glm-5.3-flash/h200.yaml",
        "platforms/families/cuda.yaml",
        "platforms/h200.yaml",
    ]
    assert h200.vllm["kv-cache-dtype"] == "bfloat16"  # h200.yaml beats cuda.yaml
    assert cat.load("glm-5.3-flash/b200").vllm["kv-cache-dtype"] == "fp8"
    assert cat.load("glm-5.3-flash/gb300").vllm["tensor-parallel-size"] == 4
    mi = cat.load("glm-5.3-flash/mi350x")
    assert mi.env == {"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_USE_AITER_MOE": "0"}
    assert mi.verify.attention_backend == "ROCM_AITER_MLA_SPARSE"
    assert mi.platform.runtime.devices == ["/dev/kfd", "/dev/dri"]
    assert mi.sources == [
        "models/glm-5.3-flash/model.yaml",
        "models/glm-5.3-flash/rocm.yaml",
        "models/glm-5.3-flash/gfx950.yaml",
        "platforms/families/rocm.yaml",
        "platforms/mi350x.yaml",
    ]


def test_the_platform_env_is_the_first_layer(config_tree: ConfigTree) -> None:
    """platforms/<p>.yaml env reaches every model served there; a model layer overrides a key or removes it."""
    tiny = Catalog().load("tiny/cpu")
    assert tiny.env["TORCHDYNAMO_DISABLE"] == "1" and tiny.env["VLLM_TARGET_DEVICE"] == "cpu"
    assert (
        Catalog().load("smollm2-135m/cpu").env["VLLM_SHM_BROADCAST_BUSY_LOOP_S"]
        == tiny.env["VLLM_SHM_BROADCAST_BUSY_LOOP_S"]
    )
    config_tree.edit(
        "models/tiny/model.yaml", lambda d: d["env"].update(TORCHDYNAMO_DISABLE="0", VLLM_TARGET_DEVICE=None)
    )
    tiny = Catalog().load("tiny/cpu")
    assert tiny.env["TORCHDYNAMO_DISABLE"] == "0" and "VLLM_TARGET_DEVICE" not in tiny.env
    config_tree.edit("platforms/cpu.yaml", lambda d: d["env"].update({"bad-name": "1"}))
    with pytest.raises(ProfileError, match="bad-name"):
        Catalog().load("tiny/cpu")


def test_each_fact_is_written_once() -> None:
    """No (key, value) of a model layer is repeated by a layer above it."""
    root = REPO / "serve_configs" / "models"
    for model_dir in root.iterdir():
        base = yaml.safe_load((model_dir / "model.yaml").read_text())
        for layer in model_dir.glob("*.yaml"):
            if layer.name == "model.yaml":
                continue
            over = yaml.safe_load(layer.read_text()) or {}
            for section in ("vllm", "env", "verify"):
                for key, value in (over.get(section) or {}).items():
                    assert (base.get(section) or {}).get(key, object()) != value, f"{layer}: {section}.{key} repeats"


# -- the arch layer -------------------------------------------------------------------------------

MI300X = """platform: mi300x
description: AMD Instinct MI300X, 8 GPUs per node (gfx942), a hypothetical platform of the tests
vendor: amd
family: rocm
arch: gfx942
gpus: 8
detect:
  names: [MI300X]
runtime:
  shm_size: 32g
"""


def _add_mi300x(config_tree: ConfigTree) -> None:
    config_tree.write("platforms/mi300x.yaml", MI300X)
    config_tree.edit("models/glm-5.3-flash/model.yaml", lambda d: d["platforms"].append("mi300x"))


def test_another_rocm_arch_does_not_inherit_the_gfx950_layer(config_tree: ConfigTree) -> None:
    _add_mi300x(config_tree)
    cat = Catalog()
    mi300x = cat.load("glm-5.3-flash/mi300x")
    assert mi300x.sources == [
        "models/glm-5.3-flash/model.yaml",
        "models/glm-5.3-flash/rocm.yaml",
        "platforms/families/rocm.yaml",
        "platforms/mi300x.yaml",
    ]
    # The family's container runtime applies (platforms/families/rocm.yaml), and the platform's own key wins.
    rt = mi300x.platform.runtime
    assert rt.devices == ["/dev/kfd", "/dev/dri"] and rt.group_add == ["video"] and rt.stop_timeout == 150
    assert rt.shm_size == "32g" and cat.load("glm-5.3-flash/mi355x").platform.runtime.shm_size == "64g"
    # The family facts still apply; the gfx950 faults' workarounds do not.
    assert mi300x.env == {"VLLM_ROCM_USE_AITER": "1"}
    assert mi300x.vllm["max-num-seqs"] == 512 and "kv-cache-dtype" not in mi300x.vllm
    result = evaluate(mi300x)
    assert not result.violations and not result.waived
    for name in ("glm-5.3-flash/mi355x", "glm-5.3-flash/mi350x"):
        p = cat.load(name)
        assert "models/glm-5.3-flash/gfx950.yaml" in p.sources, name
        assert p.env["VLLM_ROCM_USE_AITER_MOE"] == "0" and p.vllm["kv-cache-dtype"] == "bfloat16", name
        assert not evaluate(p).violations, name


def test_arch_layer_sits_between_family_and_platform(config_tree: ConfigTree) -> None:
    _add_mi300x(config_tree)
    config_tree.write("models/glm-5.3-flash/gfx942.yaml", "vllm:\n  max-num-seqs: 256\n  kv-cache-dtype: fp8\n")
    config_tree.write("models/glm-5.3-flash/mi300x.yaml", "vllm:\n  kv-cache-dtype: bfloat16\n")
    cat = Catalog()
    mi300x = cat.load("glm-5.3-flash/mi300x")
    assert mi300x.sources[1:4] == [
        "models/glm-5.3-flash/rocm.yaml",
        "models/glm-5.3-flash/gfx942.yaml",
        "models/glm-5.3-flash/mi300x.yaml",
    ]
    assert mi300x.vllm["max-num-seqs"] == 256  # gfx942.yaml beats rocm.yaml
    assert mi300x.vllm["kv-cache-dtype"] == "bfloat16"  # mi300x.yaml beats gfx942.yaml
    assert cat.load("glm-5.3-flash/mi355x").vllm["max-num-seqs"] == 512


def test_check_names_a_layer_no_profile_reads(config_tree: ConfigTree, capsys: pytest.CaptureFixture[str]) -> None:
    assert Catalog().stray_layers() == []
    config_tree.write("models/glm-5.3-flash/gfx-950.yaml", "env:\n  VLLM_ROCM_USE_AITER_MOE: '0'\n")
    assert main(["check"]) == 1
    err = capsys.readouterr().err
    assert (
        "FAIL layer models/glm-5.3-flash/gfx-950.yaml: no platform of glm-5.3-flash has the family, arch or "
        "name 'gfx-950'; rename it or remove it"
    ) in err


@pytest.mark.parametrize(
    ("rel", "text", "message"),
    [
        (
            "models/tiny/model.yaml",
            "vllm: [1, 2\n",
            "models/tiny/model.yaml: line 2 column 1: not valid YAML",
        ),
        (
            "models/tiny/model.yaml",
            "- a list\n",
            "expected a mapping with vllm/env/verify sections, got list",
        ),
        (
            "models/tiny/model.yaml",
            "model: tiny\nplatforms: [cpu]\nvlm: {}\n",
            "vlm: unknown key; remove it or fix its spelling",
        ),
        (
            "platforms/cpu.yaml",
            "platform: cpu\nvendor: intel\nfamily: cpu\narch: x\ngpus: 0\n",
            "platforms/cpu.yaml: vendor: Input should be 'amd', 'nvidia' or 'cpu' (got 'intel')",
        ),
        (
            "platforms/cpu.yaml",
            "platform: cpu\nvendor: cpu\nfamily: cpu\narch: x\ngpus: -1\n",
            "gpus: Input should be greater than or equal to 0 (got -1)",
        ),
        (
            "models/tiny/model.yaml",
            "model: tiny\nplatforms: [cpu]\nvllm: {Max_Len: 3}\n",
            "vllm key 'Max_Len' is not a vLLM option name",
        ),
        (
            "models/tiny/model.yaml",
            "model: tiny\nplatforms: [cpu]\nenv: {lower: x}\n",
            "env name 'lower' is not",
        ),
        (
            "models/tiny/cpu.yaml",
            "platforms: [cpu]\n",
            "models/tiny/cpu.yaml: platforms: only model.yaml may set it",
        ),
    ],
)
def test_malformed_input_names_file_and_key(config_tree: ConfigTree, rel: str, text: str, message: str) -> None:
    config_tree.write(rel, text)
    with pytest.raises(ProfileError) as exc:
        Catalog().load("tiny/cpu")
    assert message in str(exc.value)


def test_verify_section_errors_name_the_merged_profile(config_tree: ConfigTree) -> None:
    config_tree.edit("models/tiny/model.yaml", lambda d: d["verify"].__setitem__("graph_mode", "perhaps"))
    with pytest.raises(
        ProfileError, match=r"tiny/cpu \(merged from .*\): verify.graph_mode: Input should be a valid boolean"
    ):
        Catalog().load("tiny/cpu")


def test_unknown_profile_names_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "glm-5.3-flash/mi300x"]) == 2
    err = capsys.readouterr().err
    assert "model glm-5.3-flash is not served on 'mi300x'; its platforms are mi355x, mi350x, b200, gb300, h200" in err
    assert main(["render", "glm"]) == 2
    assert "write it as MODEL/PLATFORM" in capsys.readouterr().err


# -- fuzzing --------------------------------------------------------------------------------------

yaml_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 2**40), st.floats(allow_nan=False), st.text(max_size=12)
)
yaml_values = st.recursive(
    yaml_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12,
)
section_keys = st.sampled_from(
    [
        "model",
        "platforms",
        "vllm",
        "env",
        "verify",
        "waivers",
        "production",
        "description",
        "platform",
        "vendor",
        "family",
        "arch",
        "gpus",
        "runtime",
        "detect",
    ]
)
documents = st.one_of(
    yaml_values,
    st.dictionaries(section_keys, yaml_values, max_size=6),
    st.text(max_size=200).map(lambda t: {"__raw__": t}),
)
targets = st.sampled_from(
    [
        "models/tiny/model.yaml",
        "models/tiny/cpu.yaml",
        "platforms/cpu.yaml",
        "models/glm-5.3-flash/rocm.yaml",
        "models/glm-5.3-flash/gfx950.yaml",
        "platforms/mi355x.yaml",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=targets, doc=documents)
def test_fuzzed_layers_give_clean_errors(tmp_path: Path, target: str, doc: Any) -> None:
    root = tmp_path / "fuzz"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(REPO / "serve_configs", root)
    text = doc["__raw__"] if isinstance(doc, dict) and "__raw__" in doc else yaml.safe_dump(doc)
    (root / target).write_text(text)
    cat = Catalog(root)
    profile = "tiny/cpu" if "tiny" in target or "cpu" in target else "glm-5.3-flash/mi355x"
    try:
        evaluate(cat.load(profile))
    except ProfileError as exc:
        assert str(exc).strip(), "empty error message"


# -- verify.not_applicable ------------------------------------------------------------------------


def _not_applicable(config_tree: ConfigTree, rel: str, entries: dict[str, str]) -> None:
    config_tree.edit(rel, lambda d: d.setdefault("verify", {}).setdefault("not_applicable", {}).update(entries))


def test_not_applicable_names_an_unknown_check_and_lists_the_known(config_tree: ConfigTree) -> None:
    _not_applicable(config_tree, "models/tiny/model.yaml", {"test_gpu": "the cpu platform has no GPUs"})
    with pytest.raises(ProfileError) as exc:
        Catalog().load("tiny/cpu")
    msg = str(exc.value)
    assert "verify.not_applicable: Value error, unknown check id 'test_gpu'; the checks are: test_health," in msg
    assert "test_load[C<n>]" in msg and "test_log[attention_backend]" in msg and "test_gpu_health" in msg


def test_not_applicable_needs_a_reason(config_tree: ConfigTree) -> None:
    _not_applicable(config_tree, "models/tiny/model.yaml", {"test_probes": "n/a"})
    with pytest.raises(ProfileError, match=r"verify.not_applicable.test_probes: String should have at least 10"):
        Catalog().load("tiny/cpu")


@pytest.mark.parametrize("check", ["test_log[faults]", "test_log[attention_backend]", "test_gpu_health"])
def test_production_may_not_excuse_log_or_gpu_checks(config_tree: ConfigTree, check: str) -> None:
    _not_applicable(config_tree, "models/glm-5.3-flash/cuda.yaml", {check: "we would rather not look at it"})
    with pytest.raises(ProfileError) as exc:
        Catalog().load("glm-5.3-flash/h200")
    msg = str(exc.value)
    assert f"rule production-checks-run: verify.not_applicable.{check}: declares not applicable a check" in msg, msg
    assert "set production: false" in msg
    # Another check may be excused by a production profile (Kimi-K3 serves without prefix caching).
    assert set(Catalog().load("kimi-k3/b200").verify.not_applicable) == {
        "test_prefix_cache_hit",
        "test_prefix_cache_integrity",
    }


# Issue 21: production is a fact of the model, set in its model.yaml only.
@pytest.mark.parametrize(
    ("rel", "profile"),
    [
        ("models/glm-5.3-flash/cuda.yaml", "glm-5.3-flash/h200"),  # family
        ("models/glm-5.3-flash/sm_90.yaml", "glm-5.3-flash/h200"),  # arch
        ("models/glm-5.3-flash/h200.yaml", "glm-5.3-flash/h200"),  # platform
        ("platforms/h200.yaml", "glm-5.3-flash/h200"),  # the platform file
    ],
)
def test_production_is_set_in_the_model_layer_only(
    config_tree: ConfigTree, capsys: pytest.CaptureFixture[str], rel: str, profile: str
) -> None:
    """One line `production: false` outside model.yaml would let one platform's profile excuse the log
    checks and GPU health: the loader and `vfleet check` refuse it, naming the file and the fix."""
    config_tree.edit(rel, lambda d: d.__setitem__("production", False))
    with pytest.raises(ProfileError) as exc:
        Catalog().load(profile)
    msg = str(exc.value)
    assert msg.startswith(f"{config_tree.root / rel}: production: only models/<model>/model.yaml may set it"), msg
    assert "remove the line here, and set production: false in the model's model.yaml" in msg
    assert main(["check", profile]) == 1
    assert f"FAIL {profile}\n  {config_tree.root / rel}: production: only models/<model>/model.yaml" in (
        capsys.readouterr().err
    )


def test_production_in_model_yaml_is_the_model_fact(config_tree: ConfigTree) -> None:
    """The healthy case: model.yaml says it, for every platform of the model; a layer above that says
    nothing leaves it so (tiny's cpu layer, glm's cuda layer)."""
    config_tree.write("models/tiny/cpu.yaml", "env:\n  VFLEET_TINY_NOTE: '1'\n")
    assert Catalog().load("tiny/cpu").production is False
    config_tree.edit("models/glm-5.3-flash/model.yaml", lambda d: d.__setitem__("production", True))
    assert all(Catalog().load(f"glm-5.3-flash/{p}").production for p in ("h200", "mi355x"))


def test_tiny_declares_each_check_it_skips(config_tree: ConfigTree) -> None:
    tiny = Catalog().load("tiny/cpu")
    assert tiny.production is False
    assert set(tiny.verify.not_applicable) == {
        "test_probes", "test_answers", "test_gpu_health", "test_log[graph_mode]", "test_log[attention_backend]",
    }  # fmt: skip
    config_tree.edit("models/tiny/model.yaml", lambda d: d["verify"].__setitem__("gpu_health", False))
    with pytest.raises(ProfileError, match=r"verify\.gpu_health: unknown key"):
        Catalog().load("tiny/cpu")


# -- verify values that the vllm section states ---------------------------------------------------


def test_verify_follows_the_vllm_section() -> None:
    cat = Catalog()
    for profile in cat.load_all():
        v, args = profile.verify, profile.vllm
        assert v.max_model_len == args["max-model-len"], profile.name
        assert v.prefix_cache is args.get("enable-prefix-caching", True), profile.name
        assert v.attention_backend == args.get("attention-backend"), profile.name
        assert v.graph_mode is not (args.get("enforce-eager") is True), profile.name
    assert cat.load("glm-5.3-flash/mi355x").verify.attention_backend == "ROCM_AITER_MLA_SPARSE"
    assert cat.load("kimi-k3/b200").verify.prefix_cache is False
    assert cat.load("tiny/cpu").verify.graph_mode is False


@pytest.mark.parametrize(
    ("rel", "key", "value", "profile"),
    [
        ("models/glm-5.3-flash/model.yaml", "max_model_len", 1048576, "glm-5.3-flash/h200"),
        ("models/glm-5.3-flash/rocm.yaml", "attention_backend", "ROCM_AITER_MLA_SPARSE", "glm-5.3-flash/mi350x"),
        ("models/kimi-k3/model.yaml", "prefix_cache", False, "kimi-k3/b200"),
        ("models/tiny/model.yaml", "graph_mode", False, "tiny/cpu"),
    ],
)
def test_verify_may_not_restate_vllm(config_tree: ConfigTree, rel: str, key: str, value: Any, profile: str) -> None:
    config_tree.edit(rel, lambda d: d.setdefault("verify", {}).__setitem__(key, value))
    with pytest.raises(ProfileError) as exc:
        Catalog().load(profile)
    assert f"{profile}: verify.{key}: {value!r} restates vllm" in str(exc.value)
    assert f"({rel}); remove it" in str(exc.value)


@pytest.mark.parametrize(
    ("rel", "key", "value", "profile", "means"),
    [
        ("models/glm-5.3-flash/h200.yaml", "max_model_len", 524288, "glm-5.3-flash/h200", "1048576"),
        ("models/glm-5.3-flash/rocm.yaml", "attention_backend", "TRITON_MLA", "glm-5.3-flash/mi355x", "'ROCM_AITER"),
        ("models/glm-5.3-flash/model.yaml", "prefix_cache", False, "glm-5.3-flash/b200", "True"),
        ("models/tiny/model.yaml", "graph_mode", True, "tiny/cpu", "False"),
    ],
)
def test_verify_may_not_contradict_vllm(
    config_tree: ConfigTree, rel: str, key: str, value: Any, profile: str, means: str
) -> None:
    config_tree.edit(rel, lambda d: d.setdefault("verify", {}).__setitem__(key, value))
    with pytest.raises(ProfileError) as exc:
        Catalog().load(profile)
    msg = str(exc.value)
    assert f"{profile}: verify.{key}: {value!r} contradicts vllm" in msg and f"which means {means}" in msg, msg
    assert rel in msg


def test_graph_mode_false_is_allowed_for_a_graphless_backend(config_tree: ConfigTree) -> None:
    config_tree.edit("models/glm-5.3-flash/h200.yaml", lambda d: d.setdefault("verify", {}).update(graph_mode=False))
    assert Catalog().load("glm-5.3-flash/h200").verify.graph_mode is False


@pytest.mark.parametrize(("written", "length"), [(4096, 4096), ("32k", 32000), ("1M", 1048576), ("2K", 2048)])
def test_max_model_len_sizes(config_tree: ConfigTree, written: Any, length: int) -> None:
    config_tree.edit("models/tiny/model.yaml", lambda d: d["vllm"].__setitem__("max-model-len", written))
    assert Catalog().load("tiny/cpu").verify.max_model_len == length


def test_verify_states_what_vllm_leaves_to_vllm(config_tree: ConfigTree) -> None:
    """Without max-model-len vLLM uses the model's own length: the profile then says what to expect."""
    config_tree.edit("models/tiny/model.yaml", lambda d: d["vllm"].pop("max-model-len"))
    with pytest.raises(ProfileError, match=r"tiny/cpu \(merged from .*\): verify.max_model_len: Field required"):
        Catalog().load("tiny/cpu")
    config_tree.edit("models/tiny/model.yaml", lambda d: d["verify"].update(max_model_len=2048))
    assert Catalog().load("tiny/cpu").verify.max_model_len == 2048


# Issue 21 item 8: a production profile carries a performance floor at every load level.
def test_production_profile_needs_a_floor_at_every_load_level(config_tree: ConfigTree) -> None:
    shipped = [p for p in Catalog().load_all() if p.production]
    assert shipped and all(set(p.verify.load.levels) <= set(p.verify.load.min_output_tok_per_s) for p in shipped)
    config_tree.edit("models/glm-5.3-flash/model.yaml", lambda d: d["verify"]["load"].pop("min_output_tok_per_s"))
    with pytest.raises(ProfileError) as exc:
        Catalog().load("glm-5.3-flash/h200")
    msg = str(exc.value)
    assert "verify.load.min_output_tok_per_s: no floor for level(s) C1, C32" in msg and "production" in msg, msg
    assert main(["check"]) != 0  # `vfleet check` fails on it
    # A level added without its floor is caught too; a floor of 0 is no floor.
    config_tree.edit(
        "models/glm-5.3-flash/model.yaml",
        lambda d: d["verify"]["load"].update({"levels": [1, 8, 32], "min_output_tok_per_s": {1: 5.0, 8: 0, 32: 160.0}}),
    )
    with pytest.raises(ProfileError, match=r"no floor for level\(s\) C8 of"):
        Catalog().load("glm-5.3-flash/mi355x")
    config_tree.edit(
        "models/glm-5.3-flash/model.yaml",
        lambda d: d["verify"]["load"].update({"min_output_tok_per_s": {1: 5.0, 8: 40.0, 32: 160.0}}),
    )
    assert Catalog().load("glm-5.3-flash/mi355x").verify.load.min_output_tok_per_s[8] == 40.0
    # Not production: no floor needed (tiny/cpu sets none).
    assert Catalog().load("tiny/cpu").verify.load.min_output_tok_per_s == {}


def test_a_family_runtime_file_of_another_shape_is_named(config_tree: ConfigTree) -> None:
    config_tree.write("platforms/families/rocm.yaml", "runtime: [a, b]\n")
    with pytest.raises(ProfileError, match=r"platforms/families/rocm.yaml: expected one mapping, runtime:"):
        Catalog().platform("mi355x")
    config_tree.write("platforms/families/rocm.yaml", "runtime: {}\nvllm: {}\n")
    with pytest.raises(ProfileError, match=r"platforms/families/rocm.yaml: expected one mapping"):
        Catalog().platform("mi355x")


def _batch_invariant_in_production(cat: Catalog) -> list[str]:
    return [p.name for p in cat.load_all() if p.production and "VLLM_BATCH_INVARIANT" in p.env]


def test_no_production_profile_serves_batch_invariant() -> None:
    """The decision of docs/boot-verify.md ("Batch invariance: cost and decision"): production profiles do
    not set VLLM_BATCH_INVARIANT (on one H200 it cost 31-45% of the output throughput, with intervals, and
    JIT-compiled a kernel after warm-up); gating verification runs on a drained node instead. A profile
    that sets it must first be measured and the decision written down: this test names it."""
    cat = Catalog(REPO / "serve_configs")
    assert any(p.production for p in cat.load_all())
    offenders = _batch_invariant_in_production(cat)
    assert offenders == [], f"{offenders} set VLLM_BATCH_INVARIANT: see docs/boot-verify.md before changing this"


def test_the_batch_invariance_decision_names_a_profile_that_sets_it(config_tree: ConfigTree) -> None:
    config_tree.edit(
        "models/glm-5.3-flash/h200.yaml", lambda d: d.setdefault("env", {}).update({"VLLM_BATCH_INVARIANT": 1})
    )
    assert _batch_invariant_in_production(Catalog(config_tree.root)) == ["glm-5.3-flash/h200"]


# -- the vLLM base's layer (serve_configs/bases/<base>.yaml; issue 24, item 3) ----------------------------


def test_the_base_layer_applies_for_its_base_only(config_tree: ConfigTree) -> None:
    on_default, on_034 = Catalog(base="0.30.0").load("kimi-k3/b200"), Catalog(base="0.34.0").load("kimi-k3/b200")
    assert on_default.vllm["gpu-memory-utilization"] == 0.93
    assert "gpu-memory-utilization" not in on_034.vllm
    assert "bases/0.34.0.yaml" in on_034.sources and "bases/0.34.0.yaml" not in on_default.sources


def test_check_runs_every_base_and_names_the_one_that_fails(
    config_tree: ConfigTree, capsys: pytest.CaptureFixture[str]
) -> None:
    config_tree.write("bases/0.34.0.yaml", "vllm:\n  enforce-eager: true\n")
    assert main(["check", "glm-5.3-flash/b200"]) == 1
    err = capsys.readouterr().err
    assert "on vLLM 0.34.0: glm-5.3-flash/b200: rule no-enforce-eager" in err and "on vLLM 0.30.0" not in err, err
    assert main(["check", "--base", "0.30.0", "glm-5.3-flash/b200"]) == 0


@pytest.mark.parametrize(
    ("rel", "text", "message"),
    [
        (
            "bases/0.34.0.yaml",
            "verify:\n  min_kv_tokens: 1\n",
            "bases/0.34.0.yaml: verify: a base's layer holds vllm and env only",
        ),
        (
            "bases/0.99.0.yaml",
            "vllm: {}\n",
            "FAIL layer bases/0.99.0.yaml: '0.99.0' is not a vLLM base of versions.json",
        ),
    ],
)
def test_a_bad_base_layer_is_named(
    config_tree: ConfigTree, capsys: pytest.CaptureFixture[str], rel: str, text: str, message: str
) -> None:
    config_tree.write(rel, text)
    assert main(["check"]) == 1
    assert message in capsys.readouterr().err


def test_an_unknown_base_is_refused_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ProfileError, match=r"vLLM base 0\.99\.0 is not in versions\.json"):
        Catalog(base="0.99.0")
    assert main(["check", "--base", "0.99.0"]) == 2
    assert "vLLM base 0.99.0 is not in" in capsys.readouterr().err
