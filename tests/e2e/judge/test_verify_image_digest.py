"""The digest of what actually ran: `vfleet verify --container` reads the image from docker (the
container's image id, that image's RepoDigests), `--docker-host` reaches the daemon of the container,
an `--image` that names another image is refused, and `vfleet promote` resolves a tag to the registry
manifest digest (asked of the registry), not to the local image id.

Real docker and a real registry (Debian's docker-registry, the CNCF distribution registry, on a free
loopback port, installed with apt-get when missing): two small images made with `docker import`, one
pushed (it has RepoDigests) and one never pushed; one container of each (`--log-driver none`, so `docker
logs` fails and shows which daemon the suite asked), running a 129-byte static program that only waits
(pause_elf()) and publishing a loopback port that nothing answers: the --url of verify must reach the
container it names (issue 31), and one that reaches another server is refused. No vLLM server is needed:
the image is read before the suite runs. Everything made here is labelled org.vfleet.test=verify-image-digest
and removed by its exact name.
"""

from __future__ import annotations

import io
import json
import os
import platform
import secrets
import struct
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.reports import key_files, write_report

from vfleet.dockerd import ensure_dockerd
from vfleet.host import ensure_binary
from vfleet.server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.long]  # the whole file: make test-long (tests/README.md, Long tests)
LABEL = "org.vfleet.test=verify-image-digest"
DEAD_URL = "http://127.0.0.1:9"


def docker(*args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(["docker", *args], input=stdin, capture_output=True, timeout=300, check=False, env=env)
    assert proc.returncode == 0, f"docker {' '.join(args)}: {proc.stderr.decode(errors='replace')[-800:]}"
    return proc.stdout.decode()


def vfleet(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vfleet", *args], capture_output=True, text=True, timeout=300, check=False, cwd=cwd
    )


def local_docker_host() -> str:
    """The local daemon, written as a --docker-host URL."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    ensure_dockerd()
    # Installed like every package vfleet needs (one apt-get at a time on this machine, vfleet.host);
    # missing and not installable is a failure, not a skip.
    binary = ensure_binary("docker-registry", ["docker-registry"])
    work = tmp_path_factory.mktemp("registry")
    port = free_port()
    (work / "config.yml").write_text(
        f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {work / 'store'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    with (work / "registry.log").open("wb") as log:
        proc = subprocess.Popen([binary, "serve", str(work / "config.yml")], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            assert proc.poll() is None, (work / "registry.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the registry did not answer /v2/ within 30 s"
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def pause_elf() -> bytes:
    """A static x86-64 Linux program that waits for ever (pause(2) in a loop): the containers' only process,
    so they run without a base image. One ELF header, one loadable segment, 9 bytes of code."""
    assert platform.machine() == "x86_64", f"pause_elf() is x86-64 code; this machine is {platform.machine()}"
    code = bytes.fromhex("b8 22 00 00 00  0f 05  eb f7")  # mov eax, 34 (pause); syscall; jmp back
    base, size = 0x400000, 64 + 56 + len(code)
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header += struct.pack("<HHIQQQIHHHHHH", 2, 0x3E, 1, base + 64 + 56, 64, 0, 0, 64, 56, 1, 0, 0, 0)
    segment = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000)
    return header + segment + code


def _import(ref: str) -> str:
    """A small image with unique content and the waiting program /pause, made with `docker import`; returns
    its id."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = f"{ref} {secrets.token_hex(8)}\n".encode()
        info = tarfile.TarInfo("vfleet-test.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        prog = pause_elf()
        info = tarfile.TarInfo("pause")
        info.size, info.mode = len(prog), 0o755
        tar.addfile(info, io.BytesIO(prog))
    docker("import", "--change", f"LABEL {LABEL}", "-", ref, stdin=buf.getvalue())
    return docker("image", "inspect", "--format", "{{.Id}}", ref).strip()


@dataclass
class Made:
    registry: str
    repo: str  # the pushed image's repository
    pushed: str  # REPO:TAG, pushed
    pushed_id: str
    digest: str  # its registry manifest digest
    local: str  # REPO:TAG, never pushed
    local_id: str
    c_pushed: str  # containers (running /pause)
    c_local: str
    url_pushed: str  # the loopback URL each container publishes (nothing answers there)
    url_local: str


@pytest.fixture(scope="module")
def made(registry: str) -> Iterator[Made]:
    tag = secrets.token_hex(4)
    repo = f"{registry}/vfleet-verify-test"
    pushed, local = f"{repo}:{tag}", f"vfleet-verify-test-local:{tag}"
    c_pushed, c_local = f"vfleet-verify-test-{tag}-pushed", f"vfleet-verify-test-{tag}-local"
    refs: list[str] = []
    names: list[str] = []
    try:
        pushed_id = _import(pushed)
        refs.append(pushed)
        local_id = _import(local)
        refs.append(local)
        docker("push", pushed)
        repo_digests = json.loads(docker("image", "inspect", "--format", "{{json .RepoDigests}}", pushed))
        assert repo_digests and repo_digests[0].startswith(f"{repo}@sha256:"), repo_digests
        urls = []
        for name, ref in ((c_pushed, pushed), (c_local, local)):
            port = free_port()
            docker("run", "--detach", "--name", name, "--label", LABEL, "--log-driver", "none",
                   "--publish", f"127.0.0.1:{port}:8000", ref, "/pause")  # fmt: skip
            names.append(name)
            urls.append(f"http://127.0.0.1:{port}")
        yield Made(
            registry=registry, repo=repo, pushed=pushed, pushed_id=pushed_id, digest=repo_digests[0].split("@")[1],
            local=local, local_id=local_id, c_pushed=c_pushed, c_local=c_local, url_pushed=urls[0], url_local=urls[1],
        )  # fmt: skip
    finally:
        for name in names:
            subprocess.run(["docker", "rm", "--force", name], capture_output=True, check=False, timeout=120)
        for ref in refs:
            subprocess.run(["docker", "image", "rm", ref], capture_output=True, check=False, timeout=120)


def _report(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "report.json").read_text())
    return data


def test_verify_records_the_image_the_container_runs(made: Made, tmp_path: Path) -> None:
    host = local_docker_host()
    out = tmp_path / "r"
    proc = vfleet(
        "verify", "--url", made.url_pushed, "--profile", "tiny/cpu", "--container", made.c_pushed,
        "--docker-host", host, "-k", "test_log", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr  # the log cannot be read: the gate fails
    img = _report(out)["image"]
    assert img == {
        "ref": made.pushed,  # what the container was started as
        "id": made.pushed_id,
        "digest": made.digest,
        "repo_digests": [f"{made.repo}@{made.digest}"],
        "source": "container",
        "reason": f"read from container {made.c_pushed}: RepoDigests entry of {made.repo}",
        "container": made.c_pushed,
        "docker_host": host,
    }
    assert made.digest != made.pushed_id  # a registry digest, not the local image id
    # The suite's own docker calls (docker logs) went to the same daemon.
    faults = next(c for c in _report(out)["checks"] if c["name"] == "test_log[faults]")
    assert f"expected `docker logs {made.c_pushed}` (DOCKER_HOST={host}) to work" in faults["message"], faults
    # The operator may name the same image by digest or by tag.
    for ref in (f"{made.repo}@{made.digest}", made.pushed):
        again = tmp_path / f"r-{len(list(tmp_path.iterdir()))}"
        proc = vfleet(
            "verify", "--url", made.url_pushed, "--profile", "tiny/cpu", "--container", made.c_pushed,
            "--image", ref, "-k", "test_health", "--out", str(again),
        )  # fmt: skip
        assert proc.returncode == 1, proc.stderr
        img = _report(again)["image"]
        assert (img["ref"], img["digest"], img["id"]) == (ref, made.digest, made.pushed_id)


def test_an_image_never_pushed_has_no_registry_digest(made: Made, tmp_path: Path) -> None:
    out = tmp_path / "r"
    proc = vfleet(
        "verify", "--url", made.url_local, "--profile", "tiny/cpu", "--container", made.c_local,
        "-k", "test_health", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    img = _report(out)["image"]
    assert img["id"] == made.local_id and img["repo_digests"] == [] and img["digest"] is None
    assert "never pushed to or pulled from a registry" in img["reason"] and "REPO@sha256:DIGEST" in img["reason"]


@pytest.mark.parametrize("case", ["other-digest", "other-tag", "pushed-tag-on-local"])
def test_an_image_reference_that_disagrees_with_the_container_is_refused(made: Made, tmp_path: Path, case: str) -> None:
    container, ref, words = {
        "other-digest": (made.c_pushed, f"{made.repo}@sha256:{'0' * 64}", [made.pushed_id, made.digest]),
        "other-tag": (made.c_pushed, made.local, [made.local_id, made.pushed_id]),
        "pushed-tag-on-local": (made.c_local, made.pushed, [made.pushed_id, made.local_id]),
    }[case]
    out = tmp_path / "r"
    proc = vfleet("verify", "--url", DEAD_URL, "--profile", "tiny/cpu", "--container", container, "--image", ref,
                  "--out", str(out))  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr
    assert f"--image {ref} is not what container {container} runs" in proc.stderr, proc.stderr
    for w in words:
        assert w in proc.stderr, (w, proc.stderr)
    assert not out.exists()  # refused before anything ran


def test_a_url_that_reaches_another_server_is_refused_naming_both(made: Made, tmp_path: Path) -> None:
    """The report attests the container's image and reads its log, so its traffic must go to it (issue 31):
    --url at another live server (this module's registry answers there) or at the other container's port is
    refused before any traffic, naming the URL, the container, what it publishes and the fix; so is a
    container that is not running."""
    for url in (f"http://{made.registry}", made.url_local):
        out = tmp_path / f"r-{len(list(tmp_path.iterdir()))}"
        proc = vfleet("verify", "--url", url, "--profile", "tiny/cpu", "--container", made.c_pushed,
                      "--docker-host", local_docker_host(), "--out", str(out))  # fmt: skip
        assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr
        assert f"--url {url} does not reach --container {made.c_pushed}" in proc.stderr, proc.stderr
        assert "is not a port the container publishes" in proc.stderr, proc.stderr
        assert f"127.0.0.1:{made.url_pushed.rsplit(':', 1)[1]}->8000/tcp" in proc.stderr, proc.stderr
        assert f"docker port {made.c_pushed}" in proc.stderr, proc.stderr  # the fix
        assert not out.exists()  # refused before anything ran
    # the same container, stopped: nothing it runs answers at its URL any more
    docker("stop", "--time", "1", made.c_local)
    try:
        out = tmp_path / "stopped"
        proc = vfleet("verify", "--url", made.url_local, "--profile", "tiny/cpu", "--container", made.c_local,
                      "--out", str(out))  # fmt: skip
        assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr
        assert f"--url {made.url_local} does not reach --container {made.c_local}" in proc.stderr, proc.stderr
        assert "the container is not running (exited)" in proc.stderr, proc.stderr
        assert not out.exists()
    finally:
        docker("start", made.c_local)


def test_docker_host_is_the_daemon_asked(made: Made, tmp_path: Path) -> None:
    nowhere = f"tcp://127.0.0.1:{free_port()}"
    out = tmp_path / "r"
    proc = vfleet("verify", "--url", DEAD_URL, "--profile", "tiny/cpu", "--container", made.c_pushed,
                  "--docker-host", nowhere, "--out", str(out))  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr
    assert f"`docker container inspect {made.c_pushed}` (DOCKER_HOST={nowhere}) failed" in proc.stderr, proc.stderr
    assert not out.exists()


def test_promote_resolves_a_tag_to_its_registry_digest(made: Made, tmp_path: Path) -> None:
    """A report recorded with the registry digest (as `verify --container` records it) is found when
    the operator promotes by tag; an image that was never pushed cannot be promoted by tag."""
    rdir = write_report(tmp_path / "reports", digest=made.digest, source="container")
    reg = tmp_path / "promotions.jsonl"
    trust = ["--trusted-key", f"verify={key_files()[1]}"]  # the key write_report signs the summary with
    ok = vfleet("promote", made.pushed, "--profile", "tiny/cpu", "--report", str(rdir), "--registry", str(reg), *trust)
    assert ok.returncode == 0, ok.stderr
    entry = json.loads(reg.read_text().splitlines()[-1])
    assert entry["digest"] == made.digest and entry["image"] == made.pushed
    for ref in (made.pushed, f"{made.repo}@{made.digest}"):
        check = vfleet("promote", "--check", ref, "--profile", "tiny/cpu", "--registry", str(reg), *trust)
        assert check.returncode == 0, check.stdout
    refused = vfleet(
        "promote", made.local, "--profile", "tiny/cpu", "--report", str(rdir), "--registry", str(reg), *trust
    )
    assert refused.returncode == 2, refused.stderr
    assert f"cannot find the registry digest of {made.local}" in refused.stderr
    assert "names no registry" in refused.stderr and "REGISTRY/REPO@sha256:DIGEST" in refused.stderr
    check = vfleet("promote", "--check", made.local, "--profile", "tiny/cpu", "--registry", str(reg), *trust)
    assert check.returncode == 1 and "not promoted: cannot find the registry digest" in check.stdout


def test_env_file_is_read_as_docker_reads_it(made: Made, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vfleet's reader of the node's env file against docker's own (`docker create --env-file`)."""
    from vfleet.verify import apikey

    env_file = tmp_path / "secrets.env"
    env_file.write_bytes(
        b'\xef\xbb\xbfHF_TOKEN=hf_x\r\n# VLLM_API_KEY=commented\n\n   QUOTED="a b"\n\tEQ=a=b \n'
        b"PASSED\nUNSET_HERE\nVLLM_API_KEY=first\nVLLM_API_KEY= 'second' \n"
    )
    monkeypatch.setenv("PASSED", "from the environment")
    monkeypatch.delenv("UNSET_HERE", raising=False)
    name = f"vfleet-verify-test-env-{secrets.token_hex(4)}"
    try:
        docker("create", "--name", name, "--label", LABEL, "--env-file", str(env_file), made.local, "/not-started",
               env=dict(os.environ))  # fmt: skip
        seen = json.loads(docker("container", "inspect", "--format", "{{json .Config.Env}}", name)) or []
    finally:
        subprocess.run(["docker", "rm", "--force", name], capture_output=True, check=False, timeout=120)
    by_docker: dict[str, str] = {}
    for item in seen:
        key, _, value = item.partition("=")
        by_docker[key] = value  # docker keeps every line; the container sees the last one
    by_docker.pop("PATH", None)  # docker's default for an image without ENV
    assert apikey.parse_env_file(env_file) == by_docker
    assert by_docker["VLLM_API_KEY"] == " 'second' "


def test_ab_reads_each_arms_digest_from_its_container(made: Made, tmp_path: Path) -> None:
    """`vfleet ab --container-a/-b` reads each arm's digest as `vfleet verify --container` does: a typed
    --image-a naming another image is an error, the same image on both arms and an arm with no registry
    digest are refused for a promotion A/B, and --docker-host-b is the daemon asked for arm B. All
    refused before any arm is probed (the URLs point nowhere)."""
    host = local_docker_host()
    a, b = DEAD_URL, f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "r"
    other = f"{made.repo}@sha256:{'0' * 64}"
    proc = vfleet("ab", "--a", a, "--b", b, "--container-a", made.c_pushed, "--docker-host-a", host,
                  "--image-a", other, "--container-b", made.c_pushed, "--out", str(out))  # fmt: skip
    assert proc.returncode == 2 and f"--image {other} is not what container {made.c_pushed} runs" in proc.stderr
    promo = ["ab", "--promotion", "--profile", "tiny/cpu", "--a", a, "--b", b, "--out", str(out)]
    proc = vfleet(*promo, "--container-a", made.c_pushed, "--container-b", made.c_pushed)
    assert proc.returncode == 2 and f"both arms run {made.digest}" in proc.stderr, proc.stderr
    proc = vfleet(*promo, "--container-a", made.c_pushed, "--container-b", made.c_local)
    assert (
        proc.returncode == 2 and "arm B's digest None: its container's image has no registry digest" in proc.stderr
    ), proc.stderr
    nowhere = f"tcp://127.0.0.1:{free_port()}"
    proc = vfleet(*promo, "--container-a", made.c_pushed, "--container-b", made.c_local, "--docker-host-b", nowhere)
    assert proc.returncode == 2 and f"(DOCKER_HOST={nowhere}) failed" in proc.stderr, proc.stderr
    # Issue 31: an arm's URL must reach the container whose image the summary names, as for verify.
    proc = vfleet("ab", "--a", a, "--b", made.url_local, "--container-a", made.c_pushed, "--container-b", made.c_local,
                  "--out", str(out))  # fmt: skip
    assert proc.returncode == 2 and a in proc.stderr and made.c_pushed in proc.stderr, proc.stderr
    assert made.c_local not in proc.stderr, "arm B's URL is published by its container: only arm A is refused"
    assert not out.exists()  # refused before anything ran
