#!/usr/bin/env bash
# Detection of real KV-cache corruption by the integrity probe on a real GPU, against its strength, with
# and without client traffic (issue 22, item 3): vLLM 0.26.0 in graph mode serving the 1B random Llama
# (profile llama-1b-random/h200, a 2048-block pool as in benchmarks/h200_probe.sh) on one H200, with the
# test-only corruption plugin (tests/kvcorrupt/vfleet_kvcorrupt.py) loaded, and the same sweep on a
# confident variant of that model (its final norm's weight times CONFIDENT, as vfleet.tinymodel's
# `confident` does for the tiny model). vLLM 0.30 (the pinned base) cannot run on the device machine
# (docs/upstream.md), hence 0.26.0.
# Recorded outputs: benchmarks/results/2026-12-04-h200-kv-corruption.md.
#
# Staging and the model are benchmarks/h200_verify.sh's (sourced: stage, setup, serve, stop, collect).
# Steps (arguments, in order):
#   stage       (device) copy the carried part(s) under .cache/h200v/ to /tmp/stage
#   setup       (device) unpack vLLM and the wheels into /tmp/site, build /models/llama-1b-random
#   confident   (device) build /models/llama-1b-confident from it (the norm scaled; same tokenizer)
#   random|conf (device) serve the random (or confident) model in graph mode with the plugin loaded
#               (stops the other one first)
#   sweep       (device) bench_kv_corruption.py --url against the running server for each STREAMS
#               (default "0 16"): CLEAN clean trials, TRIALS per corruption setting
#   stop        (device) stop the server that runs
# On the device, through the `run` tool, back to back (a machine goes back 30 s after a call):
#   run(command="bash benchmarks/h200_kvcorrupt.sh stage", carry=[".cache/h200v/p1"])      # and p2
#   run(command="bash benchmarks/h200_kvcorrupt.sh stage setup confident random sweep", carry=[".cache/h200v/p3"])
#   run(command="bash benchmarks/h200_kvcorrupt.sh conf sweep stop")
# (.cache/h200v/p1..p3: `bash benchmarks/h200_verify.sh prepare` here.) Outputs: $OUT/results.tar.
set -uo pipefail
# shellcheck source=benchmarks/h200_verify.sh
source "$(dirname "$0")/h200_verify.sh"

STREAMS=${STREAMS:-0 16}
TRIALS=${TRIALS:-5}
CLEAN=${CLEAN:-30}
CONFIDENT=${CONFIDENT:-16}
POOL_BLOCKS=${POOL_BLOCKS:-2048}
CONTROL=$WORK/kvcorrupt.conf
PLUGIN=$WORK/kvplugin
CONF_DIR=/models/llama-1b-confident

confident() {
  "$PY" - "$MODEL_DIR" "$CONF_DIR" "$CONFIDENT" <<'PYEOF' 2>&1 | tail -3
import shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file
src, dst, scale = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
if (dst / "vfleet-1b.json").is_file():
    print("already built:", dst); sys.exit(0)
shutil.rmtree(dst, ignore_errors=True)
shutil.copytree(src, dst)
for f in dst.glob("*.safetensors"):
    t = load_file(f)
    if "model.norm.weight" in t:
        t["model.norm.weight"] = t["model.norm.weight"] * scale
        save_file(t, f, metadata={"format": "pt"})
        print(f"{dst}: model.norm.weight x {scale:g} in {f.name}")
(dst / "vfleet-1b.json").write_text((src / "vfleet-1b.json").read_text()[:-1] + f', "confident": {scale}}}')
PYEOF
}

serve_plugged() {  # serve_plugged LABEL [extra vllm args]: the profile in graph mode with the plugin loaded
  local other
  other=$(running random conf) && stop "$other"
  echo "mode=off" >"$CONTROL"
  "$PY" -c "import sys; sys.path.insert(0, '$REPO/tests'); from pathlib import Path; from kvcorrupt.plugin import plugin_path; plugin_path(Path('$PLUGIN'))"
  PYTHONPATH="$PLUGIN:$PYTHONPATH" VFLEET_KVCORRUPT_FILE=$CONTROL serve "$1" --num-gpu-blocks-override "$POOL_BLOCKS" "${@:2}"
}

sweep() {
  local label
  label=$(running random conf) || { log "no server runs: start one with random or conf"; return 1; }
  for n in $STREAMS; do
    log "sweep: bench_kv_corruption.py --url $URL --streams $n --trials $TRIALS --clean $CLEAN --label $label-c$n"
    timeout 560 "$PY" benchmarks/bench_kv_corruption.py --url "$URL" --profile "$PROFILE" --control "$CONTROL" \
      --log "$WORK/boot-$label.log" --streams "$n" --trials "$TRIALS" --clean "$CLEAN" --label "$label-c$n" \
      --out "$OUT/kv/$label-c$n.json" 2>&1 | tail -20
  done
  grep -c "vfleet-kvcorrupt:" "$WORK/boot-$label.log"
  cp "$WORK/boot-$label.log" "$OUT/"
}

rc=0
for step in "$@"; do
  case $step in
    stage) stage || rc=1 ;;
    setup) setup || rc=1 ;;
    confident) confident || rc=1 ;;
    random) serve_plugged random || rc=1 ;;
    conf) serve_plugged conf --model "$CONF_DIR" || rc=1 ;;
    sweep) sweep || rc=1 ;;
    stop) label=$(running random conf) && stop "$label" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  [ $rc -ne 0 ] && break
done
collect
exit $rc
