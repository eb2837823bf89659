"""`vfleet verify`: run smoke_tests/ with pytest against a server and write the report."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfleet.errors import VfleetError
from vfleet.paths import home, reports_dir
from vfleet.profiles import Catalog
from vfleet.verify import apikey
from vfleet.verify import image as image_mod
from vfleet.verify import report as report_mod

DOCKER_HOST_RE = re.compile(r"^(tcp|ssh|unix|npipe|fd)://\S+$")


def smoke_tests_dir() -> Path:
    path = home() / "smoke_tests"
    if not (path / "conftest.py").is_file():
        raise VfleetError(f"{path}: the boot-verify suite is missing; run from a vfleet checkout or image")
    return path


@dataclass
class VerifyResult:
    rc: int
    out: Path
    report: dict[str, Any]


def default_out(profile: str) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return reports_dir() / f"verify-{profile.replace('/', '-')}-{stamp}"


def run(
    url: str,
    profile: str,
    out: Path,
    api_key_env: str | None = None,
    model: str | None = None,
    log: Path | None = None,
    container: str | None = None,
    image: str | None = None,
    select: str | None = None,
    on_line: Callable[[str], None] | None = print,
    env_file: Path | None = None,
    docker_host: str | None = None,
) -> VerifyResult:
    """Run the suite; each line of pytest's output goes to ``on_line`` and to DIR/pytest-output.txt.

    Bad input (VfleetError, exit 2) is found before anything is written: the profile, the log, the URL,
    the API key source, the report directory, and the image (with ``container``: read from docker on
    ``docker_host``, and an ``image`` reference that names another image is refused)."""
    prof = Catalog().load(profile)  # a bad profile name is a clear error here, not a pytest crash
    if log is not None and not log.is_file():
        raise VfleetError(f"--log {log}: no such file; pass the server's log file or use --container NAME")
    if log is not None and container is not None:
        raise VfleetError("give the log either as --log FILE or as --container NAME, not both")
    if not re.match(r"^https?://", url):
        raise VfleetError(f"--url {url!r}: expected http://HOST:PORT")
    if docker_host is not None and not DOCKER_HOST_RE.match(docker_host):
        raise VfleetError(f"--docker-host {docker_host!r}: expected tcp://HOST:PORT, ssh://USER@HOST or unix:///PATH")
    key = apikey.resolve(api_key_env, env_file)
    out = out.resolve()
    if (out / "report.json").exists():
        raise VfleetError(f"{out} already holds a report; pass another --out")
    if container:
        record = image_mod.from_container(container, docker_host, image)
    elif image:
        record = image_mod.from_reference(image, docker_host)
    else:
        record = image_mod.ImageRecord(ref=None, reason="no --image or --container given")
    out.mkdir(parents=True, exist_ok=True)
    suite = smoke_tests_dir()
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(suite),
        "-p",
        "no:cacheprovider",
        "-v",
        "--tb=line",
        "-rfs",
        "--color=no",
        f"--rootdir={suite}",
        "-c",
        str(suite / "pytest.ini"),
        f"--junitxml={out / 'report.xml'}",
        "--vf-url",
        url,
        "--vf-profile",
        profile,
        "--vf-out",
        str(out),
    ]
    # Every docker call of the suite (docker logs, docker exec for versions.json and GPU health) goes to
    # the same daemon as the image lookup above.
    env = image_mod.docker_env(docker_host)
    env.pop(apikey.KEY_ENV, None)
    if key.value:
        env[apikey.KEY_ENV] = key.value  # through the environment: never on a command line
        cmd += ["--vf-api-key-env", apikey.KEY_ENV]
    if model:
        cmd += ["--vf-model", model]
    if log is not None:
        cmd += ["--vf-log", str(log.resolve())]
    if container:
        cmd += ["--vf-container", container]
    if select:
        cmd += ["-k", select]
    started = time.time()
    t0 = time.monotonic()
    with (
        (out / "pytest-output.txt").open("w") as outfile,
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc,
    ):
        assert proc.stdout is not None
        for line in proc.stdout:
            outfile.write(line)
            if on_line is not None:
                on_line(line.rstrip("\n"))
    wall = time.monotonic() - t0
    results_path = out / "results.json"
    if not results_path.is_file():
        raise VfleetError(f"the suite exited {proc.returncode} without results; see {out / 'pytest-output.txt'}")
    results = json.loads(results_path.read_text())
    figures = json.loads((out / "figures.json").read_text())
    log_source = str(log) if log else (f"docker logs {container}" if container else None)
    meta = {
        "profile": profile,
        "production": prof.production,
        "url": url,
        "served_model": model or prof.served_model_name(),
        "image": record.as_dict(),
        "api_key": key.source,
        "docker_host": docker_host,
        "log": log_source,
        "selected": select,
        "started": dt.datetime.fromtimestamp(started, dt.UTC).isoformat(),
        "wall_s": round(wall, 2),
    }
    rep = report_mod.build(results, figures, meta, not_applicable=prof.verify.not_applicable)
    rep["partial"] = bool(select)  # a partial run (-k) never supports a promotion
    report_mod.write(rep, out)
    rc = 0 if rep["passed"] else 1
    return VerifyResult(rc=rc, out=out, report=rep)
