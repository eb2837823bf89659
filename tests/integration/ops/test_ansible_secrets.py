"""No secret at any verbosity, on the controller's side of the node role.

* `vfleet_node_state`'s read action returns only the inspect fields the role reads, never the
  container's environment (which holds VLLM_API_KEY and HF_TOKEN from the node's env file); the
  allowlist is checked against every field the role's tasks read.
* `vfleet_boot_verify` hands the key to boot-verify on an in-memory pipe: real ansible-playbook at
  -vvvv runs it with a command that reads the key and even prints it, and neither the output nor
  any file under Ansible's home or the run's directory holds the key.

The fleet-wide check (rollout, rollback, verify and status at -vvvv on a real fleet, with a known API
key and HF token, every byte of output and of the controller's files searched) is in
tests/e2e/ops/test_fleet_lifecycle.py (`_no_secret_anywhere`).
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from vfleet.fleet.ansible import ansible_dir, bin_dir, env

pytestmark = pytest.mark.slow  # ansible-playbook runs (a few seconds)

LIBRARY = ansible_dir() / "roles" / "vfleet_node" / "library"


INSPECT: dict[str, Any] = {
    "Id": "c0ffee",
    "Name": "/vfleet-serve",
    "Image": "sha256:abc",
    "Created": "2026-12-01T00:00:00Z",
    "RestartCount": 0,
    "Args": ["--api-key", "ARG-SECRET"],
    "State": {"Status": "running", "Running": True, "ExitCode": 0, "Pid": 42},
    "Config": {
        "Image": "reg/vfleet-cpu@sha256:def",
        "Labels": {"org.vfleet.profile": "tiny/cpu"},
        "Env": ["VLLM_API_KEY=ENV-SECRET", "HF_TOKEN=hf_ENV-SECRET"],
        "Cmd": ["vllm", "serve"],
    },
    "HostConfig": {"Binds": ["/etc/vfleet:/etc/vfleet"]},
}


def test_read_returns_no_environment_and_every_field_the_role_reads() -> None:
    # In a child Python: importing ansible's module_utils into the test process breaks a later torch
    # import there (torch._dynamo's substitute_in_graph meets ansible's patched classes).
    code = (
        "import importlib.util, json, sys; spec = importlib.util.spec_from_file_location('m', sys.argv[1]); "
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
        "print(json.dumps(m.summarize(json.loads(sys.argv[2]))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(LIBRARY / "vfleet_node_state.py"), json.dumps(INSPECT)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    kept = json.loads(proc.stdout)
    text = json.dumps(kept)
    assert "SECRET" not in text, text
    assert "Env" not in kept["Config"] and "Args" not in kept and "HostConfig" not in kept
    # Every `vfleet_node__current.A.B` the role's tasks read survives the allowlist.
    tasks = "\n".join(p.read_text() for p in (ansible_dir() / "roles" / "vfleet_node" / "tasks").glob("*.yml"))
    read = set(re.findall(r"vfleet_node__(?:current|state\.container)\.([A-Za-z]+(?:\.[A-Za-z]+)?)", tasks))
    assert read, "the role reads no container field: the pattern is stale"
    for dotted in sorted(read):
        node: Any = kept
        for part in dotted.split("."):
            assert isinstance(node, dict) and part in node, f"the role reads {dotted}, which read() drops"
            node = node[part]


def _run_boot_verify_play(tmp_path: Path, key: str, command: list[str]) -> tuple[int, str]:
    """ansible-playbook -vvvv of one task: vfleet_boot_verify with COMMAND and KEY (from a vars file,
    as the inventory's vault holds it). Returns (exit status, every line Ansible printed)."""
    (tmp_path / "vars.yml").write_text(yaml.safe_dump({"fleet_key": key, "ansible_python_interpreter": sys.executable}))
    (tmp_path / "play.yml").write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars_files": [str(tmp_path / "vars.yml")],
                    "tasks": [
                        {
                            "name": "Boot-verify with the key on a pipe",
                            "vfleet_boot_verify": {"argv": command, "api_key": "{{ fleet_key }}"},
                            "register": "result",
                        },
                        {"name": "Show the result", "ansible.builtin.debug": {"var": "result"}},
                    ],
                }
            ]
        )
    )
    run_env = {**env(), "ANSIBLE_LIBRARY": str(LIBRARY), "ANSIBLE_HOME": str(tmp_path / "ansible-home")}
    proc = subprocess.run(
        [str(bin_dir() / "ansible-playbook"), "-vvvv", "-i", "localhost,", "-c", "local", str(tmp_path / "play.yml")],
        env=run_env,
        cwd=str(ansible_dir()),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


# What boot-verify does with --env-file FILE, and worse: it prints what it read.
LEAKY = (
    "import sys; from pathlib import Path; a = sys.argv; f = a[a.index('--env-file') + 1]; "
    "text = Path(f).read_text(); print('argv', a[1:]); print('read', text.strip()); "
    "sys.exit(0 if text.startswith('VLLM_API_KEY=') else 3)"
)


def test_boot_verify_gets_the_key_on_a_pipe_and_no_verbosity_prints_it(tmp_path: Path) -> None:
    key = f"vf-{secrets.token_hex(16)}"
    rc, out = _run_boot_verify_play(tmp_path, key, [sys.executable, "-c", LEAKY, "verify"])
    assert rc == 0, out[-3000:]
    assert "<localhost> EXEC" in out, "not run at -vvvv"
    # The command read the key from an inherited pipe, not from a file or its command line.
    assert re.search(r"'--env-file', '/dev/fd/\d+'", out), out[-3000:]
    assert "read VLLM_API_KEY=********" in out, out[-3000:]  # what it printed, masked by Ansible
    assert key not in out
    leaked = [str(p) for p in tmp_path.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert leaked == [str(tmp_path / "vars.yml")], leaked  # the vault's stand-in, and nothing else


def test_a_failing_boot_verify_shows_its_output_and_still_no_key(tmp_path: Path) -> None:
    key = f"vf-{secrets.token_hex(16)}"
    failing = [sys.executable, "-c", "print('boot-verify: 2 checks failed'); raise SystemExit(1)"]
    rc, out = _run_boot_verify_play(tmp_path, key, failing)
    assert rc != 0
    assert "boot-verify failed (exit 1)" in out and "boot-verify: 2 checks failed" in out, out[-3000:]
    assert key not in out
