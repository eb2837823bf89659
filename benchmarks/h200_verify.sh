#!/usr/bin/env bash
# Boot-verify on a real GPU (issue 14, part 3): vLLM 0.26.0 serving a 1B random-weight Llama on one
# NVIDIA H200 (the device machine: torch 2.11.0+cu130, no package registry), `vfleet verify` against
# it in graph mode and with --enforce-eager, and the integrity probe's clean logprob gap
# (benchmarks/bench_integrity_gap.py). Recorded outputs: tests/fixtures/h200-verify/ (README there).
#
# The profile is tests/fixtures/h200-verify/serve_configs/models/llama-1b-random/model.yaml, read
# through VFLEET_SERVE_CONFIGS (it is kept out of serve_configs/ because the fleet, the alerts and the
# shipped-profile tests take every profile there).
#
# Steps (STEP is the first argument):
#   prepare  (here, on a machine with pip and a registry) download the vLLM 0.26.0 wheel and the 85
#            dependency wheels the device lacks (Python 3.12), unpack vLLM without the FA2 library
#            (Hopper uses FA3) and the C++ headers, `tar | xz`, and split wheels + tree into parts of
#            at most 57 MiB under .cache/h200v/p1 .. pN (ignored; one part per device call)
#   stage    (device) copy the carried part(s) under .cache/h200v/ to /tmp/stage
#   setup    (device) unpack vLLM and install the wheels into /tmp/site; build the model into
#            /models/llama-1b-random (random weights, seeded; tokenizer of vfleet.tinymodel)
#   graph    (device) serve the profile in graph mode (setsid, stays up between calls), run the gap
#            benchmark (--runs RUNS, default 10)
#   verify-graph  (device) GPU health on the host, `vfleet verify` against the graph server, stop it
#   eager    (device) serve the same profile with --enforce-eager, `vfleet verify` (must fail
#            test_log[graph_mode]), the gap benchmark on it, stop it
# On the device, through the `run` tool, back to back (the machine and /tmp survive only while calls
# follow each other; a machine of this workplace goes back 30 s after a call):
#   run(command="bash benchmarks/h200_verify.sh stage", carry=[".cache/h200v/p1"])      # and p2, p3
#   run(command="bash benchmarks/h200_verify.sh setup graph", timeout_s=600)
#   run(command="TOL=<tolerance> bash benchmarks/h200_verify.sh verify-graph eager", timeout_s=600)
# TOL, if set, replaces verify.integrity.logprob_tolerance in the device's copy of the profile (the
# value is then committed to the profile); outputs go to $OUT (one tar per call: results.tar).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
export VFLEET_SERVE_CONFIGS="$REPO/tests/fixtures/h200-verify/serve_configs"
# test_version compares /version with versions.json of the vfleet home: the checkout's pins vLLM 0.30.0,
# which cannot run on the device; tests/fixtures/h200-verify/versions-0.26.0.json says 0.26.0 (what is
# installed). The home is made under /tmp (links to smoke_tests/ and the profile tree), not committed:
# a link to smoke_tests/ under tests/ would be collected by pytest and mypy. MANIFEST=checkout keeps
# the checkout's (then test_version fails, as in the first recorded run).
if [ "${MANIFEST:-stand-in}" != checkout ]; then
  export VFLEET_HOME=/tmp/h200v/home
  mkdir -p "$VFLEET_HOME"
  ln -sfn "$REPO/smoke_tests" "$VFLEET_HOME/smoke_tests"
  ln -sfn "$VFLEET_SERVE_CONFIGS" "$VFLEET_HOME/serve_configs"
  cp "$REPO/tests/fixtures/h200-verify/versions-0.26.0.json" "$VFLEET_HOME/versions.json"
fi
PROFILE=llama-1b-random/h200
PROFILE_YAML="$VFLEET_SERVE_CONFIGS/models/llama-1b-random/model.yaml"
MODEL_DIR=/models/llama-1b-random
SITE=/tmp/site
STAGE=/tmp/stage
WORK=/tmp/h200v
PORT=8000
URL=http://127.0.0.1:$PORT
RUNS=${RUNS:-10}
OUT=${OUT:-/tmp/h200v-out}
PY=${PYTHON:-python3}
mkdir -p "$OUT" "$WORK"
export PYTHONPATH="$SITE:$REPO" PYTHONUNBUFFERED=1
# Multicast off (device notes); harmless on one GPU.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

log() { echo "== $(date -u +%H:%M:%S) $*"; }

prepare() {
  local d=.cache/h200v-build plat=()
  for n in 5 17 24 26 27 28 31 34 35; do plat+=(--platform "manylinux_2_${n}_x86_64"); done
  plat+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
  mkdir -p "$d/dl" "$d/whl" .cache/h200v
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
    -d "$d/dl" vllm==0.26.0
  # The dependency list: `pip install --dry-run --ignore-installed --report` of vLLM's requirements
  # (less torch, triton, the CUDA libraries, FlashInfer and the other GPU-kernel packages the server
  # does not import for a plain Llama) for Python 3.12, less what the device image holds (KINDS.md),
  # plus typing_extensions (pydantic 2.14 needs a newer one): tests/fixtures/h200-verify/wheels.txt.
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
    -d "$d/whl" -r tests/fixtures/h200-verify/wheels.txt
  rm -rf "$d/tree" && mkdir -p "$d/tree"
  unzip -q "$d"/dl/vllm-0.26.0-*.whl -d "$d/tree" -x 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' \
    'vllm/third_party/*/include/*' '*cpython-310*' '*cpython-311*' '*cpython-313*' '*cpython-314*'
  tar -C "$d/tree" -cf - . | xz -T1 -6 >"$d/vllm-tree.tar.xz"
  rm -rf .cache/h200v/p* && mkdir -p .cache/h200v
  tar -C "$d" -cf "$d/wheels.tar" whl
  cat "$d/wheels.tar" "$d/vllm-tree.tar.xz" >"$d/all.bin"
  echo "$(stat -c %s "$d/wheels.tar")" >"$d/wheels.size"
  # 57 MiB: a part travels with the working tree (about 4 MiB), within the 64 MiB a call carries
  split -b 57m -d -a 1 "$d/all.bin" "$d/part"
  for f in "$d"/part*; do i=$((${f##*part} + 1)); mkdir -p ".cache/h200v/p$i"; mv "$f" ".cache/h200v/p$i/"; done
  cp "$d/wheels.size" .cache/h200v/p1/
  ls -la .cache/h200v/*
}

stage() {  # stage [PARTS]: the carried part(s) under PARTS (default .cache/h200v) to $STAGE
  mkdir -p "$STAGE"
  cp -v "${1:-.cache/h200v}"/p*/* "$STAGE"/
  ls -la "$STAGE"; df -h /tmp | tail -1
}

machine() {  # the GPU, kernel and the image's packages, into $OUT/env.txt
  log "machine"
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    uname -r
    "$PY" -c 'import sys, torch, triton, transformers, tokenizers; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)'
  } 2>&1 | tee "$OUT/env.txt"
}

setup() {
  machine
  log "unpack"
  rm -rf "$SITE" "$WORK/whl" && mkdir -p "$SITE"
  local wsize
  wsize=$(cat "$STAGE/wheels.size")
  cat "$STAGE"/part* >"$WORK/all.bin" || return 1
  head -c "$wsize" "$WORK/all.bin" | tar -C "$WORK" -xf - || return 1
  tail -c +"$((wsize + 1))" "$WORK/all.bin" | xz -d | tar -C "$SITE" -xf - || return 1
  rm -f "$WORK/all.bin"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WORK"/whl/*.whl \
    2>&1 | grep -v "^WARNING: Target directory" | tail -5
  "$PY" -c 'import vllm, pydantic, fastapi; print("vllm", vllm.__version__, "pydantic", pydantic.VERSION, "fastapi", fastapi.__version__)' \
    2>&1 | tee -a "$OUT/env.txt" | tail -3
  log "model"
  "$PY" - "$MODEL_DIR" <<'PYEOF' 2>&1 | tail -5
import json, shutil, sys, tempfile
from pathlib import Path
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from vfleet import tinymodel
out = Path(sys.argv[1])
if (out / "vfleet-1b.json").is_file():
    print("model already built:", out); sys.exit(0)
tiny = tinymodel.build(Path(tempfile.mkdtemp()) / "tiny")  # its tokenizer (2,048-token byte-level BPE, chat template)
out.mkdir(parents=True, exist_ok=True)
for f in tiny.iterdir():
    if f.name.startswith(("tokenizer", "special_tokens", "chat_template")):
        shutil.copy(f, out / f.name)
tok = json.loads((tiny / "config.json").read_text())
torch.manual_seed(1234)
config = LlamaConfig(
    vocab_size=tok["vocab_size"], hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096,
    bos_token_id=tok["bos_token_id"], eos_token_id=tok["eos_token_id"], pad_token_id=tok["pad_token_id"],
    tie_word_embeddings=False, torch_dtype="bfloat16", initializer_range=0.02,
)
with torch.device("cuda"):
    model = LlamaForCausalLM(config).to(torch.bfloat16)
n = sum(p.numel() for p in model.parameters())
model.save_pretrained(out, safe_serialization=True)
(out / "vfleet-1b.json").write_text(json.dumps({"seed": 1234, "params": n, "init": "HF default, std 0.02"}))
print(f"built {out}: {n / 1e9:.3f} B parameters")
PYEOF
  ls -la "$MODEL_DIR"
}

profile_env() {  # the profile's ($PROFILE) env section as export lines, and its vLLM --config file
  "$PY" - "$1" "$PROFILE" <<'PYEOF'
import shlex, sys
from pathlib import Path
from vfleet.profiles import Catalog
from vfleet.vllm_args import write_config, negative_flags
p = Catalog().load(sys.argv[2])
write_config(p, Path(sys.argv[1]))
for k, v in p.env.items():
    print(f"export {k}={shlex.quote(v)}")
print("NEG=(" + " ".join(shlex.quote(f) for f in negative_flags(p)) + ")")
PYEOF
}

serve() {  # serve LABEL [extra vllm args...]: start vLLM (own session, survives the call), wait for /health
  local label=$1; shift
  local cfg="$WORK/vllm-$label.yaml" logf="$WORK/boot-$label.log"
  eval "$(profile_env "$cfg")"
  log "serve $label: vllm serve --config $cfg ${NEG[*]} --host 127.0.0.1 --port $PORT $*"
  cat "$cfg"
  setsid nohup "$PY" -m vllm.entrypoints.cli.main serve --config "$cfg" "${NEG[@]}" --host 127.0.0.1 --port "$PORT" "$@" \
    >"$logf" 2>&1 </dev/null &
  echo $! >"$WORK/server-$label.pid"
  local t0=$SECONDS
  until "$PY" -c "import urllib.request as u; u.urlopen('$URL/health', timeout=2)" 2>/dev/null; do
    if ! kill -0 "$(cat "$WORK/server-$label.pid")" 2>/dev/null; then
      log "server $label exited during boot"; tail -40 "$logf"; cp "$logf" "$OUT/"; return 1
    fi
    if ((SECONDS - t0 > 400)); then log "server $label not healthy after 400 s"; tail -20 "$logf"; return 1; fi
    sleep 2
  done
  log "server $label healthy after $((SECONDS - t0)) s"
  grep -E "GPU KV cache size|Graph capturing finished|Enforce eager|attention backend|non-default args" "$logf" | cut -c1-300
}

running() {  # running LABEL...: the first LABEL whose server (started by serve) this machine runs
  local l
  for l in "$@"; do
    kill -0 "$(cat "$WORK/server-$l.pid" 2>/dev/null)" 2>/dev/null && { echo "$l"; return 0; }
  done
  return 1
}

stop() {  # stop LABEL: SIGTERM the server we started (its process group), wait for it
  local label=$1 pid
  pid=$(cat "$WORK/server-$label.pid" 2>/dev/null) || return 0
  kill -TERM -- "-$pid" 2>/dev/null
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$pid" 2>/dev/null
  rm -f "$WORK/server-$label.pid"
  cp "$WORK/boot-$label.log" "$OUT/"
  log "server $label stopped"
}

collect() {  # everything this call wrote, as one tar under $OUT (the tool brings back at most 8 files)
  tar -C "$OUT" -cf "$WORK/results.tar" --exclude results.tar . && mv "$WORK/results.tar" "$OUT/results.tar"
}

graph() {
  serve graph || return 1
  log "gap benchmark: bench_integrity_gap.py --url $URL --profile $PROFILE --runs $RUNS"
  timeout 300 "$PY" benchmarks/bench_integrity_gap.py --url "$URL" --profile "$PROFILE" --runs "$RUNS" \
    2>&1 | tee "$OUT/gap-graph.jsonl"
  cp "$WORK/boot-graph.log" "$OUT/"
}

set_tol() {
  if [ -n "${TOL:-}" ]; then
    sed -i "s/^    logprob_tolerance: .*/    logprob_tolerance: $TOL/" "$PROFILE_YAML"
    grep -n "logprob_tolerance" "$PROFILE_YAML"
  fi
}

verify() {  # verify LABEL
  local label=$1
  log "vfleet verify ($label)"
  timeout 400 "$PY" -m vfleet verify --url "$URL" --profile "$PROFILE" --log "$WORK/boot-$label.log" \
    --out "$OUT/verify-$label" 2>&1 | tail -40
  echo "vfleet verify ($label) rc=${PIPESTATUS[0]}" | tee "$OUT/verify-$label.rc"
}

verify_graph() {
  set_tol
  log "GPU health on the host (vfleet.verify.probe.gpuhealth.run_gpu_health), server up"
  "$PY" -c 'import json; from vfleet.verify.probe.gpuhealth import run_gpu_health; print(json.dumps(run_gpu_health(None, "nvidia"), indent=1))' \
    2>&1 | tee "$OUT/gpu-health.json"
  verify graph
  stop graph
}

eager() {
  set_tol
  serve eager --enforce-eager || { collect; return 1; }
  verify eager
  log "gap benchmark (eager): bench_integrity_gap.py --url $URL --profile $PROFILE --runs $RUNS"
  timeout 300 "$PY" benchmarks/bench_integrity_gap.py --url "$URL" --profile "$PROFILE" --runs "$RUNS" \
    2>&1 | tee "$OUT/gap-eager.jsonl"
  stop eager
}

# Sourced (benchmarks/h200_ab.sh takes stage, setup, profile_env and stop from here): define only.
[ "${BASH_SOURCE[0]}" != "$0" ] && return 0

rc=0
for step in "$@"; do
  case $step in
    prepare) prepare || rc=1 ;;
    stage) stage || rc=1 ;;
    setup) setup || rc=1 ;;
    graph) graph || rc=1 ;;
    verify-graph) verify_graph || rc=1 ;;
    eager) eager || rc=1 ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  [ $rc -ne 0 ] && break
done
collect
exit $rc
