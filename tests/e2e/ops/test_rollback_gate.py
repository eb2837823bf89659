"""A rollback passes the rollout's gates (ansible/rollback.yml -> swap.yml), on a real rollback.yml run
whose one node is this machine (a local connection, its deployment record in a tmp directory, no
balancer): promotion, the supply-chain gate, one image. The node is read through this machine's
dockerd before any gate (a rollback must know what the node runs), hence the e2e tier. The Docker-in-Docker scenarios
(tests/e2e/ops/test_ansible_fleet.py) walk a rollback's canary, batches, a failing node and the failed-node
cap on a real fleet; the lifecycle (tests/e2e/ops/test_fleet_lifecycle.py) rolls back the real image."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from support.fleet import LOCK, PRODUCTION, local_inventory
from support.supply import make_key, write_deploy_record

from vfleet.dockerd import ensure_dockerd

# ansible-playbook runs, about 10 s each
pytestmark = [pytest.mark.slow, pytest.mark.long]  # the whole file: make test-long (tests/README.md, Long tests)


@pytest.fixture(autouse=True, scope="module")
def _dockerd() -> None:
    ensure_dockerd()


#: Addresses nothing listens on: no gate can tie these references to a digest.
PREVIOUS = "127.0.0.1:9/vfleet/previous@sha256:" + "cd" * 32
NAMED = "127.0.0.1:9/vfleet/named@sha256:" + "ef" * 32


def _node(tmp: Path, record: dict[str, Any] | None, *, signed: bool = True) -> Path:
    """The one-node inventory of support.fleet, with the promotion check on; RECORD is the node's deployment
    record (deployed.json), as the controller signs it at deploy time (SIGNED false: a bare file, as written
    before records were signed)."""
    inv = local_inventory(tmp)
    if record is not None and signed:
        write_deploy_record(tmp / "state", "gate-node", record)
    elif record is not None:
        (tmp / "state").mkdir(parents=True, exist_ok=True)
        (tmp / "state" / "deployed.json").write_text(json.dumps(record))
    return inv


def _record(gate: dict[str, str] | None) -> dict[str, Any]:
    previous: dict[str, Any] = {"image": PREVIOUS, "image_id": "sha256:" + "11" * 32}
    if gate is not None:
        previous["gate"] = gate
    return {
        "state": "deployed",
        "image": "reg/now@sha256:" + "22" * 32,
        "image_id": "sha256:" + "33" * 32,
        "previous": previous,
    }


def _rollback(tmp: Path, inv: Path, *args: str, env: dict[str, str] | None = None, action: str = "rollback") -> str:
    """A failing `vfleet fleet ACTION` on INV: no node pulled before the gates passed, and the lock released."""
    _, pub = make_key(tmp, "trusted")
    argv = [
        sys.executable,
        "-m",
        "vfleet",
        "fleet",
        action,
        "--inventory",
        str(inv),
        "--trusted-key",
        f"provenance,verify,ab={pub}",
        "--supply-store",
        str(tmp / "store"),
        *args,
    ]
    env = {**(env or os.environ), "VFLEET_PROMOTIONS": str(tmp / "promotions.jsonl")}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, env=env)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, out[-3000:]
    assert "Pull and inspect the image" not in out, "a node pulled before the gates passed: " + out[-3000:]
    assert not LOCK.exists(), "the failed run's fleet lock was not released"
    return out


def test_a_rollback_to_an_unpromoted_previous_image_is_refused(tmp_path: Path) -> None:
    """The previous image has no record of passing the gate: its promotion is looked up, and it has none."""
    out = _rollback(tmp_path, _node(tmp_path, _record(gate=None)))
    assert f"rollback to {PREVIOUS} through the gates of a rollout" in out, out[-3000:]
    assert "NOT CHECKED: promotion" not in out
    assert f"not promoted: {PREVIOUS}" in out or "not promoted:" in out, out[-3000:]


def test_a_named_rollback_image_passes_the_promotion_and_supply_gates(tmp_path: Path) -> None:
    """--image: the recorded gate of the previous image does not count; the named one is looked up."""
    out = _rollback(tmp_path, _node(tmp_path, _record(gate={"promotion": "checked"})), "--image", NAMED)
    assert f"rollback to {NAMED} through the gates of a rollout" in out, out[-3000:]
    assert "NOT CHECKED: promotion" not in out
    assert "not promoted:" in out, out[-3000:]


def test_an_emergency_rollback_skips_only_the_promotion_lookup_and_says_so(tmp_path: Path) -> None:
    """The record says the previous image's promotion was checked when it was deployed: the lookup is
    skipped, said as NOT CHECKED, and the supply-chain gate still runs (and stops this unreachable image)."""
    out = _rollback(tmp_path, _node(tmp_path, _record(gate={"promotion": "checked"})))
    assert f"NOT CHECKED: promotion of {PREVIOUS} (emergency rollback to the recorded previous image" in out, out[
        -3000:
    ]
    assert f"NOT verified {PREVIOUS}: digest:" in out, out[-3000:]
    assert "stops before any node pulls the image" in out


def test_an_edited_deployment_record_makes_the_emergency_rollback_refuse(tmp_path: Path) -> None:
    """Issue 31, item 5: the node's record is the controller's word only with its signature. A record whose
    previous image was edited (the signed one says its promotion was checked), and a bare record that says
    so unsigned, are refused before any gate, naming the node and the file; --image is the way on."""
    signed = _record(gate={"promotion": "checked"})
    path = write_deploy_record(tmp_path / "state", "gate-node", signed)
    edited = json.loads(path.read_text())
    edited["previous"]["image"] = NAMED  # never promoted; its record would skip the promotion lookup
    path.write_text(json.dumps(edited))
    out = _rollback(tmp_path, local_inventory(tmp_path))
    where = f"gate-node: {tmp_path / 'state' / 'deployed.json'}"
    assert f"{where}: it was edited after the controller signed it (previous changed)" in out, out[-3000:]
    assert "A rollback does not take its image, or the gates it passed, from that record" in out
    assert "NOT CHECKED: promotion" not in out and "No node has been touched" in out, out[-3000:]
    out = _rollback(tmp_path, _node(tmp_path, signed, signed=False))
    assert f"{where}: it carries no controller signature" in out, out[-3000:]
    assert "NOT CHECKED: promotion" not in out


def test_a_node_with_nothing_to_roll_back_to_is_named(tmp_path: Path) -> None:
    out = _rollback(tmp_path, _node(tmp_path, None))
    assert "gate-node: no previous image recorded" in out, out[-3000:]


def test_a_rollback_across_a_profile_change_is_judged_by_the_release_the_image_was_promoted_under(
    tmp_path: Path,
) -> None:
    """The previous image was promoted under serve profiles the controller's checkout has since changed
    (VFLEET_SERVE_CONFIGS on an edited copy stands for the moved-on checkout). With the release snapshot
    `vfleet promote` kept, the rollback's promotion check passes against the image's own release and the
    next gate (supply chain) runs; without it, the promotion check fails against the checkout."""
    from support.reports import key_files, trusted, write_report

    from vfleet import promotion

    inv = _node(tmp_path, _record(gate=None))
    digest = PREVIOUS.split("@", 1)[1]
    # The node serves a production profile (a fleet that is not a test fleet's serves no other); its first
    # promotion needs no A/B and says so.
    rdir = write_report(tmp_path / "r", profile=PRODUCTION, digest=digest, source="container",
                        figures={"log_warnings": []})  # fmt: skip
    promotion.promote(PREVIOUS, PRODUCTION, rdir, tmp_path / "promotions.jsonl", keys=trusted())
    moved = tmp_path / "moved" / "serve_configs"
    shutil.copytree(REPO / "serve_configs", moved)
    model = moved / "models" / PRODUCTION.split("/")[0] / "model.yaml"
    model.write_text(model.read_text() + "# the next release\n")
    env = {**os.environ, "VFLEET_SERVE_CONFIGS": str(moved)}
    keys = ("--trusted-key", f"verify,ab={key_files()[1]}")

    out = _rollback(tmp_path, inv, *keys, env=env)
    assert f"release data of {PREVIOUS} from its snapshot {tmp_path}/releases/" in out, out[-3000:]
    assert "not promoted for profile" not in out, out[-3000:]
    assert f"NOT verified {PREVIOUS}: digest:" in out, out[-3000:]  # the supply gate ran next, and stopped it

    shutil.rmtree(tmp_path / "releases")
    out = _rollback(tmp_path, inv, *keys, env=env)
    assert f"no release snapshot of {PREVIOUS}" in out, out[-3000:]
    assert "not promoted for profile" in out and "the profiles changed since" in out, out[-3000:]


def test_a_run_by_tag_resolves_it_once_and_every_gate_uses_the_digest(tmp_path: Path) -> None:
    """A rollout of REGISTRY/REPO:TAG asks the registry once (a registry of the real protocol served
    here, as in tests/integration/build/test_registry_auth.py) and goes on with REGISTRY/REPO@sha256:D: the
    promotion lookup names the digest. A tag that does not resolve stops the run before any gate."""
    from support.registry_server import DIGEST as SERVED
    from support.registry_server import REPO as SERVED_REPO
    from support.registry_server import serve

    inv = _node(tmp_path, None)
    for reg in serve("none"):
        tag = f"{reg.host}/{SERVED_REPO}:v1"
        out = _rollback(tmp_path, inv, "--image", tag, action="rollout")
        digest_ref = f"{reg.host}/{SERVED_REPO}@{SERVED}"
        assert f"{tag} is {digest_ref} at its registry" in out, out[-3000:]
        assert f"{digest_ref} ({SERVED}) was never promoted" in out, out[-3000:]
        # A tag the registry does not know: named, and nothing else runs.
        out = _rollback(tmp_path, inv, "--image", f"{reg.host}/{SERVED_REPO}:no-such-tag", action="rollout")
        assert f"cannot resolve {reg.host}/{SERVED_REPO}:no-such-tag at its registry" in out, out[-3000:]
        assert "Nothing has been touched" in out and "never promoted" not in out, out[-3000:]


def test_a_rollout_refuses_an_image_of_a_base_the_checkout_does_not_know(tmp_path: Path) -> None:
    """Issue 24, item 5: the image's signed provenance names its vLLM base (build label VLLM_VERSION). An
    image that is promoted, signed by a trusted key and served by a registry of the real protocol, but
    built on vLLM 0.99.0, a base this checkout's versions.json does not know, is stopped by the supply gate
    of `ansible-playbook rollout.yml` before any node pulls it; the same image signed as a 0.34.0 build
    passes that gate, and the run goes on to the node's preflight."""
    from support.registry_server import CONFIG, DIGEST, serve
    from support.registry_server import REPO as SERVED_REPO
    from support.reports import key_files, trusted, write_report
    from support.supply_records import CLEAN, signed_record

    from vfleet import promotion
    from vfleet.supply.audit import _summarise
    from vfleet.supply.identity import KIND_MANIFEST, Identity

    inv = _node(tmp_path, None)
    for reg in serve("none"):
        ref = f"{reg.host}/{SERVED_REPO}@{DIGEST}"
        rdir = write_report(tmp_path / "r", profile=PRODUCTION, digest=DIGEST, source="container",
                            figures={"log_warnings": []})  # fmt: skip
        promotion.promote(ref, PRODUCTION, rdir, tmp_path / "promotions.jsonl", keys=trusted())
        ident = Identity(ref, CONFIG, f"{reg.host}/{SERVED_REPO}", DIGEST, KIND_MANIFEST)
        keys = (
            "--trusted-key",
            f"verify,ab={key_files()[1]}",
            "--trusted-key",
            f"provenance={tmp_path / 'release.pub'}",
        )

        signed_record(tmp_path, _summarise({"service": "pypi"}, CLEAN), "0.99.0", ident=ident)
        out = _rollback(tmp_path, inv, "--image", ref, *keys, action="rollout")
        assert "built on vLLM 0.99.0, a base this checkout's versions.json does not know" in out, out[-3000:]
        # The hint fits the failure: other inputs than this checkout's, not a missing signature.
        assert "roll out an image built from this checkout, or run the rollout from the checkout" in out
        assert "Sign it with a key" not in out
        assert "stops before any node pulls the image" in out, out[-3000:]

        shutil.rmtree(tmp_path / "store")
        signed_record(tmp_path, _summarise({"service": "pypi"}, CLEAN), "0.34.0", ident=ident)
        argv = [sys.executable, "-m", "vfleet", "fleet", "rollout", "--inventory", str(inv), "--image", ref,
                "--supply-store", str(tmp_path / "store"), *keys]  # fmt: skip
        env = {**os.environ, "VFLEET_PROMOTIONS": str(tmp_path / "promotions.jsonl")}  # where it was promoted
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, env=env)
        out = " ".join((proc.stdout + proc.stderr).split())
        # The gate passes it; the run stops later, at the node's preflight or pull (the served registry has a
        # manifest and no layers), which is not this test's subject.
        assert proc.returncode != 0, out[-3000:]
        assert f"verified {ref} ({DIGEST}): signed by" in out and "SBOM and materials match" in out, out[-3000:]
        assert "does not know" not in out and "stops before any node pulls the image" not in out, out[-3000:]
        assert not LOCK.exists(), "the failed run's fleet lock was not released"
