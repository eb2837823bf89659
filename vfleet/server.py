"""Start a local vLLM server for one profile (demo and tests), like vLLM's RemoteOpenAIServer.

The server is launched with `vfleet.vllm_args.serve_argv` from the profile, with the model path, host
and port given on the command line after `--config` (vLLM: command line beats config file), and the
profile's env applied on top of the caller's environment. It runs in its own process group on a free
port; `start()` waits for `/health` within a bound and fails at once, with the log tail, if the
process exits early; `stop()` ends the whole group and any child that left it. Its output goes to a
log file, which boot-verify reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

import psutil

from vfleet.dockerd import DockerError, docker
from vfleet.errors import VfleetError
from vfleet.profiles import Profile
from vfleet.render import DockerRun, docker_run_argv
from vfleet.verify.client import status_of
from vfleet.vllm_args import ensure_vllm_dist_metadata, serve_argv, write_config
from vfleet.waiting import WaitTimeout, wait_until


class ServerError(VfleetError):
    """The vLLM server did not come up."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[psutil.Process]:
    """All live descendants of pid (children may have left the process group)."""
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


def _descendants(pid: int) -> list[int]:
    return [p.pid for p in _children(pid)]


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of PROCS still running (psutil checks that the pid was not reused) and not zombies."""
    out = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
    return out


def _health_ok(url: str, t0: float, progress: Callable[[float], None] | None) -> bool:
    """Whether URL/health answers 200; if not, PROGRESS hears the seconds since T0."""
    if status_of(f"{url}/health", timeout_s=2) == 200:
        return True
    if progress is not None:
        progress(time.monotonic() - t0)
    return False


def _log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class VllmServer:
    """One `vllm serve` process for a profile. Use as a context manager, or call start()/stop()."""

    def __init__(
        self,
        profile: Profile,
        model_path: Path,
        workdir: Path,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        health_timeout_s: float = 300.0,
    ) -> None:
        self.profile = profile
        self.model_path = Path(model_path).resolve()
        self.workdir = Path(workdir)
        self.extra_args = list(extra_args)
        self.env_overrides = dict(env or {})
        self.host = host
        self.port = port or free_port(host)
        self.health_timeout_s = health_timeout_s
        self.log_path = self.workdir / "vllm-server.log"
        self.config_path = self.workdir / "vllm-config.yaml"
        self.proc: subprocess.Popen[bytes] | None = None
        self.boot_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def argv(self) -> list[str]:
        extra = [
            "--model",
            str(self.model_path),
            "--host",
            self.host,
            "--port",
            str(self.port),
            *self.extra_args,
        ]
        argv = serve_argv(self.config_path, self.profile, extra)
        # The `vllm` script of the interpreter running vfleet (the venv's), not whatever is on PATH.
        local = Path(sys.executable).parent / "vllm"
        if local.exists():
            argv[0] = str(local)
        return argv

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.profile.env)
        env.update(self.env_overrides)
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def start(self, progress: Callable[[float], None] | None = None) -> VllmServer:
        if not self.model_path.is_dir():
            raise ServerError(f"model directory {self.model_path} does not exist; build it with `vfleet model build`")
        ensure_vllm_dist_metadata()
        self.workdir.mkdir(parents=True, exist_ok=True)
        write_config(self.profile, self.config_path)
        t0 = time.monotonic()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                cwd=self.workdir,
                start_new_session=True,
            )
        try:
            self._wait_healthy(t0, progress)
        except BaseException:
            self.stop()
            raise
        self.boot_s = time.monotonic() - t0
        return self

    def _wait_healthy(self, t0: float, progress: Callable[[float], None] | None) -> None:
        proc = self.proc
        assert proc is not None

        def healthy() -> bool:
            rc = proc.poll()
            if rc is not None:
                raise ServerError(
                    f"vLLM exited with code {rc} before /health answered (log {self.log_path}):\n"
                    f"{_log_tail(self.log_path)}"
                )
            return _health_ok(self.url, t0, progress)

        wait_until(
            healthy,
            self.health_timeout_s,
            1.0,
            f"vLLM to answer /health on {self.url}",
            state=lambda: f"log {self.log_path} ends with:\n{_log_tail(self.log_path)}",
            since=t0,
            error=ServerError,
        )

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``grace_s``, then SIGKILL every process that was
        a descendant (also those that left the group), and wait until they are gone."""
        proc = self.proc
        if proc is None:
            return
        kids = {p.pid: p for p in _children(proc.pid)}
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
        kids.update({p.pid: p for p in _children(proc.pid)})
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        for p in _alive(list(kids.values())):  # the same processes: psutil refuses a reused pid
            with contextlib.suppress(psutil.Error):
                p.kill()
        proc.wait(timeout=30)
        # Up to 15 s for the killed descendants to go; one that lingers is not stop()'s failure.
        with contextlib.suppress(WaitTimeout):
            wait_until(lambda: not _alive(list(kids.values())), 15, 0.2, "the server's processes to exit")
        self.proc = None

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class ContainerServer:
    """The same for the CPU image: `docker run` of the profile (vfleet.render.docker_run_argv) with the
    model mounted, a random API key in a temporary env file (removed once the container started), a
    free host port; the log is read with `docker logs`. stop() removes the container by its exact name."""

    def __init__(
        self,
        profile: Profile,
        model_path: Path,
        image: str,
        host: str = "127.0.0.1",
        health_timeout_s: float = 300.0,
        name_prefix: str = "vfleet-demo",
        labels: dict[str, str] | None = None,
    ) -> None:
        import secrets  # noqa: PLC0415

        self.profile = profile
        self.model_path = Path(model_path).resolve()
        self.image = image
        self.host = host
        self.port = free_port(host)
        self.health_timeout_s = health_timeout_s
        self.name = f"{name_prefix}-{secrets.token_hex(4)}"
        self.labels = labels if labels is not None else {"org.vfleet.demo": "true"}
        self._t0 = time.monotonic()
        self.api_key = f"vf-{secrets.token_hex(16)}"
        self.started = False
        self.boot_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _docker(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120, check=check)

    def start(self, progress: Callable[[float], None] | None = None) -> ContainerServer:
        """launch() then wait_healthy()."""
        self.launch()
        return self.wait_healthy(progress)

    def launch(self) -> ContainerServer:
        """`docker run` the container and return at once (several can then boot side by side)."""
        import tempfile  # noqa: PLC0415

        fd, env_path = tempfile.mkstemp(prefix="vfleet-demo-", suffix=".env")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(f"VLLM_API_KEY={self.api_key}\n")
            opts = DockerRun(
                image=self.image,
                model_dir=str(self.model_path),
                host_port=self.port,
                env_file=env_path,
                cache_volume=None,
                name=self.name,
                extra_labels=self.labels,
            )
            argv = docker_run_argv(self.profile, opts)
            # Only this host reaches it.
            argv[argv.index("--publish") + 1] = f"{self.host}:{self.port}:{self.profile.port()}"
            self._t0 = time.monotonic()
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        finally:
            os.unlink(env_path)
        if proc.returncode != 0:
            raise ServerError(f"docker run {self.image} failed: {proc.stderr.strip()[-500:]}")
        self.started = True
        return self

    def wait_healthy(self, progress: Callable[[float], None] | None = None) -> ContainerServer:
        """Wait (bounded by health_timeout_s) until /health answers 200; a container that exits first
        is an error with its last log lines. On any failure the container is removed."""
        t0 = self._t0

        def healthy() -> bool:
            if _health_ok(self.url, t0, progress):
                return True
            state = self._docker("inspect", "--format", "{{.State.Running}}", self.name).stdout.strip()
            if state != "true":
                logs = self._docker("logs", "--tail", "25", self.name)
                raise ServerError(f"container {self.name} exited before /health answered:\n{logs.stderr[-2000:]}")
            return False

        try:
            wait_until(
                healthy,
                self.health_timeout_s,
                1.0,
                f"container {self.name} to answer /health on {self.url}",
                state=lambda: "its log ends with:\n" + self._docker("logs", "--tail", "25", self.name).stderr[-2000:],
                since=t0,
                error=ServerError,
            )
        except BaseException:
            self.stop()
            raise
        self.boot_s = time.monotonic() - t0
        return self

    def save_log(self, path: Path) -> Path:
        logs = self._docker("logs", self.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(logs.stdout + logs.stderr)
        return path

    def stop(self) -> None:
        if self.started:
            self._docker("rm", "-f", self.name)
            self.started = False


def image_present(image: str) -> bool:
    """Whether docker is usable and has ``image`` locally."""
    return image_labels(image) is not None


def image_labels(image: str) -> dict[str, str] | None:
    """The labels of local ``image`` ({} when it has none); None when docker or the image is missing."""
    try:
        proc = docker("image", "inspect", "--format", "{{json .Config.Labels}}", image, check=False, timeout=30)
    except (DockerError, OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    labels = json.loads(proc.stdout or "null")
    return dict(labels) if isinstance(labels, dict) else {}
