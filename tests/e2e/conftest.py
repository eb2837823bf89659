"""Fixtures the e2e tier shares: the CPU image, built once per run from this checkout, and the stand-in fleet.

Every test that boots the CPU image (test_image_cpu, test_demo_image, test_verify_cpu_image) takes it
from `cpu_image`, so none of them meets an image that an earlier run or another checkout left under the
same tag, and none skips because the module that used to build it runs later in the tier.

The stand-in fleet (tests/support/standin_fleet.py) is one per pytest process: test_ansible_fleet.py and
test_fleet_node_faults.py run their scenarios on it in order, in one lane of the e2e stage. (Run side by side, a
fleet each, they were no faster: the 2 cores are busy all through the stage, so a third lane only adds a fleet's
setup; benchmarks/results/2026-12-06-suite-lanes.md.)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.images import KEY, TOKEN, drop_context, make_context
from support.repo import REPO, ConfigTree
from support.standin_fleet import FIGURES, Ctx, standin_fleet

from vfleet import images
from vfleet.dockerd import ensure_dockerd

# Re-exported: pytest imports every tier's conftest.py as `conftest` (tests/support/repo.py says why).
__all__ = ["REPO", "ConfigTree", "cpu_image", "standin"]


@pytest.fixture(scope="session")
def standin() -> Iterator[Ctx]:
    """The stand-in fleet of this process; its figures go to .cache/fleet/figures.json at the end."""
    with standin_fleet(FIGURES, "figures.json") as ctx:
        yield ctx


@pytest.fixture(scope="session")
def cpu_image() -> Iterator[images.BuildResult]:
    ensure_dockerd()
    images.build_base()
    images.fetch_wheels()
    ctx = make_context(with_wheels=True)
    # Secrets lying where a careless build would pick them up: in the context and in the environment.
    (ctx / "secrets.env").write_text(f"HF_TOKEN={TOKEN}\nVLLM_API_KEY={KEY}\n")
    (ctx / "serve_configs" / ".env").write_text(f"VLLM_API_KEY={KEY}\n")
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_TOKEN", TOKEN)
    mp.setenv("VLLM_API_KEY", KEY)
    try:
        res = images.build_image("cpu", context=ctx)
    finally:
        mp.undo()
        drop_context(ctx)
    print(f"\nCPU image {res.ref} built in {res.seconds:.0f} s")
    yield res
