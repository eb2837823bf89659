"""The `docker run` lines in docs/images.md are exactly what `vfleet render` prints (the single source of truth)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import REPO

DOC = (REPO / "docs" / "images.md").read_text()
README = (REPO / "README.md").read_text()


@pytest.mark.parametrize("profile", ["glm-5.3-flash/mi355x", "glm-5.3-flash/b200", "tiny/cpu"])
def test_docs_show_the_rendered_docker_run(profile: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet", "render", profile, "--format", "docker"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    line = proc.stdout.strip()
    assert line.startswith("docker run ")
    # The line names the digest of the serve profiles it was rendered from, which changes with every
    # profile edit; the docs show it without that pair (a copied line is then not checked against a
    # checkout), and say so.
    line, pinned = re.subn(r" --env VFLEET_PROFILES_DIGEST=sha256:[0-9a-f]{64}(?= )", "", line)
    assert pinned == 1, line
    assert line in DOC, f"docs/images.md lacks the current `vfleet render {profile} --format docker` line:\n{line}"
    if profile != "tiny/cpu":
        assert line in README, f"README.md lacks the current `vfleet render {profile} --format docker` line"


def test_rocm_and_cuda_lines_carry_the_device_options() -> None:
    assert "--device /dev/kfd --device /dev/dri --group-add video --ipc=host --shm-size 64g" in DOC
    assert "--gpus all" in DOC
    assert "--env-file /etc/vfleet/secrets.env" in DOC
