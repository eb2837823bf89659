"""The rollout's supply-chain gate (ansible/roles/vfleet_node/tasks/supply.yml) on a real rollout.yml run
whose one node is this machine (a local connection, state in a tmp directory, no balancer): what the
gate cannot verify stops the run before the pull, with the reason named. The inventory is a production
one (no test fleet: every gate on); the promotion check, which the unpromoted reference fails too, runs
beside the gate and does not hide its reason. The CLI's --trusted-key and --supply-store reach the gate
on such an inventory (handed over outside -e: ansible/roles/vfleet_node/vars/main.yml). The switches
that skip the gate, refused or honoured, are tests/integration/ops/test_fleet_switches.py's.
The gate passing and a node then pulling is the lifecycle test's (tests/e2e/ops/test_fleet_lifecycle.py: the
real CPU image, staged unsigned, then tampered, then signed); the Docker-in-Docker fleet scenarios run
with the switch on (their stand-in images have no build record)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.fleet import LOCK, NOWHERE, local_inventory, pulled, rollout
from support.supply import make_key


def _inventory(tmp: Path) -> Path:
    return local_inventory(tmp)


@pytest.mark.injected_fault
def test_an_image_the_gate_cannot_verify_stops_the_run_before_the_pull(tmp_path: Path) -> None:
    """Fault: a reference whose registry does not answer. The gate fails closed on the digest check."""
    _, pub = make_key(tmp_path, "trusted")
    proc = rollout(
        _inventory(tmp_path), "--trusted-key", f"provenance={pub}", "--supply-store", str(tmp_path / "store")
    )
    assert proc.returncode != 0, proc.stdout[-3000:]
    out = proc.stdout
    assert f"NOT verified {NOWHERE}: digest:" in out, out[-3000:]
    assert "The rollout stops before any node pulls the image. Push the image to the registry" in out, out[-3000:]
    assert "No node has been touched" in out
    assert "NOT CHECKED: supply chain" not in out
    assert not pulled(out), out[-3000:]
    assert not LOCK.exists(), "the failed run's fleet lock was not released"


def test_no_trusted_key_is_a_failure_not_a_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no key anywhere nothing could pass, so the gate says that first (before it asks a registry)."""
    monkeypatch.delenv("VFLEET_TRUSTED_KEYS_PROVENANCE", raising=False)
    proc = rollout(_inventory(tmp_path))
    assert proc.returncode != 0
    assert f"NOT verified {NOWHERE}: signature: no trusted key: declare the public key" in proc.stdout, proc.stdout[
        -3000:
    ]
    assert "Sign it with a key declared for the provenance role (--trusted-key provenance=PUB" in proc.stdout
    assert not pulled(proc.stdout)


def test_a_missing_trusted_key_file_is_named(tmp_path: Path) -> None:
    proc = rollout(_inventory(tmp_path), "--trusted-key", f"provenance={tmp_path / 'nope.pub'}")
    assert proc.returncode != 0
    assert f"--trusted-key provenance={tmp_path / 'nope.pub'}: {tmp_path / 'nope.pub'} is no such file" in proc.stdout


def test_a_key_is_trusted_for_its_roles_only(tmp_path: Path) -> None:
    """Issue 31, item 6: a key declared for the verify role does not make image provenance. The image is
    signed by that key (a served registry of the real protocol, as in test_supply_policy); the gate's own
    command, `vfleet image verify` as the rollout runs it, refuses it naming the key's role, and passes it
    once the key is declared for provenance. A rollout given a key with no role stops before any play."""
    from support.registry_server import CONFIG, DIGEST, serve
    from support.registry_server import REPO as SERVED_REPO
    from support.supply_records import CLEAN, signed_record

    from vfleet.supply.audit import _summarise
    from vfleet.supply.identity import KIND_MANIFEST, Identity

    bare = rollout(local_inventory(tmp_path), "--trusted-key", str(tmp_path / "release.pub"))
    assert bare.returncode != 0 and "names no role" in bare.stdout and "ROLE=PUB" in bare.stdout, bare.stdout[-2000:]
    assert "PLAY [" not in bare.stdout
    pub, store = tmp_path / "release.pub", ("--store", str(tmp_path / "store"))
    for reg in serve("none"):
        ref = f"{reg.host}/{SERVED_REPO}@{DIGEST}"
        ident = Identity(ref, CONFIG, f"{reg.host}/{SERVED_REPO}", DIGEST, KIND_MANIFEST)
        signed_record(tmp_path, _summarise({"service": "pypi"}, CLEAN), ident=ident)  # signed by tmp/release.pem
        verify = [sys.executable, "-m", "vfleet", "image", "verify", ref, *store]
        builds = make_key(tmp_path, "builds")[1]  # the key trusted for provenance signed no image here
        keys = [f"--key=verify,ab={pub}", f"--key=provenance={builds}"]
        proc = subprocess.run([*verify, *keys], capture_output=True, text=True, check=False)
        out = " ".join((proc.stdout + proc.stderr).split())
        assert proc.returncode == 1 and f"NOT verified {ref}: signature:" in out, out[-3000:]
        assert "a key of the verify and ab role, not of the provenance role" in out, out[-3000:]
        proc = subprocess.run([*verify, f"--key=provenance={pub}"], capture_output=True, text=True, check=False)
        assert proc.returncode == 0 and f"verified {ref} ({DIGEST}): signed by" in proc.stdout, proc.stdout[-3000:]
