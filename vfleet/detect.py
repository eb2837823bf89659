"""What this host's GPUs are, read from what amd-smi, rocm-smi and nvidia-smi print, and the profile that
fits them. Plain data and the code that reads it: the tools themselves are run by vfleet.gpus.detect_host."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vfleet import settings
from vfleet.errors import SelectError
from vfleet.profiles import Catalog, Platform, Profile


@dataclass(frozen=True)
class HostInfo:
    vendor: str  # amd, nvidia or cpu
    arch: str  # gfx950, sm_100, sm_90, or the CPU machine name
    names: list[str] = field(default_factory=list)
    source: str = "none"

    @property
    def count(self) -> int:
        return len(self.names)

    def describe(self) -> str:
        if not self.names:
            return f"no GPU found (vendor {self.vendor}, arch {self.arch}, via {self.source})"
        kinds = sorted(set(self.names))
        return f"{self.count} x {', '.join(kinds)} (vendor {self.vendor}, arch {self.arch}, via {self.source})"


def parse_nvidia_smi(text: str) -> HostInfo | None:
    """Parse `nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader`."""
    names: list[str] = []
    caps: set[str] = set()
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.rsplit(",", 1)]
        if len(parts) != 2 or not re.fullmatch(r"\d+\.\d+", parts[1]):
            continue
        names.append(parts[0])
        major, minor = parts[1].split(".")
        caps.add(f"sm_{major}{minor}")
    if not names:
        return None
    return HostInfo("nvidia", ",".join(sorted(caps)), names, "nvidia-smi")


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _amd_host(cards: list[tuple[object, object]], source: str) -> HostInfo | None:
    """The AMD host of CARDS (product name, gfx target) as a tool reported them; None without a name."""
    names = [n for n in (str(name).strip() for name, _ in cards) if n]
    archs = {a for a in (str(arch).strip() for _, arch in cards) if a}
    if not names:
        return None
    return HostInfo("amd", ",".join(sorted(archs)) or "unknown", names, source)


def parse_amd_smi(text: str) -> HostInfo | None:
    """Parse `amd-smi static --asic --json` (a list of GPUs, or {"gpu_data": [...]} in newer releases)."""
    data = _json(text)
    if isinstance(data, dict):
        data = data.get("gpu_data", [])
    if not isinstance(data, list):
        return None
    asics = [gpu.get("asic", {}) for gpu in data if isinstance(gpu, dict)]
    cards = [(a.get("market_name", ""), a.get("target_graphics_version", "")) for a in asics if isinstance(a, dict)]
    return _amd_host(cards, "amd-smi")


def parse_rocm_smi(text: str) -> HostInfo | None:
    """Parse `rocm-smi --showproductname --json` ({"card0": {"Card Series": ..., "GFX Version": ...}})."""
    data = _json(text)
    if not isinstance(data, dict):
        return None
    cards = [
        (
            card.get("Card Series") or card.get("Card series") or card.get("Card Model") or "",
            card.get("GFX Version", ""),
        )
        for key, card in sorted(data.items())
        if key.startswith("card") and isinstance(card, dict)
    ]
    return _amd_host(cards, "rocm-smi")


def platform_matches(platform: Platform, host: HostInfo) -> bool:
    if platform.vendor != host.vendor:
        return False
    if host.vendor == "cpu":
        return platform.gpus == 0
    if platform.arch != host.arch:
        return False
    wanted = [n.lower() for n in platform.detect.names]
    return all(any(w in name.lower() for w in wanted) for name in host.names)


def select(
    catalog: Catalog, model: str, host: HostInfo | Callable[[], HostInfo], env: dict[str, str] | None = None
) -> Profile:
    """The profile of ``model`` for HOST: the host, or how to find it (vfleet.gpus.detect_host), asked only when
    neither VFLEET_PROFILE nor VFLEET_PLATFORM in ``env`` names the platform."""
    env = dict(os.environ) if env is None else env
    given = settings.load(env)
    forced = given.profile
    if forced:
        profile = catalog.load(forced)
        if model and profile.model != model:
            raise SelectError(f"VFLEET_PROFILE={forced} is for model {profile.model}, not {model}; unset one of them")
        return profile
    if not model:
        raise SelectError("no model given: pass --model MODEL or set VFLEET_PROFILE=MODEL/PLATFORM")
    forced_platform = given.platform
    if forced_platform:
        return catalog.load(f"{model}/{forced_platform}")
    host = host() if callable(host) else host
    candidates = [p for p in catalog.profile_names() if p.startswith(f"{model}/")]
    if not candidates:
        raise SelectError(f"unknown model {model!r}; known: {', '.join(catalog.model_names())}")
    fitting = []
    for name in candidates:
        profile = catalog.load(name)
        if platform_matches(profile.platform, host):
            fitting.append(profile)
    if not fitting:
        plats = ", ".join(n.split("/")[1] for n in candidates)
        raise SelectError(
            f"no {model} profile fits this host: detected {host.describe()}; {model} has profiles for "
            f"{plats}. Set VFLEET_PLATFORM=<platform> or VFLEET_PROFILE=<model>/<platform> to choose one."
        )
    profile = fitting[0]
    need = profile.gpus_needed()
    if need > host.count:
        raise SelectError(
            f"profile {profile.name} needs {need} GPUs but this host has {host.count}: detected "
            f"{host.describe()}. Run it on a full node, or set VFLEET_PROFILE to a smaller profile."
        )
    return profile
