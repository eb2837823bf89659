#!/usr/bin/env bash
# The integrity probe's noise rule on a real GPU under client traffic (issue 22, items 2 and 3): vLLM 0.26.0
# in graph mode serving the 1B random Llama (llama-1b-random/h200) on one H200, the probe run back to back
# with 0, 4 and 16 concurrent client streams beside it (benchmarks/bench_probe_noise.py), then the same
# server with VLLM_BATCH_INVARIANT=1 under 16 streams. vLLM 0.30 (the pinned base) cannot run on the
# device machine (its torch is 2.11.0+cu130; docs/upstream.md), hence 0.26.0.
# Recorded outputs: tests/fixtures/h200-probe/ (README there); results:
# benchmarks/results/2026-12-03-h200-probe.md.
#
# Staging and the model are benchmarks/h200_verify.sh's (sourced: stage, setup, serve, stop, collect).
# Steps (arguments, in order):
#   stage       (device) copy the carried part(s) under .cache/h200v/ to /tmp/stage
#   setup       (device) unpack vLLM and the wheels into /tmp/site, build /models/llama-1b-random
#   graph       (device) serve the profile in graph mode, POOL_BLOCKS KV blocks (own session; stays up
#               between calls)
#   noise       (device) bench_probe_noise.py against the running server for each STREAMS (default
#               "0 4 16"), RUNS probes each (default 12: 36 questions), label LABEL-c<streams>
#   bi          (device) stop the graph server, serve again with VLLM_BATCH_INVARIANT=1 (label bi)
#   stop        (device) stop the server that runs
# On the device, through the `run` tool, back to back (a machine goes back 30 s after a call):
#   run(command="bash benchmarks/h200_probe.sh stage", carry=[".cache/h200v/p1"])       # and p2
#   run(command="bash benchmarks/h200_probe.sh stage setup graph noise", carry=[".cache/h200v/p3"])
#   run(command="STREAMS=16 bash benchmarks/h200_probe.sh bi noise stop")
# (.cache/h200v/p1..p3: `bash benchmarks/h200_verify.sh prepare` here.) Outputs: $OUT/results.tar.
set -uo pipefail
# shellcheck source=benchmarks/h200_verify.sh
source "$(dirname "$0")/h200_verify.sh"

STREAMS=${STREAMS:-0 4 16}
RUNS=${RUNS:-12}
# The profile's 512-block pool (8,192 tokens) turns over in about half a second under 16 client streams, so the
# cached prompt is evicted between the probe's requests (every probe then fails its hit check, as it should).
# POOL_BLOCKS (default 2048: 32,768 tokens) gives the pool room for the traffic; the probe sizes its fillers
# from the pool it finds.
POOL_BLOCKS=${POOL_BLOCKS:-2048}
POOL_ARGS=(--num-gpu-blocks-override "$POOL_BLOCKS")

noise() {
  local label
  label=$(running graph bi) || { log "no server runs: start one with graph or bi"; return 1; }
  for n in $STREAMS; do
    log "noise: bench_probe_noise.py --url $URL --profile $PROFILE --streams $n --runs $RUNS --label $label-c$n"
    timeout 400 "$PY" benchmarks/bench_probe_noise.py --url "$URL" --profile "$PROFILE" --streams "$n" \
      --runs "$RUNS" --label "$label-c$n" --out "$OUT/noise" | grep -E '"summary"|"run": 0,' | cut -c1-600
  done
  cp "$WORK/boot-$label.log" "$OUT/"
}

bi() {
  if [ "$(running graph bi)" = graph ]; then stop graph; fi
  export VLLM_BATCH_INVARIANT=1
  serve bi "${POOL_ARGS[@]}" || return 1
  grep -iE "batch.?invariant" "$WORK/boot-bi.log" | head -5 | cut -c1-300
}

stop_running() {
  local label
  label=$(running graph bi) && stop "$label"
  return 0
}

rc=0
for step in "$@"; do
  case $step in
    stage) stage || rc=1 ;;
    setup) setup || rc=1 ;;
    graph) serve graph "${POOL_ARGS[@]}" || rc=1 ;;
    noise) noise || rc=1 ;;
    bi) bi || rc=1 ;;
    stop) stop_running ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  [ $rc -ne 0 ] && break
done
collect
exit $rc
