"""Image layer sizes, the bytes a profile-only change ships, and CPU-image boot with a cold vs warm cache.

    flock /tmp/vfleet-heavy.lock .venv/bin/python benchmarks/bench_image_layers.py [--boots compiled,eager]
    flock /tmp/vfleet-heavy.lock .venv/bin/python benchmarks/bench_image_layers.py --images A,B [--rounds N]

1. Builds the CPU image (cached layers are reused) and prints every layer with its size in bytes.
2. Changes one serve profile in a copy of the build context, rebuilds, and prints which layers changed
   and their size: the bytes a fleet pulls for a profile change.
3. Boots the CPU image twice per mode on a fresh cache volume mounted at /root/.cache (the compile
   caches: Triton, AITER JIT, torch.compile) and prints the time to /health 200, cold then warm.
   Mode "compiled" passes --no-enforce-eager so that torch.compile runs (what the cache is for);
   "eager" is the tiny profile as written.

With --images, nothing is built: only step 3 runs, for each of the given (already built) images, with
their sizes; --rounds N repeats it, alternating the images, so that a busy host slows each alike.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import yaml
from support.images import dk, drop_context, inspect, make_context

from vfleet import images
from vfleet.dockerd import docker_bin, ensure_dockerd
from vfleet.images import ROOT
from vfleet.profiles import Catalog
from vfleet.render import DockerRun, docker_run_argv


def boot(ref: str, model: Path, volume: str, extra: list[str], timeout: float = 600) -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    name = f"vfleet-bench-{uuid.uuid4().hex[:8]}"
    env_file = ROOT / ".cache" / f"{name}.env"
    env_file.write_text(f"VLLM_API_KEY=bench-{uuid.uuid4().hex}\n")
    argv = docker_run_argv(
        Catalog().load("tiny/cpu"),
        DockerRun(
            image=ref,
            model_dir=str(model),
            host_port=port,
            env_file=str(env_file),
            cache_volume=volume,
            name=name,
            extra_labels={"org.vfleet.bench": "image-boot"},
            extra_vllm_args=extra,
        ),
    )
    argv[0] = docker_bin()
    t0 = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True)
    try:
        while time.monotonic() - t0 < timeout:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        return time.monotonic() - t0
            except (urllib.error.URLError, OSError):
                pass
            state = json.loads(dk("container", "inspect", name).stdout)[0]["State"]
            if not state["Running"]:
                text = dk("logs", name, check=False).stderr
                cause = [ln for ln in text.splitlines() if "Error" in ln and 'File "' not in ln]
                raise RuntimeError(f"container exited; first error lines: {cause[:3]}")
            time.sleep(1)
        raise RuntimeError(f"no /health within {timeout} s")
    finally:
        dk("rm", "--force", name, check=False)
        env_file.unlink(missing_ok=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--boots", default="compiled", help="comma list of boot modes: compiled, eager ('' for none)")
    ap.add_argument("--images", default="", help="comma list of built images: boot these only, build nothing")
    ap.add_argument("--rounds", type=int, default=1, help="with --images: boot rounds, images alternating")
    args = ap.parse_args()
    ensure_dockerd()
    modes = [m for m in args.boots.split(",") if m]
    if args.images:
        refs = [r for r in args.images.split(",") if r]
        for ref in refs:
            print(f"== {ref}: {int(inspect(ref)['Size']):,} bytes (docker image inspect .Size)")
        model = tiny_model()
        for n in range(args.rounds):
            for ref in refs:
                for mode in modes:
                    boot_pair(ref, model, mode, f"round {n + 1}, {ref}, ")
        return 0
    res = images.build_image("cpu")
    print(f"== CPU image build: {res.seconds:.0f} s (cached layers reused where inputs are unchanged)")
    print(images.layer_report(res.ref))

    # Both builds from one copy of the context, the second with one profile changed: the working tree
    # may change under a build (others edit it), the copy does not.
    ctx = make_context(with_wheels=True)
    a = f"vfleet-bench-cpu:before-{uuid.uuid4().hex[:6]}"
    b = f"vfleet-bench-cpu:profile-{uuid.uuid4().hex[:6]}"
    try:
        images.build_image("cpu", tag=a, context=ctx)
        path = ctx / "serve_configs" / "models" / "tiny" / "model.yaml"
        data = yaml.safe_load(path.read_text())
        data["vllm"]["max-num-seqs"] = int(data["vllm"].get("max-num-seqs", 32)) + 1
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        t0 = time.monotonic()
        images.build_image("cpu", tag=b, context=ctx)
        took = time.monotonic() - t0
        la, lb = inspect(a)["RootFS"]["Layers"], inspect(b)["RootFS"]["Layers"]
        changed = [i for i, (x, y) in enumerate(zip(la, lb, strict=False)) if x != y]
        rows = [r for r in images.layers(b) if r["layer"] is not None]
        shipped = sum(rows[i]["size"] for i in changed)
        total = sum(r["size"] for r in rows)
        print(
            f"== profile-only change: rebuilt in {took:.0f} s; {len(changed)} of {len(lb)} layers changed, "
            f"{shipped:,} bytes to ship of {total:,}"
        )
        for i in changed:
            print(f"   layer {i}: {rows[i]['size']:,} bytes  {' '.join(rows[i]['created_by'].split())[:80]}")
    finally:
        drop_context(ctx)
        dk("image", "rm", a, b, check=False)

    if modes:
        model = tiny_model()
        for mode in modes:
            boot_pair(res.ref, model, mode)
    return 0


def tiny_model() -> Path:
    model = ROOT / ".cache" / "models" / "tiny"
    subprocess.run(
        [sys.executable, "-m", "vfleet", "model", "build", "--out", str(model)], check=True, capture_output=True
    )
    return model


def boot_pair(ref: str, model: Path, mode: str, prefix: str = "") -> None:
    """Boot ``ref`` on a fresh cache volume (cold), then again on the same volume (warm), and print both."""
    extra = ["--no-enforce-eager"] if mode == "compiled" else []
    volume = f"vfleet-bench-cache-{uuid.uuid4().hex[:8]}"
    dk("volume", "create", "--label", "org.vfleet.managed=true", volume)
    try:
        try:
            cold = boot(ref, model, volume, extra)
        except RuntimeError as exc:
            print(f"== {prefix}boot to /health ({mode}): FAILED: {exc}")
            return
        size = dk("run", "--rm", "--entrypoint", "du", "-v", f"{volume}:/c", ref, "-sb", "/c").stdout
        warm = boot(ref, model, volume, extra)
        print(
            f"== {prefix}boot to /health ({mode}): cold cache {cold:.1f} s, warm cache {warm:.1f} s "
            f"({cold - warm:+.1f} s); cache volume {int(size.split()[0]):,} bytes",
            flush=True,
        )
    finally:
        dk("volume", "rm", volume, check=False)


if __name__ == "__main__":
    sys.exit(main())
