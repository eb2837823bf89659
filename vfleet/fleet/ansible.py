"""Run the playbooks of ansible/ with the settings they need, from the vfleet checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from vfleet import PACKAGE_DIR
from vfleet.errors import VfleetError

PLAYBOOKS = ("rollout", "rollback", "verify", "status")


def ansible_dir() -> Path:
    return PACKAGE_DIR.parent / "ansible"


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


def playbook_argv(
    playbook: str,
    inventory: Path,
    extra_vars: dict[str, Any],
    limit: str | None = None,
    vault_password_file: Path | None = None,
) -> list[str]:
    if playbook not in PLAYBOOKS:
        raise VfleetError(f"unknown playbook {playbook!r}: choose one of {', '.join(PLAYBOOKS)}")
    if not inventory.exists():
        raise VfleetError(
            f"inventory {inventory} does not exist: pass --inventory PATH (e.g. ansible/inventories/example)"
        )
    exe = bin_dir() / "ansible-playbook"
    if not exe.exists():
        raise VfleetError(f"{exe} is missing: install the dev extras (pip install -e '.[dev]') for ansible")
    argv = [str(exe), "-i", str(inventory), str(ansible_dir() / f"{playbook}.yml")]
    if extra_vars:
        argv += ["--extra-vars", json.dumps(extra_vars)]
    if limit:
        argv += ["--limit", limit]
    if vault_password_file:
        argv += ["--vault-password-file", str(vault_password_file)]
    return argv


def run_playbook(
    playbook: str,
    inventory: Path,
    extra_vars: dict[str, Any],
    limit: str | None = None,
    vault_password_file: Path | None = None,
    capture: bool = False,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    argv = playbook_argv(playbook, inventory, extra_vars, limit, vault_password_file)
    return subprocess.run(
        argv, env=env(), cwd=str(ansible_dir()), text=True, check=False, timeout=timeout, capture_output=capture
    )
