"""The verify expectations that the ``vllm:`` section already states, derived instead of written twice.

Boot-verify compares a live server with ``verify:``. Four of its values follow from the serve arguments:

    verify.max_model_len      vllm max-model-len         /v1/models must report exactly this length
    verify.attention_backend  vllm attention-backend     the log's 'Using X backend' line names the option value
    verify.prefix_cache       vllm enable-prefix-caching  the prefix-cache hit and integrity checks run
    verify.graph_mode         vllm enforce-eager, compilation-config.cudagraph_mode NONE (graphs off when set)

Where ``vllm:`` states the value, ``verify:`` leaves it out. A ``verify:`` entry that repeats it is an error
(the fact would live twice), and so is one that contradicts it (boot-verify would fail a correct server or
pass a wrong one), with one documented exception: ``graph_mode: false`` where vLLM's defaults would
capture graphs, for a vLLM backend that never captures any. Where ``vllm:`` is silent (no max-model-len,
no attention-backend: vLLM picks), ``verify:`` states the expectation itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vfleet.errors import ProfileError


def is_true(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"))


def vllm_option(vllm: dict[str, Any], key: str) -> Any:
    """The value of a dash-case option, written with dashes or with underscores (vLLM reads both)."""
    if key in vllm:
        return vllm[key]
    return vllm.get(key.replace("-", "_"))


def cudagraph_mode(vllm: dict[str, Any]) -> str | None:
    cc = vllm_option(vllm, "compilation-config")
    if isinstance(cc, dict) and "cudagraph_mode" in cc:
        return str(cc["cudagraph_mode"]).upper()
    dotted = vllm.get("compilation-config.cudagraph_mode")
    return str(dotted).upper() if dotted is not None else None


def runs_eager(vllm: dict[str, Any]) -> bool:
    """True when the serve arguments turn CUDA/HIP graphs off."""
    return is_true(vllm_option(vllm, "enforce-eager")) or cudagraph_mode(vllm) == "NONE"


_LENGTH_RE = re.compile(r"(\d+(?:\.\d+)?)([kmg]?)|(\d+)([KMG])")
_DECIMAL = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30}


def _max_model_len(vllm: dict[str, Any]) -> int | None:
    """vLLM's max-model-len: an integer, or a size such as 32k (x1000) or 1M (x1024); -1 or auto: vLLM fits it."""
    value = vllm_option(vllm, "max-model-len")
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value > 0 else None
    if isinstance(value, str):
        m = _LENGTH_RE.fullmatch(value.strip())
        if m and m.group(3):
            return int(m.group(3)) * _BINARY[m.group(4)]
        if m:
            return int(float(m.group(1)) * _DECIMAL[m.group(2)])
    return None


def _attention_backend(vllm: dict[str, Any]) -> str | None:
    value = vllm_option(vllm, "attention-backend")
    return value if isinstance(value, str) and value else None


def _prefix_cache(vllm: dict[str, Any]) -> bool | None:
    value = vllm_option(vllm, "enable-prefix-caching")
    return value if isinstance(value, bool) else None


def _graph_mode(vllm: dict[str, Any]) -> bool:
    return not runs_eager(vllm)


def _never(explicit: Any, stated: Any) -> bool:
    return False


def _eager_backend(explicit: Any, stated: Any) -> bool:
    return explicit is False and stated is True


@dataclass(frozen=True)
class Derived:
    key: str  #: the verify key
    option: str  #: the vllm option it follows, as messages name it
    read: Callable[[dict[str, Any]], Any]  #: the value the vllm section states, or None
    may_differ: Callable[[Any, Any], bool] = _never  #: (explicit, stated): a documented exception


DERIVED: tuple[Derived, ...] = (
    Derived("max_model_len", "max-model-len", _max_model_len),
    Derived("attention_backend", "attention-backend", _attention_backend),
    Derived("prefix_cache", "enable-prefix-caching", _prefix_cache),
    # vllm-cpu and other graphless backends run eager without enforce-eager: they may expect no graphs.
    Derived("graph_mode", "enforce-eager / compilation-config.cudagraph_mode", _graph_mode, _eager_backend),
)


def derive_verify(
    name: str, vllm: dict[str, Any], verify: dict[str, Any], where: Callable[[str], str]
) -> dict[str, Any]:
    """``verify`` with every value that ``vllm`` states filled in; ``where(key)`` names the file that set it."""
    out = dict(verify)
    problems: list[str] = []
    for d in DERIVED:
        stated = d.read(vllm)
        if stated is None:
            continue
        if d.key not in verify:
            out[d.key] = stated
            continue
        explicit = verify[d.key]
        if type(explicit) is not type(stated):
            continue  # the schema names the malformed value
        if explicit == stated:
            problems.append(
                f"{name}: verify.{d.key}: {explicit!r} restates vllm {d.option} ({where(d.key)}); remove it, "
                "boot-verify derives it from the vllm section"
            )
        elif not d.may_differ(explicit, stated):
            problems.append(
                f"{name}: verify.{d.key}: {explicit!r} contradicts vllm {d.option}, which means {stated!r} "
                f"({where(d.key)}); boot-verify would expect what the server is not told to do: change the vllm "
                f"option, or remove verify.{d.key}"
            )
    if problems:
        raise ProfileError("\n".join(problems))
    return out
