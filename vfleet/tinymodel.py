"""The tiny local model for the demo and the tests (docs/upstream.md, "vLLM on a CPU-only machine").

A byte-level BPE tokenizer trained with `tokenizers` on text generated locally from a seeded word list,
wrapped as a `PreTrainedTokenizerFast` with a chat template, and a `LlamaForCausalLM`
with random weights: hidden 64, 2 layers, 2 heads (vLLM's CPU attention needs head size >= 32).
Everything is seeded, so two builds give the same weights and tokenizer.

Two variants share the tokenizer and the weights: `random` (the default) sits on a knife edge, its
top two next tokens often a few hundredths of a nat apart; `confident` multiplies the final norm's
weight by CONFIDENT_SCALE, which scales every logit, so its greedy text is stable (top-2 gap on 30
random prompts: min 0.5, median 6 nats, against 0.03 and 0.4 for `random`). The integrity probe's
corruption test (tests/integration/judge/test_kv_corruption.py) runs on both.

The build writes into a temporary directory next to the target and renames it into place, so an
interrupted build leaves nothing half-built; a finished build is recognised by its stamp file.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from vfleet import PACKAGE_DIR
from vfleet.errors import VfleetError

SEED = 1234
VOCAB_SIZE = 2048
HIDDEN = 64
LAYERS = 2
HEADS = 2
MAX_POSITIONS = 4096
STAMP = "vfleet-tiny.json"
VARIANTS = ("random", "confident")
CONFIDENT_SCALE = 16.0
SPECIAL = ["<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}<|system|>{% elif m['role'] == 'user' %}<|user|>{% else %}<|assistant|>{% endif %}"
    "{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def default_dir(variant: str = "random") -> Path:
    return PACKAGE_DIR.parent / ".cache" / "models" / ("tiny" if variant == "random" else f"tiny-{variant}")


WORDS = tuple(
    "".join(
        "the a of to and in is it that for on with as was be at by this from or have an they which one "
        "you were all we when there can more if no out so said what up its about into than them only "
        "other new some could time these two may first then do any like my now over such our man me even "
        "most made after also did many before must through back years where much your way well down "
        "should because each just those people how too little state good very make world still own see "
        "men work long get here between both life being under never day same another know while last "
        "might us great old year off come since against go came right used take three city river country "
        "capital number answer question paris france london rome berlin madrid seventeen twenty three "
        "times plus minus equals only registry entry key value name owner region model image digest "
        "profile server cache block token "
    ).split()
)


def _corpus() -> Iterator[str]:
    """Generated local text (seeded, independent of the checkout), so the tokenizer is reproducible."""
    import random  # noqa: PLC0415

    rng = random.Random(SEED)
    for _ in range(400):
        words = [rng.choice(WORDS) for _ in range(200)]
        yield " ".join(words) + ". " + " ".join(str(rng.randrange(100000)) for _ in range(20)) + "\n"
    yield " ".join(f"entry {i}: key{i} = value{i * 7919 % 10007};" for i in range(2000))
    yield "What is 17 times 23? Only the number. 391. The capital of France is Paris."


def is_built(out: Path, variant: str = "random") -> bool:
    stamp = out / STAMP
    if not stamp.is_file():
        return False
    try:
        data = json.loads(stamp.read_text())
    except ValueError:
        return False
    return bool(
        data.get("seed") == SEED and data.get("variant", "random") == variant and (out / "config.json").is_file()
    )


def build(out: Path | None = None, force: bool = False, variant: str = "random") -> Path:
    """Build the tiny model into ``out`` (default .cache/models/tiny, or tiny-VARIANT); idempotent.
    Returns the path."""
    if variant not in VARIANTS:
        raise VfleetError(f"tiny model variant {variant!r}: choose one of {', '.join(VARIANTS)}")
    out = (out or default_dir(variant)).resolve()
    if is_built(out, variant) and not force:
        return out
    if out.exists() and not out.is_dir():
        raise VfleetError(f"{out} exists and is not a directory; remove it or pass another --out")
    if out.is_dir() and any(out.iterdir()) and not (out / STAMP).exists():
        raise VfleetError(f"{out} is a non-empty directory without a vfleet model stamp; pick an empty --out")

    import torch  # noqa: PLC0415
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: PLC0415
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: PLC0415

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-build-", dir=out.parent))
    try:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        trainer = trainers.BpeTrainer(
            vocab_size=VOCAB_SIZE,
            special_tokens=SPECIAL,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(_corpus(), trainer=trainer)
        fast = PreTrainedTokenizerFast(
            tokenizer_object=tok,
            bos_token="<s>",
            eos_token="</s>",
            pad_token="<pad>",
            model_max_length=MAX_POSITIONS,
        )
        fast.chat_template = CHAT_TEMPLATE
        fast.save_pretrained(tmp)

        torch.manual_seed(SEED)
        config = LlamaConfig(
            vocab_size=tok.get_vocab_size(),
            hidden_size=HIDDEN,
            intermediate_size=4 * HIDDEN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            num_key_value_heads=HEADS,
            max_position_embeddings=MAX_POSITIONS,
            bos_token_id=fast.bos_token_id,
            eos_token_id=fast.eos_token_id,
            pad_token_id=fast.pad_token_id,
            tie_word_embeddings=False,
            torch_dtype="bfloat16",
        )
        model = LlamaForCausalLM(config)
        # Larger-than-default init so greedy answers depend strongly on the context.
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() > 1:
                    p.normal_(0.0, 0.2)
            if variant == "confident":
                model.model.norm.weight.mul_(CONFIDENT_SCALE)
        model = model.to(torch.bfloat16)
        model.save_pretrained(tmp, safe_serialization=True)
        (tmp / STAMP).write_text(
            json.dumps(
                {"seed": SEED, "hidden": HIDDEN, "layers": LAYERS, "heads": HEADS}
                | ({"variant": variant} if variant != "random" else {})
            )
        )
        if out.exists():
            shutil.rmtree(out)
        tmp.chmod(0o755)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
