#!/usr/bin/env bash
# Seed 002 metadata-reuse benchmark on a GPU machine (NVIDIA H200: torch + triton, no vLLM), on each
# base's patched tree.
#
# Prepare here (CPU machine), once: a Python-only patched vLLM tree per base (about 50 MB each), packed
# together (about 20 MB) to carry:
#   rm -rf .cache/seed002-trees && for b in 0.30.0 0.34.0; do
#     .venv/bin/python benchmarks/bench_metadata_reuse.py --base $b --export-tree .cache/seed002-trees/$b; done
#   tar -C .cache -czf .cache/seed002-trees.tgz seed002-trees
# Then run on the device (repo root), carrying the archive:
#   run(command="bash benchmarks/device_seed002.sh", carry=[".cache/seed002-trees.tgz"], timeout_s=600)
#
# The benchmark needs vLLM's own Python dependencies to import the Kimi-K3 KDA builders. They come
# from the staging of benchmarks/h200_verify.sh (its `stage` calls, then `setup`, which installs them
# into /tmp/site); this script puts /tmp/site on PYTHONPATH after the patched tree, so the tree's vllm/
# is the one imported (the benchmark checks that). Back to back on the device:
#   run(command="bash benchmarks/h200_verify.sh stage", carry=[".cache/h200v/p1"])      # and p2, p3
#   run(command="bash benchmarks/h200_verify.sh setup && bash benchmarks/device_seed002.sh",
#       carry=[".cache/seed002-trees.tgz"], timeout_s=600)
# If a dependency is still missing it says which, writes that to $OUT, and exits 3 (no figures are
# made up). SEED002_TREES names another directory of <base>/vllm trees; BASES limits the bases run.
set -u
TREES=${SEED002_TREES:-.cache/seed002-trees}
OUT=${OUT:-/tmp/seed002-out}
mkdir -p "$OUT"
if ! ls "$TREES"/*/vllm >/dev/null 2>&1 && [ -f .cache/seed002-trees.tgz ]; then
  rm -rf /tmp/seed002 && mkdir -p /tmp/seed002 && tar -C /tmp/seed002 -xzf .cache/seed002-trees.tgz \
    && TREES=/tmp/seed002/seed002-trees
fi
BASES=${BASES:-$(ls "$TREES" 2>/dev/null | sort -V | tr '\n' ' ')}
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
if [ -d "$SITE" ]; then export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"; fi
{
  echo "== machine"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  "$PY" -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)' 2>&1
  if [ -z "${BASES// /}" ]; then
    echo "no patched trees under $TREES: export them first (see the top of this script) and carry them"; exit 2
  fi
  echo "== vLLM dependencies the builders import (PYTHONPATH=${PYTHONPATH:-})"
  "$PY" - <<'PYEOF'
import importlib
missing = []
for name in ("pydantic", "transformers", "msgspec", "cachetools", "psutil", "regex", "cbor2", "typing_extensions", "blake3", "openai", "fastapi"):
    try:
        importlib.import_module(name)
    except Exception as exc:
        missing.append(f"{name} ({type(exc).__name__})")
print("missing:", ", ".join(missing) if missing else "none")
PYEOF
  echo "== benchmark (NVIDIA KDA builder; eager and full-cudagraph buffers; AMD builder for reference)"
  # vLLM's CUDA platform begins by importing the compiled extension, built for torch 2.13 (0.30.0) or
  # 2.14 (0.34.0), which this machine does not have (benchmarks/results/2026-12-04-h200-seed002.md). The
  # CPU platform keeps the import in Python; the builders still run on CUDA tensors, and the only platform
  # question on their path (NVIDIA KDA: launch its staging kernel with PDL?) is then answered no. The
  # header names the platform.
  rc=0
  for base in $BASES; do
    echo "== base $base"
    if [ ! -d "$TREES/$base/vllm" ]; then echo "no patched tree at $TREES/$base/vllm"; rc=2; continue; fi
    VLLM_TARGET_DEVICE=${VLLM_TARGET_DEVICE:-cpu} "$PY" benchmarks/bench_metadata_reuse.py --tree "$TREES/$base" \
      --device cuda --kinds nvidia,amd --graph eager,full --repeats 300
    r=$?; echo "rc=$r (base $base)"; [ "$r" -eq 0 ] || rc=$r
  done
  exit "$rc"
} 2>&1 | tee "$OUT/seed002_bench.txt"
exit "${PIPESTATUS[0]}"
