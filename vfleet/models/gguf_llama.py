"""A llama GGUF (llama.cpp's format) turned into a Hugging Face Llama checkpoint: config.json,
model.safetensors (bf16), generation_config.json and the tokenizer files with the GGUF's chat template.

Weights are dequantized with the `gguf` package's own reader (Q4_1, Q8_0 and F32 here) and renamed to
Hugging Face's names. llama.cpp's converter permutes the rows of attn_q and attn_k of every head from
Hugging Face's rotate-half layout to its interleaved rotary layout; `unpermute_rows` undoes it. Tied
embeddings (no `output.weight`) stay tied. The tokenizer (GPT-2 byte-level BPE, its vocabulary, merges
and template) is rebuilt by transformers' GGUF tokenizer reader.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vfleet.errors import VfleetError

if TYPE_CHECKING:
    import numpy.typing as npt

#: The GGUF tensor names of one block, and their Hugging Face names (gguf's tensor_mapping, for llama).
BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.weight")


class GgufError(VfleetError):
    """The GGUF is not a llama checkpoint this converter knows."""


@dataclass(frozen=True)
class LlamaShape:
    """What the GGUF's metadata says about the model."""

    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    context: int
    rope_theta: float
    rms_eps: float
    vocab: int
    bos: int
    eos: int
    pad: int


def unpermute_rows(w: npt.NDArray[Any], n_head: int) -> npt.NDArray[Any]:
    """Undo llama.cpp's rotary permutation of a q or k projection (rows = n_head heads x head_dim).

    llama.cpp (convert_hf_to_gguf.py, LlamaModel.permute) turns each head's rows [x_0..x_{d/2-1}, y_0..]
    (rotate-half) into [x_0, y_0, x_1, y_1, ...] (interleaved); this puts them back."""
    rows = w.shape[0]
    if rows % (2 * n_head):
        raise GgufError(f"cannot un-permute {rows} rows into {n_head} heads of an even size")
    head_dim = rows // n_head
    return w.reshape(n_head, head_dim // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_name(name: str, layers: int) -> str:
    """The Hugging Face name of GGUF tensor NAME; one this converter does not know is a GgufError."""
    m = _BLOCK.fullmatch(name)
    if m and int(m.group(1)) < layers and m.group(2) in BLOCK_NAMES:
        return f"model.layers.{int(m.group(1))}.{BLOCK_NAMES[m.group(2)]}.weight"
    base = name.removesuffix(".weight")
    if name.endswith(".weight") and base in TOP_NAMES:
        return f"{TOP_NAMES[base]}.weight"
    raise GgufError(f"GGUF tensor {name!r} has no Hugging Face Llama name here (a llama GGUF of another layout?)")


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        raise GgufError(f"the GGUF has no metadata key {key!r}; is it a llama.cpp llama GGUF?")
    return field.contents()


def _f32(x: Any) -> float:
    """A float32 metadata value as the shortest decimal that rounds to it (1e-05, not 9.99999974e-06)."""
    import numpy as np  # not in every image; the CLI loads this module (docs/architecture.md)  # noqa: PLC0415

    return float(str(np.float32(x)))


def read_shape(reader: Any) -> LlamaShape:
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise GgufError(f"general.architecture is {arch!r}; this converter reads llama GGUFs only")
    heads = int(_field(reader, "llama.attention.head_count"))
    hidden = int(_field(reader, "llama.embedding_length"))
    rot = reader.fields.get("llama.rope.dimension_count")
    return LlamaShape(
        layers=int(_field(reader, "llama.block_count")),
        hidden=hidden,
        ffn=int(_field(reader, "llama.feed_forward_length")),
        heads=heads,
        kv_heads=int(_field(reader, "llama.attention.head_count_kv")),
        head_dim=int(rot.contents()) if rot is not None else hidden // heads,
        context=int(_field(reader, "llama.context_length")),
        rope_theta=_f32(_field(reader, "llama.rope.freq_base")),
        rms_eps=_f32(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        vocab=len(reader.fields["tokenizer.ggml.tokens"].data),
        bos=int(_field(reader, "tokenizer.ggml.bos_token_id")),
        eos=int(_field(reader, "tokenizer.ggml.eos_token_id")),
        pad=int(_field(reader, "tokenizer.ggml.padding_token_id")),
    )


def config(shape: LlamaShape, tied: bool) -> dict[str, Any]:
    """config.json of the checkpoint (transformers' LlamaConfig, saved with sorted keys)."""
    from transformers import LlamaConfig  # heavy: imported only when a model is built  # noqa: PLC0415

    cfg = LlamaConfig(
        architectures=["LlamaForCausalLM"],
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.ffn,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=shape.context,
        rms_norm_eps=shape.rms_eps,
        rope_parameters={"rope_type": "default", "rope_theta": shape.rope_theta},
        tie_word_embeddings=tied,
        bos_token_id=shape.bos,
        eos_token_id=shape.eos,
        pad_token_id=shape.pad,
        dtype="bfloat16",
    )
    out: dict[str, Any] = cfg.to_dict()
    return out


def generation_config(shape: LlamaShape) -> dict[str, Any]:
    """Token ids only: greedy or sampled is the request's choice."""
    return {"bos_token_id": shape.bos, "eos_token_id": shape.eos, "pad_token_id": shape.pad}


def tensors(reader: Any, shape: LlamaShape, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Every weight, dequantized, un-permuted where llama.cpp permuted it, as bf16 torch tensors by HF name."""
    import numpy as np  # these three: not in every image, and heavy; imported only when a model is built  # noqa: PLC0415
    import torch  # noqa: PLC0415
    from gguf.quants import dequantize  # noqa: PLC0415

    out: dict[str, Any] = {}
    total = len(reader.tensors)
    for i, t in enumerate(reader.tensors, 1):
        name = hf_name(t.name, shape.layers)
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        want = tuple(int(d) for d in reversed(t.shape))  # GGUF lists dimensions innermost first
        if w.shape != want:
            w = w.reshape(want)
        if ".attn_q." in t.name:
            w = unpermute_rows(w, shape.heads)
        elif ".attn_k." in t.name:
            w = unpermute_rows(w, shape.kv_heads)
        out[name] = torch.tensor(w, dtype=torch.float32).to(torch.bfloat16)  # a copy: the reader's arrays are read-only
        if i % 50 == 0 or i == total:
            say(f"dequantized {i}/{total} tensors")
    _check_complete(out, shape)
    return out


def _check_complete(found: dict[str, Any], shape: LlamaShape) -> None:
    want = {f"{v}.weight" for k, v in TOP_NAMES.items() if k != "output"}
    want |= {f"model.layers.{n}.{v}.weight" for n in range(shape.layers) for v in BLOCK_NAMES.values()}
    missing = sorted(want - set(found))
    if missing:
        raise GgufError(f"the GGUF lacks {len(missing)} weight(s) of a {shape.layers}-layer llama: {missing[:3]}")


def write_tokenizer(gguf_path: Path, out: Path) -> None:
    """The tokenizer files (tokenizer.json, tokenizer_config.json, chat_template.jinja), from the GGUF."""
    from transformers import AutoTokenizer  # heavy: imported only when a model is built  # noqa: PLC0415

    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    if not tok.chat_template:
        raise GgufError(f"{gguf_path.name} carries no chat template (tokenizer.chat_template)")
    tok.save_pretrained(str(out))


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
