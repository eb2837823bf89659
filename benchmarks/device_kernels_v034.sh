#!/usr/bin/env bash
# 0004's kernel regression on a GPU for the vLLM 0.34.0 base (issue 24, item 2): the NVIDIA kpool seed
# kernel of the unpatched and the patched 0.34.0 tree, compiled by the machine's triton and run on its GPU
# (tests/kernels/run_on_device.sh --seed003-upstream: (a) must pass on both trees, since 0.34.0 carries
# 0001's fix; (d), the 0004 guard, must fail unpatched and pass patched).
#
# Prepare here (CPU machine), once: the 0.34.0 wheel tree's Python (from `vfleet patches fetch-base
# --version 0.34.0 --dist vllm`, sha256-checked), packed (8 MB) to carry:
#   mkdir -p .cache/v034 && (cd .cache/base/vllm-0.34.0 && find vllm -name '*.py' -o -name '*.json' \
#     | tar -cf - -T - | xz -T1 -6) > .cache/v034/v034py.tar.xz
# The kernel's module imports more of vLLM (vllm.utils.deep_gemm -> model_executor, distributed,
# platforms), so vLLM's Python dependencies come from benchmarks/h200_verify.sh's staging (/tmp/site).
# On the device, back to back:
#   run(command="bash benchmarks/h200_verify.sh stage", carry=[".cache/h200v/p1"])      # and p2, p3
#   run(command="bash benchmarks/h200_verify.sh setup >$OUT/setup.txt 2>&1; bash benchmarks/device_kernels_v034.sh",
#       carry=[".cache/v034"], timeout_s=600)
#
# VLLM_TARGET_DEVICE=cpu: vLLM's CUDA platform begins by importing 0.34.0's compiled extension, built for
# torch 2.14, which the machine does not have (2026-12-04-h200-0004-0.34.0.md). With the CPU platform named,
# the import chain stays in Python. The probe maps vllm.triton_utils to the real triton, and the kernel runs
# as compiled by that triton on the GPU, on CUDA tensors. The platform object is never asked anything on
# the kernel's path.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/v034-out}
SITE=${SITE:-/tmp/site}
W=/tmp/v034
mkdir -p "$OUT"
{
  rm -rf "$W" && mkdir -p "$W/base"
  tar -C "$W/base" -xJf "$REPO/.cache/v034/v034py.tar.xz" || exit 2
  cp -a "$W/base" "$W/patched"
  for p in $(grep -v '^#' "$REPO/patches/series-0.34.0"); do
    (cd "$W/patched" && git apply --whitespace=nowarn "$REPO/patches/$p") || { echo "cannot apply $p"; exit 2; }
    echo "applied $p"
  done
  VLLM_TARGET_DEVICE=cpu PYTHONPATH="$SITE" bash "$REPO/tests/kernels/run_on_device.sh" "$W/base" "$W/patched" \
    --seed003-upstream
  echo "rc=$?"
} 2>&1 | tee "$OUT/v034_kernels.txt"
