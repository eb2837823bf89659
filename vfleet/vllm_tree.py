"""Every profile's `vllm serve` line through the serve parser of a vLLM tree (a pinned wheel's, or the vLLM
this Python has), in a child Python: what `vfleet check --parsers` runs against each base. The parse itself,
and the comparison with what the profile means, are vfleet.vllm_args's; this module starts the child."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from vfleet.errors import VfleetError
from vfleet.profiles import Profile
from vfleet.vllm_args import build_vllm_serve_parser, mismatches, serve_argv, write_config

#: The line of the child's stdout that carries its answer (vLLM's loggers write to stdout too).
_ANSWER = "vfleet-parse-answer "


def _child() -> int:
    """`python -m vfleet.vllm_tree`: parse each profile's `vllm serve` line (stdin JSON: name -> {argv,
    intended}) with the vLLM this Python imports; print name -> problems on the answer line."""
    jobs = json.load(sys.stdin)
    parser = build_vllm_serve_parser()
    answer: dict[str, Any] = {"vllm": str(Path(sys.modules["vllm"].__file__ or "?").parent), "profiles": {}}
    for name, job in jobs.items():
        try:
            ns = parser.parse_args(job["argv"])
        except SystemExit:
            answer["profiles"][name] = ["vLLM's parser refused the line (its message is above)"]
            continue
        answer["profiles"][name] = mismatches(job["intended"], ns)
    print(_ANSWER + json.dumps(answer), flush=True)
    return 0


def parse_with_tree(profiles: list[Profile], workdir: Path, tree: Path | None = None) -> dict[str, list[str]]:
    """Every profile's `vllm serve` line through the serve parser of the vLLM tree TREE (a directory
    holding vllm/, e.g. a pinned wheel's tree from `vfleet patches fetch-base`; None: the vLLM this Python
    has), in a child Python. Returns name -> what did not come out as the profile means (empty: all did).
    Raises VfleetError when the parser cannot be built there."""
    jobs = {}
    for profile in profiles:
        cfg = write_config(profile, workdir / f"{profile.name.replace('/', '_')}.yaml")
        jobs[profile.name] = {"argv": serve_argv(cfg, profile)[1:], "intended": profile.vllm}
    env = dict(os.environ)
    package_parent = str(Path(__file__).resolve().parent.parent)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(tree), package_parent])
    proc = subprocess.run(
        [sys.executable, "-m", "vfleet.vllm_tree"],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        env=env,
        check=False,
        cwd=workdir,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(_ANSWER)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip() or proc.stdout.strip())[-1500:]
        raise VfleetError(f"cannot build vLLM's serve parser from {tree or 'this Python'}: {tail}")
    answer = json.loads(lines[-1][len(_ANSWER) :])
    if tree is not None and not Path(answer["vllm"]).resolve().is_relative_to(tree.resolve()):
        raise VfleetError(f"the child imported vLLM from {answer['vllm']}, not from {tree}")
    return {name: list(problems) for name, problems in answer["profiles"].items()}


if __name__ == "__main__":
    sys.exit(_child())
