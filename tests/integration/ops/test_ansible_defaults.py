"""Each role states its defaults once, in defaults/main.yml; meta/argument_specs.yml is checked against
that file here: an option repeats no default (types and descriptions only), its type accepts the value
of defaults/main.yml as it is, and every variable of defaults/main.yml is an option of some entry point
or is listed in INTERNAL below."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from vfleet.fleet.ansible import ansible_dir

ROLES_DIR = ansible_dir() / "roles"
ROLES = sorted(p.name for p in ROLES_DIR.iterdir() if (p / "meta" / "argument_specs.yml").is_file())

#: The one list of role defaults that are no entry point's option: the role sets or reads them itself,
#: and an operator has no reason to change them. Every other default is an option of an argument spec.
INTERNAL: dict[str, frozenset[str]] = {role: frozenset() for role in ROLES}


def role_defaults(role_dir: Path) -> dict[str, Any]:
    """defaults/main.yml, or every file of defaults/main/ (kubespray's layout), as Ansible merges them."""
    single = role_dir / "defaults" / "main.yml"
    files = [single] if single.is_file() else sorted((role_dir / "defaults" / "main").glob("*.yml"))
    out: dict[str, Any] = {}
    for path in files:
        out.update(yaml.safe_load(path.read_text()) or {})
    return out


# ansible-core's own validator, run in a child process: importing ansible.module_utils patches
# sys.intern for the whole interpreter, after which `import torch` fails (torch._dynamo), and the test
# run imports torch later (the tiny model, vLLM's parser, the kernels).
_VALIDATE = """
import json, sys
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
out = []
for name, option, value in json.load(sys.stdin):
    result = ArgumentSpecValidator({name: option}).validate({name: value})
    out.append([result.error_messages, result.validated_parameters.get(name)])
json.dump(out, sys.stdout)
"""


def _type_errors(checks: list[tuple[str, dict[str, Any], Any]]) -> list[str | None]:
    """For each (name, spec, value): why VALUE does not satisfy the option's spec as ansible-core checks
    it (None: it does). A value that ansible-core would convert (8000 for a str, "yes" for a bool) does
    not satisfy it either."""
    batch = [
        (name, {k: v for k, v in spec.items() if k not in ("default", "required")}, value)
        for name, spec, value in checks
    ]
    proc = subprocess.run(
        [sys.executable, "-c", _VALIDATE], input=json.dumps(batch), capture_output=True, text=True, check=True
    )
    out: list[str | None] = []
    for (_, spec, value), (errors, checked) in zip(checks, json.loads(proc.stdout), strict=True):
        widened = spec.get("type") == "float" and isinstance(value, int) and not isinstance(value, bool)
        if errors:
            out.append("; ".join(errors))
        elif checked != value or (type(checked) is not type(value) and not widened):
            out.append(f"type {spec.get('type', 'str')} converts it to {checked!r}")
        else:
            out.append(None)
    return out


def disagreements(role_dir: Path, internal: frozenset[str] = frozenset()) -> list[str]:
    """Every place where ROLE_DIR's argument specs and defaults/main.yml do not say the same thing."""
    role = role_dir.name
    defaults = role_defaults(role_dir)
    specs = yaml.safe_load((role_dir / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    out: list[str] = []
    for entry in sorted(set(specs) - {p.stem for p in (role_dir / "tasks").glob("*.yml")}):
        out.append(f"{role}: argument spec {entry} has no task file tasks/{entry}.yml")
    # An option that several entry points share (the YAML anchor) is checked, and named, once.
    entries: dict[tuple[str, str], list[str]] = {}
    specs_of: dict[tuple[str, str], dict[str, Any]] = {}
    for entry, spec in specs.items():
        for name, option in (spec.get("options") or {}).items():
            key = (name, yaml.safe_dump(option, sort_keys=True))
            entries.setdefault(key, []).append(entry)
            specs_of[key] = option
    options = {name for name, _ in entries}
    typed: list[tuple[str, str, dict[str, Any], Any]] = []
    for (name, text), names in entries.items():
        option = specs_of[(name, text)]
        where = f"{role}: {', '.join(names)}: {name}"
        if name not in defaults:
            if "default" in option:
                out.append(f"{where}: argument spec default {option['default']!r}, defaults/main.yml has none")
            elif not option.get("required"):
                out.append(f"{where}: neither required nor in defaults/main.yml")
            continue
        value = defaults[name]
        if "default" in option:
            out.append(
                f"{where}: argument spec repeats a default ({option['default']!r}); defaults/main.yml is the one "
                f"place it is written ({value!r})"
            )
        if option.get("required"):
            out.append(f"{where}: required, yet defaults/main.yml gives it {value!r}")
        typed.append((where, name, option, value))
    for (where, _, _, value), error in zip(typed, _type_errors([t[1:] for t in typed]), strict=True):
        if error:
            out.append(f"{where}: defaults/main.yml {value!r} does not satisfy the argument spec: {error}")
    for name in sorted(defaults):
        if not name.startswith(f"{role}_"):
            out.append(f"{role}: {name}: defaults/main.yml holds a variable without the role prefix {role}_")
        elif name not in options and name not in internal:
            out.append(f"{role}: {name}: defaults/main.yml {defaults[name]!r} is no entry point's option nor INTERNAL")
    for name in sorted(internal & options):
        out.append(f"{role}: {name}: listed as INTERNAL, yet an argument spec takes it as an option")
    for name in sorted(internal - set(defaults)):
        out.append(f"{role}: {name}: listed as INTERNAL, yet not in defaults/main.yml")
    return out


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_agree_with_the_role_defaults(role: str) -> None:
    problems = disagreements(ROLES_DIR / role, INTERNAL[role])
    assert not problems, "\n".join(problems)


def test_every_role_has_an_argument_spec() -> None:
    with_tasks = sorted(p.name for p in ROLES_DIR.iterdir() if (p / "tasks").is_dir())
    assert with_tasks == ROLES


def _tampered(tmp_path: Path, role: str) -> Path:
    copy = tmp_path / role
    shutil.copytree(ROLES_DIR / role, copy)
    return copy


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path}: {old!r} is gone; update the test"
    path.write_text(text.replace(old, new, 1))


def test_a_default_repeated_in_the_argument_spec_is_named(tmp_path: Path) -> None:
    """Written twice, a default drifts (issue 35: the drain settle default stood in five places)."""
    role = _tampered(tmp_path, "vfleet")
    _edit(
        role / "meta" / "argument_specs.yml",
        "      vfleet_batch_size:\n",
        "      vfleet_batch_size:\n        default: 1\n",
    )
    problems = disagreements(role)
    assert problems == [
        "vfleet: plan, lock, unlock, all_ok: vfleet_batch_size: argument spec repeats a default (1); "
        "defaults/main.yml is the one place it is written (1)"
    ]


def test_a_default_of_the_wrong_type_is_named(tmp_path: Path) -> None:
    role = _tampered(tmp_path, "vfleet_node")
    _edit(role / "defaults" / "main.yml", "vfleet_node_host_port: 8000\n", "vfleet_node_host_port: '8000'\n")
    problems = disagreements(role)
    named = (
        "vfleet_node: main, preflight, pull, deploy, rollback_target, verify, status: vfleet_node_host_port: "
        "defaults/main.yml '8000' does not satisfy the argument spec: type int converts it to 8000"
    )
    assert any(p.startswith(named) for p in problems), problems


def test_a_default_no_spec_names_is_refused_unless_listed_internal(tmp_path: Path) -> None:
    role = _tampered(tmp_path, "vfleet_lb")
    with (role / "defaults" / "main.yml").open("a") as f:
        f.write("vfleet_lb_forgotten: 7\n")
    problem = "vfleet_lb: vfleet_lb_forgotten: defaults/main.yml 7 is no entry point's option nor INTERNAL"
    assert problem in disagreements(role)
    assert disagreements(role, frozenset({"vfleet_lb_forgotten"})) == []
    assert "vfleet_lb: vfleet_lb_gone: listed as INTERNAL, yet not in defaults/main.yml" in disagreements(
        role, frozenset({"vfleet_lb_forgotten", "vfleet_lb_gone"})
    )


#: The node role's defaults that stand for a `docker run` option, by DockerRun field (vfleet.render).
NODE_RUN_DEFAULTS = {
    "vfleet_node_model_dir": "model_dir",
    "vfleet_node_host_port": "host_port",
    "vfleet_node_env_file": "env_file",
    "vfleet_node_cache_volume": "cache_volume",
}


def run_default_disagreements(defaults_file: Path) -> list[str]:
    from vfleet.render import DOCKER_RUN_DEFAULTS

    defaults = yaml.safe_load(defaults_file.read_text())
    return [
        f"{defaults_file}: {var} is {defaults.get(var)!r}, DockerRun.{field} (vfleet/render.py) is "
        f"{DOCKER_RUN_DEFAULTS[field]!r}"
        for var, field in NODE_RUN_DEFAULTS.items()
        if defaults.get(var) != DOCKER_RUN_DEFAULTS[field]
    ]


def test_the_node_role_and_vfleet_render_default_to_the_same_docker_run(tmp_path: Path) -> None:
    """`vfleet render` takes its defaults from DockerRun; the node role's defaults of the same options must
    agree with them (the role renders through `vfleet render`, passing its own)."""
    defaults = ROLES_DIR / "vfleet_node" / "defaults" / "main.yml"
    assert run_default_disagreements(defaults) == []
    copy = _tampered(tmp_path, "vfleet_node") / "defaults" / "main.yml"
    _edit(copy, "vfleet_node_host_port: 8000", "vfleet_node_host_port: 8001")
    assert run_default_disagreements(copy) == [
        f"{copy}: vfleet_node_host_port is 8001, DockerRun.host_port (vfleet/render.py) is 8000"
    ]
