"""Serve profiles: one model on one platform, layered from files that each hold a fact once.

Layout of serve_configs/ (every file is YAML):

    platforms/<platform>.yaml          the hardware: vendor, family, arch, GPU count, container runtime needs,
                                       and the env every model served on it takes (the first env layer)
    models/<model>/model.yaml          model defaults: vLLM args, env, verify expectations, platforms
    models/<model>/<family>.yaml       optional: overrides for every platform of a family (rocm, cuda, cpu)
    models/<model>/<arch>.yaml         optional: overrides for every platform of one GPU arch (gfx950, sm_90)
    models/<model>/<platform>.yaml     optional: overrides for one platform
    bases/<vLLM base>.yaml             optional: what a vLLM base (versions.json `bases`) changes for every
                                       profile, e.g. a default whose meaning moved; vllm and env only

Later layers win (platform file's env, model, family, arch, platform, base). In ``vllm``, ``env`` and ``verify`` a
mapping merges key by key and ``null`` removes a key set by an earlier layer. The ``vllm`` section is vLLM's own
``--config`` YAML: dash keys, ``true`` for ``--key``, ``false`` for ``--no-key``. What ``vllm`` already says,
``verify`` does not repeat: vfleet.profile_verify derives it (max_model_len, attention_backend, prefix_cache,
graph_mode).

The pydantic models live in vfleet.profile_schema; their public names are re-exported here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from vfleet import pins, settings
from vfleet.errors import ProfileError, VfleetError
from vfleet.paths import serve_configs_dir, versions
from vfleet.profile_floors import enforce_floors
from vfleet.profile_schema import (
    DetectSpec,
    Family,
    IntegritySpec,
    Layer,
    LoadSpec,
    Platform,
    Probe,
    Profile,
    RuntimeSpec,
    Strict,
    Verify,
    Waiver,
)
from vfleet.profile_verify import derive_verify

__all__ = [
    "Catalog",
    "DetectSpec",
    "Family",
    "IntegritySpec",
    "Layer",
    "LoadSpec",
    "Platform",
    "Probe",
    "Profile",
    "RuntimeSpec",
    "Strict",
    "Verify",
    "Waiver",
]


#: Issue 21: whether a profile is production (and so may not excuse the log checks or GPU health) is a
#: fact of the model, said once in its model.yaml; a family, arch, platform or platform-file line would
#: let one platform's profile excuse them.
_PRODUCTION_IS_A_MODEL_FACT = (
    "only models/<model>/model.yaml may set it (whether a model is production is a fact of the model, "
    "the same on every platform); remove the line here, and set production: false in the model's model.yaml "
    "for a model that never takes production traffic"
)


def _env_str(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ProfileError(f"{path}:{where}: not valid YAML: {problem}") from exc


def _format_validation(path: Path, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key; remove it or fix its spelling"
        value = err.get("input")
        shown = "" if isinstance(value, dict | list) or value is None else f" (got {value!r})"
        parts.append(f"{path}: {loc}: {msg}{shown}")
    return "\n".join(parts)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


class Catalog:
    """All platforms and models under one serve_configs/ directory."""

    def __init__(self, root: Path | None = None, base: str | None = None) -> None:
        self.root = root if root is not None else serve_configs_dir()
        if not (self.root / "platforms").is_dir() or not (self.root / "models").is_dir():
            raise ProfileError(
                f"{self.root}: not a serve_configs directory (needs platforms/ and models/); "
                "point VFLEET_SERVE_CONFIGS or VFLEET_HOME at the vfleet checkout"
            )
        #: The vLLM base the profiles are loaded for (VFLEET_VLLM_BASE in an image; default: the default base).
        self.base = self._base(base or settings.load().vllm_base)

    def _pins(self) -> pins.Pins:
        own = self.root.parent / "versions.json"
        try:
            return pins.load(own) if own.is_file() else pins.parse(versions())
        except VfleetError as exc:
            raise ProfileError(str(exc)) from None

    def _base(self, base: str | None) -> str:
        try:
            return self._pins().base(base, source=f"versions.json beside {self.root}").version
        except VfleetError as exc:
            raise ProfileError(f"{exc} (VFLEET_VLLM_BASE or --base names the base)") from None

    def bases(self) -> list[str]:
        """Every vLLM base of versions.json, the default first."""
        p = self._pins()
        return [p.vllm_version, *(b for b in p.bases if b != p.vllm_version)]

    def _base_layer(self) -> tuple[Path, Layer] | None:
        path = self.root / "bases" / f"{self.base}.yaml"
        if not path.is_file():
            return None
        layer = self._layer(path)
        extra = [f for f in sorted(layer.model_fields_set) if f not in ("vllm", "env")]
        if extra:
            raise ProfileError(f"{path}: {', '.join(extra)}: a base's layer holds vllm and env only")
        return path, layer

    # -- platforms ---------------------------------------------------------------------------
    def platform_names(self) -> list[str]:
        return sorted(p.stem for p in (self.root / "platforms").glob("*.yaml"))

    def platform(self, name: str) -> Platform:
        path = self.root / "platforms" / f"{name}.yaml"
        if not path.is_file():
            raise ProfileError(f"unknown platform {name!r}; known: {', '.join(self.platform_names())}")
        data = _read_yaml(path)
        if not isinstance(data, dict):
            raise ProfileError(f"{path}: expected a mapping of platform facts, got {type(data).__name__}")
        if "production" in data:
            raise ProfileError(f"{path}: production: {_PRODUCTION_IS_A_MODEL_FACT}")
        family_file = self._platform_family_file(data.get("family"))
        if family_file is not None:
            data = {**data, "runtime": _merge(self._family_runtime(family_file), data.get("runtime") or {})}
        try:
            plat = Platform.model_validate(data)
        except ValidationError as exc:
            raise ProfileError(_format_validation(path, exc)) from None
        if plat.platform != name:
            raise ProfileError(f"{path}: platform: {plat.platform!r} does not match the file name {name!r}")
        return plat

    def _platform_family_file(self, family: object) -> Path | None:
        """platforms/families/FAMILY.yaml: the container runtime every platform of a family shares (its
        devices, shared memory, stop timeout), written once; a platform's own `runtime` keys win."""
        if not isinstance(family, str):
            return None
        path = self.root / "platforms" / "families" / f"{family}.yaml"
        return path if path.is_file() else None

    def _family_runtime(self, path: Path) -> dict[str, Any]:
        data = _read_yaml(path)
        if not isinstance(data, dict) or set(data) - {"runtime"} or not isinstance(data.get("runtime"), dict):
            raise ProfileError(f"{path}: expected one mapping, runtime:, of the family's container runtime")
        return dict(data["runtime"])

    # -- models ------------------------------------------------------------------------------
    def model_names(self) -> list[str]:
        return sorted(p.name for p in (self.root / "models").iterdir() if (p / "model.yaml").is_file())

    def _layer(self, path: Path) -> Layer:
        data = _read_yaml(path)
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ProfileError(f"{path}: expected a mapping with vllm/env/verify sections, got {type(data).__name__}")
        try:
            return Layer.model_validate(data)
        except ValidationError as exc:
            raise ProfileError(_format_validation(path, exc)) from None

    def _model_layer(self, model: str) -> Layer:
        path = self.root / "models" / model / "model.yaml"
        if not path.is_file():
            raise ProfileError(f"unknown model {model!r}; known: {', '.join(self.model_names())}")
        layer = self._layer(path)
        if layer.model != model:
            raise ProfileError(f"{path}: model: {layer.model!r} does not match the directory name {model!r}")
        if not layer.platforms:
            raise ProfileError(f"{path}: platforms: list the platforms this model is served on")
        return layer

    def profile_names(self) -> list[str]:
        names: list[str] = []
        for model in self.model_names():
            layer = self._model_layer(model)
            names.extend(f"{model}/{plat}" for plat in layer.platforms or [])
        return names

    def load(self, name: str) -> Profile:
        if name.count("/") != 1:
            raise ProfileError(f"profile {name!r}: write it as MODEL/PLATFORM, e.g. glm-5.3-flash/mi355x")
        model, plat_name = name.split("/")
        base = self._model_layer(model)
        if plat_name not in (base.platforms or []):
            raise ProfileError(
                f"profile {name!r}: model {model} is not served on {plat_name!r}; "
                f"its platforms are {', '.join(base.platforms or [])}"
            )
        platform = self.platform(plat_name)
        mdir = self.root / "models" / model
        layers: list[tuple[Path, Layer]] = [(mdir / "model.yaml", base)]
        # Family, then arch, then platform; a name shared by two of them (the cpu platform of family cpu)
        # is one file, read once.
        for stem in dict.fromkeys((platform.family, platform.arch, plat_name)):
            extra = mdir / f"{stem}.yaml"
            if extra.is_file():
                layer = self._layer(extra)
                for field in ("model", "platforms"):
                    if getattr(layer, field) is not None:
                        raise ProfileError(f"{extra}: {field}: only model.yaml may set it")
                if layer.production is not None:
                    raise ProfileError(f"{extra}: production: {_PRODUCTION_IS_A_MODEL_FACT}")
                layers.append((extra, layer))
        base_layer = self._base_layer()
        if base_layer:
            layers.append(base_layer)

        vllm: dict[str, Any] = {}
        env: dict[str, Any] = dict(platform.env)
        verify: dict[str, Any] = {}
        waivers: list[Waiver] = []
        production = True
        description = ""
        for _, layer in layers:
            vllm = _merge(vllm, layer.vllm)
            env = _merge(env, layer.env)
            verify = _merge(verify, layer.verify)
            waivers.extend(layer.waivers)
            if layer.production is not None:
                production = layer.production
            if layer.description:
                description = layer.description
        family_file = self._platform_family_file(platform.family)
        sources = [str(p.relative_to(self.root)) for p, _ in layers]
        sources += [str(family_file.relative_to(self.root))] if family_file else []
        sources += [f"platforms/{plat_name}.yaml"]
        verify = derive_verify(
            name,
            vllm,
            verify,
            lambda key: next(str(p.relative_to(self.root)) for p, layer in reversed(layers) if key in layer.verify),
        )
        try:
            profile = Profile.model_validate(
                {
                    "name": name,
                    "model": model,
                    "platform": platform,
                    "description": description,
                    "production": production,
                    "vllm": vllm,
                    "env": {k: _env_str(v) for k, v in env.items()},
                    "verify": verify,
                    "waivers": waivers,
                    "sources": sources,
                }
            )
        except ValidationError as exc:
            raise ProfileError(_format_validation(Path(f"{name} (merged from {', '.join(sources)})"), exc)) from None
        enforce_floors(profile)  # what a production profile cannot declare away, for every command that loads it
        return profile

    def stray_layers(self) -> list[str]:
        """Layer files that no profile reads: a name that is not a family, an arch or a platform of the model."""
        stray: list[str] = []
        for model in self.model_names():
            served = [self.platform(n) for n in self._model_layer(model).platforms or []]
            stems = {"model"} | {n for p in served for n in (p.family, p.arch, p.platform)}
            mdir = self.root / "models" / model
            stray.extend(
                f"{path.relative_to(self.root)}: no platform of {model} has the family, arch or name {path.stem!r}"
                for path in sorted(mdir.glob("*.yaml"))
                if path.stem not in stems
            )
        known = self._pins().bases
        stray.extend(
            f"{path.relative_to(self.root)}: {path.stem!r} is not a vLLM base of versions.json ({', '.join(known)})"
            for path in sorted((self.root / "bases").glob("*.yaml"))
            if path.stem not in known
        )
        return stray

    def load_all(self) -> list[Profile]:
        return [self.load(n) for n in self.profile_names()]
