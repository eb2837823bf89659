"""The CPU image, from scratch: it builds, boots the tiny model with the patch set applied, serves it
behind an API key, stops on SIGTERM within seconds, and carries no secret in any layer, label or history.

Needs dockerd (started here if absent), debootstrap and the network to PyPI for the first wheel
download (`.cache/image-wheels`, reused afterwards). The image (tests/e2e/conftest.py `cpu_image`, built
once per run) is left in place as the demo image.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.images import KEY, TOKEN, dk, inspect, series_patches, stem

from vfleet import images
from vfleet.dockerd import docker_bin
from vfleet.images import ROOT
from vfleet.profiles import Catalog
from vfleet.render import DockerRun, docker_run_argv

pytestmark = [pytest.mark.slow, pytest.mark.long]  # the whole file: make test-long (tests/README.md, Long tests)
BOOT_TIMEOUT = 420


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    out = ROOT / ".cache" / "models" / "tiny"
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "vfleet"), "model", "build", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str, key: str | None = None, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body else None)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    if body:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw.strip().startswith((b"{", b"[")) else raw.decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


@contextlib.contextmanager
def boot(
    ref: str, model: Path, tmp: Path, label: str, extra: list[str] | None = None, env: dict[str, str] | None = None
) -> Iterator[dict[str, Any]]:
    """Run the image as `vfleet render tiny/cpu` prints it (this port, name and files), until /health 200; ENV
    is given after the profile's own environment, so it wins."""
    env_file = tmp / "secrets.env"
    env_file.write_text(f"HF_TOKEN={TOKEN}\nVLLM_API_KEY={KEY}\n")
    port = _free_port()
    name = f"vfleet-test-cpu-{uuid.uuid4().hex[:8]}"
    argv = docker_run_argv(
        Catalog().load("tiny/cpu"),
        DockerRun(
            image=ref,
            model_dir=str(model),
            host_port=port,
            env_file=str(env_file),
            cache_volume=None,
            name=name,
            extra_labels={"org.vfleet.test": label},
            extra_vllm_args=extra or [],
        ),
    )
    argv[0] = docker_bin()
    at = argv.index(ref)  # the image: what comes before it are docker's options, the profile's --env among them
    argv[at:at] = [f"--env={k}={v}" for k, v in (env or {}).items()]
    subprocess.run(argv, check=True, capture_output=True, text=True)
    base = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    try:
        while True:
            state = inspect_container(name)
            if not state["Running"]:
                raise AssertionError(f"the container exited ({state['ExitCode']}):\n{logs(name)[-4000:]}")
            try:
                if _get(f"{base}/health")[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() - t0 > BOOT_TIMEOUT:
                raise AssertionError(f"no /health 200 within {BOOT_TIMEOUT} s:\n{logs(name)[-4000:]}")
            time.sleep(2)
        print(f"\nCPU image ({label}): /health 200 after {time.monotonic() - t0:.0f} s")
        yield {"name": name, "base": base, "boot_s": time.monotonic() - t0}
    finally:
        dk("rm", "--force", name, check=False)


@pytest.fixture(scope="module")
def server(
    cpu_image: images.BuildResult, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The tiny profile as written (eager)."""
    with boot(cpu_image.ref, tiny_model, tmp_path_factory.mktemp("cpu-run"), "image-cpu") as srv:
        yield srv


def inspect_container(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(dk("container", "inspect", name).stdout)[0]["State"]
    return data


def logs(name: str) -> str:
    proc = dk("logs", name, check=False)
    return proc.stdout + proc.stderr


def test_serves_the_tiny_model_behind_the_api_key(server: dict[str, Any]) -> None:
    base = server["base"]
    assert _get(f"{base}/v1/models")[0] == 401, "the endpoint must require the API key"
    assert _get(f"{base}/v1/models", key="wrong-key")[0] == 401
    code, models = _get(f"{base}/v1/models", key=KEY)
    assert code == 200 and models["data"][0]["id"] == "tiny"
    code, version = _get(f"{base}/version", key=KEY)
    assert code == 200 and version["version"].startswith(images.pinned().vllm_version)
    code, out = _get(
        f"{base}/v1/completions",
        key=KEY,
        body={"model": "tiny", "prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0},
    )
    assert code == 200, out
    assert out["usage"]["completion_tokens"] > 0 and out["choices"][0]["finish_reason"] in ("length", "stop")


def test_runs_with_the_patch_set_applied(server: dict[str, Any]) -> None:
    name = server["name"]
    probe = (
        "import json; from vfleet.preflight import patch_manifest, patch_names; "
        "p, m = patch_manifest(); print(json.dumps({'path': str(p), 'names': patch_names(m or {})}))"
    )
    got = json.loads(dk("exec", name, "python3", "-c", probe).stdout)
    assert {stem(n) for n in got["names"]} == {stem(n) for n in series_patches("cpu")}, got
    text = logs(name)
    assert f"patches   {len(series_patches('cpu'))} applied" in text, "the banner must list the patches"
    assert "profile   tiny/cpu (VFLEET_PROFILE)" in text
    # exec: vLLM is PID 1, so the container's signals reach it.
    cmdline = dk("exec", name, "cat", "/proc/1/cmdline").stdout.replace("\0", " ")
    assert "vllm serve --config" in cmdline, cmdline
    assert KEY not in text and TOKEN not in text, "a secret reached the container log"


def test_stops_on_sigterm_within_seconds(server: dict[str, Any]) -> None:
    name = server["name"]
    t0 = time.monotonic()
    dk("kill", "--signal", "TERM", name)
    dk("wait", name, timeout=60)
    took = time.monotonic() - t0
    state = inspect_container(name)
    print(f"\nSIGTERM -> exit {state['ExitCode']} in {took:.1f} s")
    assert took < 20, f"took {took:.1f} s to stop on SIGTERM"
    assert state["ExitCode"] in (0, 143) and not state["OOMKilled"], state


# What the heavy layer removes (images/Dockerfile.cpu, docs/images.md "Slimming"): none of it may come back.
SLIM_PROBE = (
    "import importlib.util as u, json, sysconfig; from pathlib import Path; "
    "t = Path(sysconfig.get_path('purelib')) / 'torch'; "
    "print(json.dumps({'modules': [m for m in ('triton', 'numba', 'llvmlite') if u.find_spec(m)], "
    "'files': sorted(str(p) for p in [t / 'test', *t.glob('bin/test_*'), *t.glob('bin/*Test')] if p.exists()), "
    "'shm_manager': (t / 'bin' / 'torch_shm_manager').is_file(), "
    "'leftovers': sorted(str(p) for d in ('/tmp', '/root/.cache') for p in Path(d).rglob('*') if p.is_file()), "
    # The lab (lab/: the test fleet, fake images, stage runner) is never copied into an image.
    "'lab': sorted(str(p) for d in ('/opt/vfleet', sysconfig.get_path('purelib')) "
    "for p in Path(d).rglob('testfleet.py'))}))"
)


def test_triton_and_the_other_slimmed_parts_are_not_in_the_image(cpu_image: images.BuildResult) -> None:
    """Triton (~1 GB) and the rest stay out, and so does the lab; vLLM still imports and hands out its Triton
    placeholders."""
    ref = cpu_image.ref
    triton = dk(
        "run",
        "--rm",
        "--entrypoint",
        "python3",
        ref,
        "-c",
        "import importlib.util, sys; sys.exit(importlib.util.find_spec('triton') is not None)",
        check=False,
    )
    assert triton.returncode == 0, f"triton is back in {ref}: {triton.stdout}{triton.stderr}"
    got = json.loads(dk("run", "--rm", "--entrypoint", "python3", ref, "-c", SLIM_PROBE).stdout)
    # leftovers: what the build's checks wrote (torch.compile's kernels and precompiled header) must not stay.
    assert got == {"modules": [], "files": [], "shm_manager": True, "leftovers": [], "lab": []}, got
    probe = (
        "import vllm, vllm.triton_utils as t; "
        "print(vllm.__version__, t.HAS_TRITON, type(t.triton).__name__, type(t.tl).__name__)"
    )
    out = dk("run", "--rm", "--env", "VLLM_TARGET_DEVICE=cpu", "--entrypoint", "python3", ref, "-c", probe)
    assert out.stdout.split()[-4:] == [
        images.pinned().vllm_version,
        "False",
        "TritonPlaceholder",
        "TritonLanguagePlaceholder",
    ], out.stdout + out.stderr


def test_serves_compiled_without_triton(
    cpu_image: images.BuildResult, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`--no-enforce-eager`: torch.compile (inductor's C++ code on the CPU, no Triton) and structured output
    (xgrammar, which declares triton as a dependency) both work in the slimmed image."""
    tmp = tmp_path_factory.mktemp("cpu-compiled")
    # The profile turns TorchDynamo off (no compile on a served request: docs/boot-verify.md); compiled mode needs it.
    on = {"TORCHDYNAMO_DISABLE": "0"}
    with boot(cpu_image.ref, tiny_model, tmp, "image-cpu-compiled", ["--no-enforce-eager"], on) as srv:
        base = srv["base"]
        code, out = _get(
            f"{base}/v1/completions",
            key=KEY,
            body={"model": "tiny", "prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0},
        )
        assert code == 200 and out["usage"]["completion_tokens"] > 0, out
        code, out = _get(
            f"{base}/v1/completions",
            key=KEY,
            body={"model": "tiny", "prompt": "Number:", "max_tokens": 6, "structured_outputs": {"regex": "[0-9]{3}"}},
        )
        assert code == 200 and re.fullmatch(r"[0-9]{1,3}", out["choices"][0]["text"]), out
        text = logs(srv["name"])
    assert "enforce_eager=False" in text and "'backend': 'inductor'" in text, "the boot was not compiled"
    assert "Triton is installed" not in text


def test_a_missing_model_stops_the_container_with_a_clear_error(cpu_image: images.BuildResult) -> None:
    name = f"vfleet-test-cpu-nomodel-{uuid.uuid4().hex[:8]}"
    try:
        proc = dk(
            "run",
            "--name",
            name,
            "--label",
            "org.vfleet.managed=true",
            "--env",
            f"VLLM_API_KEY={KEY}",
            "--env",
            "VFLEET_PROFILE=tiny/cpu",
            cpu_image.ref,
            check=False,
            timeout=120,
        )
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert "model path /models/tiny does not exist in the container" in proc.stderr
    finally:
        dk("rm", "--force", name, check=False)


def _scan(stream: Any, needles: list[bytes], found: dict[bytes, list[str]], where: str) -> None:
    tail = b""
    while chunk := stream.read(8 << 20):
        buf = tail + chunk
        for n in needles:
            if n in buf and where not in found[n]:
                found[n].append(where)
        tail = buf[-64:]


def test_no_secret_in_layers_labels_or_history(cpu_image: images.BuildResult) -> None:
    ref = cpu_image.ref
    needles = [TOKEN.encode(), KEY.encode(), b"vfleet_patch_manifest.json"]
    found: dict[bytes, list[str]] = {n: [] for n in needles}
    save = subprocess.Popen([docker_bin(), "save", ref], stdout=subprocess.PIPE)
    assert save.stdout is not None
    members = 0
    with tarfile.open(fileobj=save.stdout, mode="r|") as tar:
        for member in tar:
            fh = tar.extractfile(member)
            if fh is None:
                continue
            members += 1
            _scan(fh, needles, found, member.name)
    assert save.wait() == 0
    meta = json.dumps(inspect(ref)) + dk("history", "--no-trunc", ref).stdout
    for n in needles:
        if n in meta.encode():
            found[n].append("inspect/history")
    # The scanner reads layer contents: the manifest file name is in the patched layer.
    assert found[b"vfleet_patch_manifest.json"], f"scan saw {members} members but not the manifest"
    assert not found[TOKEN.encode()], f"HF token found in {found[TOKEN.encode()]}"
    assert not found[KEY.encode()], f"API key found in {found[KEY.encode()]}"


def test_labels(cpu_image: images.BuildResult) -> None:
    labels = inspect(cpu_image.ref)["Config"]["Labels"]
    revision = labels["org.opencontainers.image.revision"]
    sha = revision.removesuffix("-dirty")
    assert re.fullmatch(r"[0-9a-f]{40}", sha), revision
    known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{sha}^{{commit}}"], check=False)
    assert known.returncode == 0, f"revision {sha} is not a commit of this checkout"
    assert labels["org.opencontainers.image.created"].endswith("Z")
    assert labels["org.opencontainers.image.version"] == images.__version__
    assert labels["org.vfleet.vllm.version"] == images.pinned().vllm_version
    assert labels["org.vfleet.patches.digest"] == images.tree_digest([ROOT / "patches"], ROOT)
    assert labels["org.vfleet.profiles.digest"] == images.tree_digest([ROOT / "serve_configs"], ROOT)
