"""Run the playbooks of ansible/ with the settings they need, from the vfleet checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from vfleet import PACKAGE_DIR
from vfleet.errors import VfleetError

PLAYBOOKS = ("rollout", "rollback", "verify", "status", "lb", "unlock")
#: forks of ansible.cfg, and the most `forks_for` asks for.
MIN_FORKS = 32
MAX_FORKS = 256


def forks_for(hosts: int) -> int:
    """Forks for a run over HOSTS nodes: one per node, so that a batch (and the waits of its nodes:
    drain, boot, boot-verify) runs at once rather than in rounds of ansible.cfg's 32, between 32 and
    256. A fork waiting on a node sleeps; it costs the controller memory, not CPU."""
    return min(max(MIN_FORKS, hosts), MAX_FORKS)


def ansible_dir() -> Path:
    return PACKAGE_DIR.parent / "ansible"


def role_file(role: str, kind: str) -> dict[str, Any]:
    """ROLE's KIND/main.yml (defaults, vars) as it is written, the one place its values are written."""
    path = ansible_dir() / "roles" / role / kind / "main.yml"
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise VfleetError(
            f"{path}: cannot read the role {kind} ({exc.strerror}); run vfleet fleet from a vfleet checkout "
            "(the images hold no ansible/ tree)"
        ) from exc
    return dict(data or {})


def role_defaults(role: str) -> dict[str, Any]:
    """The defaults of ROLE as its defaults/main.yml writes them, the one place they are written."""
    return role_file(role, "defaults")


def bin_dir() -> Path:
    return Path(sys.executable).parent


def env() -> dict[str, str]:
    """Environment of every ansible-playbook run: our ansible.cfg, fail on an unparsed inventory,
    and the venv's bin first on PATH (vfleet, ansible-playbook)."""
    out = dict(os.environ)
    out["ANSIBLE_CONFIG"] = str(ansible_dir() / "ansible.cfg")
    out["ANSIBLE_INVENTORY_UNPARSED_FAILED"] = "true"
    out["ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED"] = "true"
    out["ANSIBLE_NOCOLOR"] = "1"
    out["ANSIBLE_HOME"] = out.get("ANSIBLE_HOME", str(PACKAGE_DIR.parent / ".cache" / "ansible-home"))
    out["PATH"] = f"{bin_dir()}{os.pathsep}{out.get('PATH', '')}"
    return out


def check_paths(playbook: str, inventory: Path) -> tuple[Path, Path]:
    """(ansible-playbook, the playbook) for a run of PLAYBOOK on INVENTORY, or the error naming what is missing."""
    if playbook not in PLAYBOOKS:
        raise VfleetError(f"unknown playbook {playbook!r}: choose one of {', '.join(PLAYBOOKS)}")
    if not inventory.exists():
        raise VfleetError(
            f"inventory {inventory} does not exist: pass --inventory PATH (e.g. ansible/inventories/example)"
        )
    book = ansible_dir() / f"{playbook}.yml"
    if not book.is_file():
        raise VfleetError(
            f"{book} does not exist: run vfleet fleet from a vfleet checkout (the images hold no ansible/ tree)"
        )
    exe = bin_dir() / "ansible-playbook"
    if not exe.exists():
        raise VfleetError(f"{exe} is missing: install the dev extras (pip install -e '.[dev]') for ansible")
    return exe, book


def playbook_argv(
    playbook: str,
    inventory: Path,
    extra_vars: dict[str, Any],
    limit: str | None = None,
    vault_password_file: Path | None = None,
) -> list[str]:
    exe, book = check_paths(playbook, inventory)
    argv = [str(exe), "-i", str(inventory), str(book)]
    if extra_vars:
        argv += ["--extra-vars", json.dumps(extra_vars)]
    if limit:
        argv += ["--limit", limit]
    if vault_password_file:
        argv += ["--vault-password-file", str(vault_password_file)]
    return argv


def limit_hosts(inventory: Path, limit: str) -> list[str]:
    """The inventory hosts a --limit pattern selects, as Ansible itself resolves it."""
    exe = bin_dir() / "ansible"
    proc = subprocess.run(
        [str(exe), "all", "-i", str(inventory), "--limit", limit, "--list-hosts"],
        env=env(),
        cwd=str(ansible_dir()),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    hosts = [line.strip() for line in proc.stdout.splitlines()[1:] if line.strip()]
    if proc.returncode != 0 or not hosts:
        detail = (proc.stderr.strip().splitlines() or ["no host matched"])[-1]
        raise VfleetError(f"--limit {limit!r} selects no host of {inventory}: {detail}")
    return hosts


def with_controller(inventory: Path, limit: str) -> str:
    """The --limit to pass for LIMIT: the hosts it selects plus localhost. The plan, the fleet lock,
    the fleet-wide gates and the canary selection run on localhost, and the playbooks refuse a limit
    without it; resolving the pattern first keeps `!node3` or `group:&other` meaning what they say."""
    return ",".join(["localhost", *[h for h in limit_hosts(inventory, limit) if h != "localhost"]])


def run_playbook(
    playbook: str,
    inventory: Path,
    extra_vars: dict[str, Any],
    limit: str | None = None,
    vault_password_file: Path | None = None,
    capture: bool = False,
    timeout: float | None = None,
    forks: int | None = None,
    env_vars: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """ENV_VARS: what the CLI hands the roles beside the extra vars, where no -e and no inventory reaches
    (the gates' trusted keys and supply store: ansible/roles/vfleet_node/vars/main.yml)."""
    argv = playbook_argv(playbook, inventory, extra_vars, limit, vault_password_file)
    run_env = {**env(), **(env_vars or {})}
    if forks is not None:
        run_env["ANSIBLE_FORKS"] = str(forks)
    return subprocess.run(
        argv, env=run_env, cwd=str(ansible_dir()), text=True, check=False, timeout=timeout, capture_output=capture
    )
