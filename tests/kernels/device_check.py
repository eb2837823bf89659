"""Run the (a) and (d) seed-kernel regressions on a real GPU (compiled Triton, no interpreter) on the
unpatched and the patched tree, and check the outcome of each: the unpatched tree must show seed 003's
corruption and the out-of-range write, the patched one neither. Needs torch + triton only.

    python tests/kernels/device_check.py BASE_TREE PATCHED_TREE [--seed003-upstream]
Exit 0 when both trees behave as expected; prints a table and one JSON line per tree.
--seed003-upstream: the base carries seed 003's fix (0001) itself (vLLM 0.34.0: #57477), so its
unpatched tree must pass (a) too; only (d), the 0004 guard, must differ between the two trees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def expectations(result: dict, fixed: bool, seed003_fixed: bool | None = None) -> list[str]:
    """Problems (empty: as expected), the same assertions as test_kpool_seed_kernel.py. SEED003_FIXED
    (default: FIXED) is whether (a) must pass on this tree."""
    bad = []
    a_fixed = fixed if seed003_fixed is None else seed003_fixed
    for case in result["padded_stride"]:
        ok = case["own_block_seeded"] and case["foreign_bytes_changed"] == 0
        if a_fixed and not ok:
            bad.append(f"(a) block {case['block']}: wrote outside its own tail block: {case}")
        if not a_fixed and (ok or case["changed_ranges"][0][0] != case["block"] * 2048):
            bad.append(f"(a) block {case['block']}: seed 003 corruption not reproduced: {case}")
    oor = result["out_of_range"]
    if fixed and oor["bytes_changed"] != 0:
        bad.append(f"(d) out-of-range tail block written: {oor}")
    if not fixed and oor["bytes_changed"] == 0:
        bad.append(f"(d) unguarded kernel wrote nothing: {oor}")
    return bad


def main() -> int:
    args = sys.argv[1:]
    upstream = "--seed003-upstream" in args
    args = [a for a in args if a != "--seed003-upstream"]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    if os.environ.get("TRITON_INTERPRET"):
        print("unset TRITON_INTERPRET: this check runs the compiled kernel on the GPU", file=sys.stderr)
        return 2
    import torch
    import triton

    if not torch.cuda.is_available():
        print("no CUDA device visible to torch", file=sys.stderr)
        return 2
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; triton {triton.__version__}")
    failed = 0
    for label, tree, fixed in (("unpatched", args[0], False), ("patched", args[1], True)):
        proc = subprocess.run(
            [sys.executable, str(HERE / "kpool_seed_probe.py"), "--tree", tree, "--device", "cuda"],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            print(f"FAIL {label} ({tree}): probe crashed\n{proc.stderr[-3000:]}")
            failed += 1
            continue
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        for case in result["padded_stride"]:
            print(
                f"{label:<9} (a) tail block {case['block']:>3}: own block seeded={case['own_block_seeded']}, "
                f"bytes changed outside it={case['foreign_bytes_changed']}, "
                f"first changed range={case['changed_ranges'][:1]}"
            )
        oor = result["out_of_range"]
        print(
            f"{label:<9} (d) tail block {oor['block']} past a {oor['view_blocks']}-block view: "
            f"bytes changed={oor['bytes_changed']}"
        )
        problems = expectations(result, fixed, True if upstream else None)
        want = "fixed" if fixed else ("(a) fixed upstream, (d) reproduced" if upstream else "bug reproduced")
        print(f"{'PASS' if not problems else 'FAIL'} {label}: expected {want}" + "".join(f"\n  {p}" for p in problems))
        print("JSON " + json.dumps(result))
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
