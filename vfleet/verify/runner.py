"""`vfleet verify`: run smoke_tests/ with pytest against a server and write the report."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfleet.errors import VfleetError
from vfleet.paths import home
from vfleet.profiles import Catalog
from vfleet.verify import report as report_mod

DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")


def image_digest(ref: str) -> tuple[str | None, str]:
    """(digest, how) for an image reference: taken from the reference when it holds one, else from
    `docker image inspect` when docker is present."""
    m = DIGEST_RE.search(ref)
    if m and (ref.startswith("sha256:") or "@sha256:" in ref):
        return m.group(0), "from the reference"
    if shutil.which("docker") is None:
        return None, "docker is not installed; pass the image as NAME@sha256:... to record its digest"
    proc = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", ref],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        return None, f"docker image inspect {ref} failed: {proc.stderr.strip()[:200]}"
    return proc.stdout.strip(), "docker image inspect"


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
    return Path("reports") / f"verify-{profile.replace('/', '-')}-{stamp}"


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
) -> VerifyResult:
    """Run the suite; each line of pytest's output goes to ``on_line`` and to DIR/pytest-output.txt."""
    Catalog().load(profile)  # a bad profile name is a clear error here, not a pytest crash
    if log is not None and not log.is_file():
        raise VfleetError(f"--log {log}: no such file; pass the server's log file or use --container NAME")
    if log is not None and container is not None:
        raise VfleetError("give the log either as --log FILE or as --container NAME, not both")
    if not re.match(r"^https?://", url):
        raise VfleetError(f"--url {url!r}: expected http://HOST:PORT")
    out = out.resolve()
    if (out / "report.json").exists():
        raise VfleetError(f"{out} already holds a report; pass another --out")
    out.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(smoke_tests_dir()),
        "-p",
        "no:cacheprovider",
        "-v",
        "--tb=line",
        "-rfs",
        "--color=no",
        f"--rootdir={smoke_tests_dir()}",
        "-c",
        str(smoke_tests_dir() / "pytest.ini"),
        f"--junitxml={out / 'report.xml'}",
        "--vf-url",
        url,
        "--vf-profile",
        profile,
        "--vf-out",
        str(out),
    ]
    if api_key_env:
        cmd += ["--vf-api-key-env", api_key_env]
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
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc,
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
    digest, how = image_digest(image) if image else (None, "no --image given")
    meta = {
        "profile": profile,
        "url": url,
        "served_model": model or Catalog().load(profile).served_model_name(),
        "image": {"ref": image, "digest": digest, "digest_source": how},
        "log": str(log) if log else (f"docker logs {container}" if container else None),
        "selected": select,
        "started": dt.datetime.fromtimestamp(started, dt.UTC).isoformat(),
        "wall_s": round(wall, 2),
    }
    rep = report_mod.build(results, figures, meta)
    rep["partial"] = bool(select)  # a partial run (-k) never supports a promotion
    report_mod.write(rep, out)
    rc = 0 if rep["passed"] else 1
    return VerifyResult(rc=rc, out=out, report=rep)
