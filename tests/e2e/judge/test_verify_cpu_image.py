"""`make boot-verify` against the CPU image started the way a node runs it: the `vfleet render tiny/cpu
--format docker` argv (vfleet.render.docker_run_argv, through vfleet.server.ContainerServer) with a
free host port and an env file holding VLLM_API_KEY, the key the image requires.

Runs when the image `vfleet-cpu:<vllm>-vfleet<version>` (vfleet.images.image_ref("cpu")) is built
here; tests/e2e/conftest.py builds it once per run. One container for the module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from support.verify_cli import CmdlineWatch, assert_no_leak

from vfleet import images, tinymodel
from vfleet.profiles import Catalog
from vfleet.server import ContainerServer, free_port
from vfleet.verify.client import status_of
from vfleet.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.long]  # the whole file: make test-long (tests/README.md, Long tests)
PROFILE = "tiny/cpu"


@pytest.fixture(scope="module")
def served(cpu_image: images.BuildResult) -> Iterator[ContainerServer]:
    """The CPU image this run built (tests/e2e/conftest.py), as a container."""
    server = ContainerServer(Catalog().load(PROFILE), tinymodel.build(), cpu_image.ref, health_timeout_s=420)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _inspect(kind: str, name: str) -> dict[str, Any]:
    out = subprocess.run(["docker", kind, "inspect", name], capture_output=True, text=True, check=True).stdout
    data: dict[str, Any] = json.loads(out)[0]
    return data


def make_boot_verify(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), "-o", ".venv/.vfleet-bootstrap", "boot-verify", *args],
        capture_output=True, text=True, timeout=600, check=False, env=env,
    )  # fmt: skip


def _without_key() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}


def test_make_boot_verify_with_vllm_api_key_exported(served: ContainerServer, tmp_path: Path) -> None:
    out = tmp_path / "r"
    with CmdlineWatch(served.api_key) as watch:
        proc = make_boot_verify(
            f"URL={served.url}", f"PROFILE={PROFILE}", f"CONTAINER={served.name}", f"OUT={out}",
            env={**_without_key(), "VLLM_API_KEY": served.api_key},
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["passed"] and rep["unexcused_skips"] == [] and rep["log"] == f"docker logs {served.name}"
    assert rep["api_key"] == "environment variable VLLM_API_KEY"
    img = rep["image"]
    inspected = _inspect("image", served.image)
    assert img["source"] == "container" and img["container"] == served.name and img["ref"] == served.image
    assert img["id"] == _inspect("container", served.name)["Image"] == inspected["Id"]
    assert img["repo_digests"] == sorted(inspected.get("RepoDigests") or [])
    checks = {c["name"]: c for c in rep["checks"]}
    assert checks["test_version"]["outcome"] == "passed"  # /etc/vfleet/versions.json read in the container
    assert_no_leak(served.api_key, out, proc, watch)


def test_vfleet_verify_as_the_fleet_calls_it_with_the_env_file(served: ContainerServer, tmp_path: Path) -> None:
    """`--container --docker-host --image --env-file`, no VLLM_API_KEY in the environment."""
    env_file = tmp_path / "secrets.env"
    env_file.write_text(f"# /etc/vfleet/secrets.env of the node\nHF_TOKEN=hf_unused\nVLLM_API_KEY={served.api_key}\n")
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    out = tmp_path / "r"
    with CmdlineWatch(served.api_key) as watch:
        proc = subprocess.run(
            [sys.executable, "-m", "vfleet", "verify", "--url", served.url, "--profile", PROFILE,
             "--container", served.name, "--docker-host", host, "--image", served.image, "--out", str(out),
             "--env-file", str(env_file)],
            capture_output=True, text=True, timeout=600, check=False, env=_without_key(),
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["passed"] and rep["api_key"] == f"VLLM_API_KEY from --env-file {env_file}"
    assert rep["image"]["docker_host"] == host and rep["image"]["source"] == "container"
    assert_no_leak(served.api_key, out, proc, watch)


def test_make_boot_verify_with_env_file_and_no_key_exported(served: ContainerServer, tmp_path: Path) -> None:
    env_file = tmp_path / "secrets.env"
    env_file.write_text(f"VLLM_API_KEY={served.api_key}\n")
    out = tmp_path / "r"
    proc = make_boot_verify(
        f"URL={served.url}", f"PROFILE={PROFILE}", f"CONTAINER={served.name}", f"ENV_FILE={env_file}", f"OUT={out}",
        env=_without_key(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert json.loads((out / "report.json").read_text())["passed"]


# A TCP forwarder: port 8000 of its container to ADDR:PORT (argv), one thread per direction and connection.
FORWARD = """
import socket, sys, threading
def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
server = socket.create_server(("0.0.0.0", 8000))
while True:
    conn, _ = server.accept()
    up = socket.create_connection((sys.argv[1], int(sys.argv[2])))
    for a, b in ((conn, up), (up, conn)):
        threading.Thread(target=pipe, args=(a, b), daemon=True).start()
"""


@pytest.mark.parametrize(
    ("label", "words"),
    [
        ("0.34.0", "expected vLLM 0.34.0 (the label org.vfleet.vllm.version of the image of container"),
        ("0.99.0", "org.vfleet.vllm.version=0.99.0 names a base its manifest /etc/vfleet/versions.json does not know"),
    ],
)
def test_version_is_judged_by_the_image_label_of_the_base(
    served: ContainerServer, tmp_path: Path, label: str, words: str
) -> None:
    """/version is compared with the base the container's image label names (issue 24): an image made
    from the CPU image with only its label changed (one LABEL line, no layer) says 0.34.0, a base
    versions.json knows, and fails against the 0.30.0 server; one naming an unknown base fails as
    mislabelled. A container label set by `docker run --label` is not read: the run below sets one that
    agrees with the server, and the check still fails. The container serves nothing itself (the check reads
    its image's labels and its manifest): it publishes a port and forwards it to the real server the module
    serves (FORWARD), since verify's --url must reach the container it names (issue 31)."""
    from vfleet.dockerd import docker

    tag = f"vfleet-test-version-label:{label.replace('.', '-')}"
    name = f"vfleet-test-version-label-{label.replace('.', '-')}"
    docker("rm", "-f", name, check=False)
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text(
        f"FROM {served.image}\nLABEL org.vfleet.vllm.version={label} org.vfleet.managed=true\n"
    )
    docker("build", "--quiet", "--tag", tag, str(tmp_path / "ctx"))
    try:
        served_ip = docker("inspect", "--format", "{{.NetworkSettings.IPAddress}}", served.name).stdout.strip()
        port = free_port()
        docker(
            "run", "--detach", "--name", name, "--label", "org.vfleet.managed=true", "--label",
            "org.vfleet.vllm.version=0.30.0", "--publish", f"127.0.0.1:{port}:8000", "--entrypoint", "python3",
            tag, "-c", FORWARD, served_ip, str(served.profile.port()),
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: status_of(f"{url}/health", timeout_s=2) == 200, 60, what=f"{url} to forward to {served.url}")
        out = tmp_path / "r"
        proc = subprocess.run(
            [sys.executable, "-m", "vfleet", "verify", "--url", url, "--profile", PROFILE,
             "--container", name, "--out", str(out), "-k", "test_version"],
            capture_output=True, text=True, timeout=300, check=False,
            env={**_without_key(), "VLLM_API_KEY": served.api_key},
        )  # fmt: skip
    finally:
        docker("rm", "-f", name, check=False)
        docker("rmi", tag, check=False)
    assert proc.returncode != 0, proc.stdout[-3000:]
    check = next(c for c in json.loads((out / "report.json").read_text())["checks"] if c["name"] == "test_version")
    assert check["outcome"] == "failed" and words in check["message"], check
