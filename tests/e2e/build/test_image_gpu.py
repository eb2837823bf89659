"""Dockerfile.cuda and Dockerfile.rocm, built for real against a local stand-in of the pinned vLLM images,
on every vLLM base of versions.json (0.30.0 and 0.34.0).

A base's stand-in (`vfleet image standin --base V`) holds the real Python tree of that base's pinned wheel
in /usr/local/lib/python3.12/dist-packages/vllm, so the patch step runs on the real tree; the steps that
need torch or a GPU (the import check, `vllm download-kernels`) are skipped with a notice. Needs dockerd
(started here if absent).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.images import dk, drop_context, inspect, make_context, remove_images, series_patches, stem

from vfleet import images
from vfleet.dockerd import ensure_dockerd

pytestmark = [pytest.mark.slow, pytest.mark.long]  # the whole file: make test-long (tests/README.md, Long tests)
SITE = "/usr/local/lib/python3.12/dist-packages"


BASES = list(images.pinned().bases)


@pytest.fixture(scope="module")
def standin() -> str:
    ensure_dockerd()
    return images.build_standin()


@pytest.fixture(scope="module", params=BASES)
def base_standin(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(vLLM base, its stand-in), each base once for this module."""
    ensure_dockerd()
    return request.param, images.build_standin(version=request.param)


@pytest.fixture
def context() -> Iterator[Path]:
    ctx = make_context(with_wheels=False)
    yield ctx
    drop_context(ctx)


def _unique_build(context: Path) -> None:
    """Give this context's first copied file a unique comment: every step after the base runs anew,
    and its cache records are this test's alone (a warm builder may hold several for the same key)."""
    steps = context / "images" / "steps.sh"
    steps.write_text(steps.read_text() + f"# vfleet-test build {uuid.uuid4().hex}\n")


@pytest.mark.parametrize("family", ["cuda", "rocm"])
def test_gpu_image_builds_on_the_standin(base_standin: tuple[str, str], context: Path, family: str) -> None:
    base, standin = base_standin
    ref = f"vfleet-test-{family}:standin-{base}"
    try:
        _unique_build(context)  # the patch step must run here, not be replayed from an earlier build
        res = images.build_image(family, base=standin, tag=ref, context=context, vllm_version=base)
        out = res.output
        # The patch step found vLLM by asking Python, in the real image's layout, and took the base's series.
        assert f"Python reports vLLM in {SITE}; applying the patch set of vLLM {base} for {family}" in out, out[-3000:]
        assert "NOTICE: no torch in this base (a stand-in?): skipped the import check" in out
        assert "NOTICE: no GPU at build time" in out
        # `vllm download-kernels` where the base has it (0.34), and said so where it has not (0.30).
        kernels_cli = f"{SITE}/vllm/entrypoints/cli/download_kernels.py"
        has = dk("run", "--rm", "--entrypoint", "test", ref, "-f", kernels_cli, check=False)
        if has.returncode == 0:
            assert f"skipped `vllm download-kernels` of vLLM {base}" in out, out[-3000:]
        else:
            assert f"vLLM {base} has no `vllm download-kernels`" in out, out[-3000:]
        manifest = json.loads(
            dk("run", "--rm", "--entrypoint", "cat", ref, f"{SITE}/vllm/vfleet_patch_manifest.json").stdout
        )
        from vfleet.preflight import patch_names

        listed = {stem(n) for n in patch_names(manifest)}
        assert manifest["base_version"] == base
        assert listed == {stem(n) for n in series_patches(family, base)}, "the manifest must list the base's series"
        labels = inspect(ref)["Config"]["Labels"]
        assert labels["org.vfleet.family"] == family
        assert labels["org.vfleet.vllm.version"] == base
        assert f"VFLEET_VLLM_BASE={base}" in inspect(ref)["Config"]["Env"]
        # The profiles inside load with the base's layer: 0.34 leaves gpu-memory-utilization unset.
        gmu = dk(
            "run",
            "--rm",
            "--entrypoint",
            "python3",
            ref,
            "-c",
            "from vfleet.profiles import Catalog; print(Catalog().load('glm-5.3-flash/h200').vllm"
            ".get('gpu-memory-utilization', 'unset'))",
        ).stdout.strip()
        assert gmu == ("0.9" if base == images.pinned().vllm_version else "unset"), gmu
        for key in ("source", "revision", "created", "version"):
            assert labels[f"org.opencontainers.image.{key}"] not in ("", "unknown"), key
        assert labels["org.vfleet.patches.digest"].startswith("sha256:")
        assert labels["org.vfleet.profiles.digest"].startswith("sha256:")
        cfg = inspect(ref)["Config"]
        assert cfg["Entrypoint"] == ["vfleet", "serve", "--"]
        # Profiles and pins are baked in.
        ls = dk("run", "--rm", "--entrypoint", "vfleet", ref, "profiles").stdout
        assert "glm-5.3-flash/" in ls
    finally:
        remove_images(ref)


def step_cached(output: str, needle: str) -> bool:
    """In BuildKit's plain progress output, whether the step whose line contains ``needle`` was CACHED."""
    for line in output.splitlines():
        m = re.match(r"#(\d+) \[.*\] (.*)", line)
        if m and needle in m.group(2):
            return f"#{m.group(1)} CACHED" in output
    raise AssertionError(f"no build step contains {needle!r}")


def _break_first_hunk(patch: Path) -> None:
    """Change one context line of the first hunk: the patch no longer applies without fuzz."""
    lines = patch.read_text().splitlines(keepends=True)
    in_hunk = False
    for i, line in enumerate(lines):
        if line.startswith("@@"):
            in_hunk = True
            continue
        if in_hunk and line.startswith(" ") and line.strip():
            lines[i] = " " + line[1:].rstrip("\n") + "  # vfleet-test: this line is not in vLLM 0.30.0\n"
            patch.write_text("".join(lines))
            return
    raise AssertionError(f"{patch} has no context line to break")


def test_a_broken_patch_fails_the_build_naming_the_patch(standin: str, context: Path) -> None:
    victim = series_patches("cuda")[0]
    _break_first_hunk(context / "patches" / victim)
    ref = "vfleet-test-cuda:broken"
    try:
        with pytest.raises(images.BuildFailed) as err:
            images.build_image("cuda", base=standin, tag=ref, context=context)
        out = err.value.output
        assert stem(victim) in out, f"the build output does not name the broken patch {victim}"
        assert "the patch set did not apply" in out
        assert dk("image", "inspect", ref, check=False).returncode != 0, "a failed build must leave no image"
    finally:
        remove_images(ref)


def test_profile_only_change_rebuilds_one_thin_layer(standin: str, context: Path) -> None:
    a, b = "vfleet-test-cuda:profiles-a", "vfleet-test-cuda:profiles-b"
    # Build A afresh so that B can reuse only A's layers, not those of an earlier build of another context.
    _unique_build(context)
    try:
        images.build_image("cuda", base=standin, tag=a, context=context)
        path = context / "serve_configs" / "models" / "glm-5.3-flash" / "h200.yaml"
        data = yaml.safe_load(path.read_text()) or {}
        data.setdefault("vllm", {})["max-num-seqs"] = 96
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        res = images.build_image("cuda", base=standin, tag=b, context=context)
        layers_a = inspect(a)["RootFS"]["Layers"]
        layers_b = inspect(b)["RootFS"]["Layers"]
        assert len(layers_a) == len(layers_b)
        changed = [i for i, (x, y) in enumerate(zip(layers_a, layers_b, strict=True)) if x != y]
        assert changed == [len(layers_a) - 1], f"layers {changed} changed; only the top one may"
        for needle in ("steps.sh install-vfleet", "vfleet patches apply --platform cuda"):
            assert step_cached(res.output, needle), f"the step `{needle}` was rebuilt for a profile change"
        assert (
            inspect(a)["Config"]["Labels"]["org.vfleet.profiles.digest"]
            != inspect(b)["Config"]["Labels"]["org.vfleet.profiles.digest"]
        )
        top = [r for r in images.layers(b) if r["layer"] is not None][-1]
        print(f"\nprofile-only change: 1 layer rebuilt, {top['size']:,} bytes ({top['created_by'][:60]})")
        assert top["size"] < 1_000_000, "the profile layer must be thin"
    finally:
        remove_images(a, b)
