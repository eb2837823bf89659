#!/usr/bin/env bash
# `vfleet ab` of graph mode (A) against --enforce-eager (B) on a real GPU (issue 14, part 3): two
# vLLM 0.26.0 servers of the non-production profile llama-1b-random/h200 side by side on the one H200 of
# the device machine (ports 8000 and 8001, --gpu-memory-utilization $GMU each; the profile's 512-block
# KV override keeps each server's KV pool at 8,192 tokens whatever the fraction), then
# `vfleet ab --a graph --b eager --profile llama-1b-random/h200` at the profile's levels (C1, C32).
# B=bi makes arm B graph mode with VLLM_BATCH_INVARIANT=1 instead (issue 22, item 3: the cost of a
# batch-invariant server), on port 8001 likewise.
# Recorded outputs: tests/fixtures/h200-ab/ (README there); B=bi: benchmarks/results/2026-12-04-h200-batch-invariant.md.
#
# Staging and the model are benchmarks/h200_verify.sh's (sourced here: stage, setup, profile_env,
# stop; docs/upstream.md). Steps (arguments, in order):
#   stage    (device) copy the carried part(s) under .cache/h200v/ to /tmp/stage
#   setup    (device) unpack vLLM and the wheels into /tmp/site, build /models/llama-1b-random
#   serve    (device) start the graph server (A, port 8000); once its CUDA graphs are captured, the eager
#            server (B, port 8001, --enforce-eager); wait until both answer /health. They run in their own
#            sessions and stay up between calls.
#   ab       (device) vfleet ab A against B (ROUNDS, default 12; OUTPUT_TOKENS, default 64) into $OUT/ab
#   stop     (device) stop both servers, keep their logs
# On the device, through the `run` tool, back to back (the machine and /tmp survive only while calls
# follow each other; a machine of this workplace goes back 30 s after a call):
#   run(command="bash benchmarks/h200_ab.sh stage", carry=[".cache/h200v/p1"])
#   run(command="bash benchmarks/h200_ab.sh stage", carry=[".cache/h200v/p2"])
#   run(command="bash benchmarks/h200_ab.sh stage setup serve", carry=[".cache/h200v/p3"], timeout_s=600)
#   run(command="bash benchmarks/h200_ab.sh ab stop", timeout_s=600)
# (.cache/h200v/p1..p3: `bash benchmarks/h200_verify.sh prepare` here.) Everything a call wrote under
# $OUT is packed into $OUT/h200ab.tar (the tool brings back at most 8 files).
set -uo pipefail
# shellcheck source=benchmarks/h200_verify.sh
source "$(dirname "$0")/h200_verify.sh"

URL_A=http://127.0.0.1:8000
URL_B=http://127.0.0.1:8001
GMU=${GMU:-0.4}
ROUNDS=${ROUNDS:-12}
OUTPUT_TOKENS=${OUTPUT_TOKENS:-64}
B=${B:-eager}
case $B in
  eager) B_ARGS=(--enforce-eager) B_ENV=() ;;
  bi) B_ARGS=() B_ENV=(VLLM_BATCH_INVARIANT=1) ;;
  *) echo "B=$B: arm B is eager or bi"; exit 2 ;;
esac

start() {  # start LABEL PORT [extra vllm args...]: the profile's server in its own session
  local label=$1 port=$2; shift 2
  if kill -0 "$(cat "$WORK/server-$label.pid" 2>/dev/null)" 2>/dev/null; then log "server $label already started"; return 0; fi
  local cfg="$WORK/vllm-$label.yaml" logf="$WORK/boot-$label.log"
  eval "$(profile_env "$cfg")"
  log "serve $label: ${B_LABEL_ENV:+$B_LABEL_ENV }vllm serve --config $cfg ${NEG[*]} --host 127.0.0.1 --port $port --gpu-memory-utilization $GMU $*"
  setsid nohup env ${B_LABEL_ENV:-} "$PY" -m vllm.entrypoints.cli.main serve --config "$cfg" "${NEG[@]}" --host 127.0.0.1 --port "$port" \
    --gpu-memory-utilization "$GMU" "$@" >"$logf" 2>&1 </dev/null &
  echo $! >"$WORK/server-$label.pid"
}

wait_until() {  # wait_until LABEL URL [LOG_PATTERN]: until the log shows the pattern, or else /health answers
  local label=$1 url=$2 pattern=${3:-} t0=$SECONDS logf
  logf="$WORK/boot-$label.log"
  while true; do
    if [ -n "$pattern" ]; then
      grep -q "$pattern" "$logf" 2>/dev/null && break
    elif "$PY" -c "import urllib.request as u; u.urlopen('$url/health', timeout=2)" 2>/dev/null; then
      break
    fi
    if ! kill -0 "$(cat "$WORK/server-$label.pid")" 2>/dev/null; then
      log "server $label exited during boot"; tail -40 "$logf"; cp "$logf" "$OUT/"; return 1
    fi
    if ((SECONDS - t0 > 400)); then log "server $label: no '${pattern:-/health}' after 400 s"; tail -20 "$logf"; return 1; fi
    sleep 2
  done
  log "server $label: ${pattern:-/health} after $((SECONDS - t0)) s"
}

serve_both() {
  # Staggered: each vLLM profiles the GPU's free memory at boot, and another process freeing memory
  # meanwhile fails that ("Error in memory profiling"); the graph server has captured its graphs first.
  start ab-graph 8000 || return 1
  wait_until ab-graph "$URL_A" "Graph capturing finished" || return 1
  B_LABEL_ENV="${B_ENV[*]}" start "ab-$B" 8001 "${B_ARGS[@]}" || return 1
  wait_until ab-graph "$URL_A" && wait_until "ab-$B" "$URL_B" || return 1
  for label in ab-graph "ab-$B"; do
    grep -E "GPU KV cache size|Graph capturing finished|Enforce eager|attention backend|non-default args" \
      "$WORK/boot-$label.log" | cut -c1-300
  done
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader | tee "$OUT/gpu-memory.txt"
}

run_ab() {
  log "vfleet ab --a $URL_A --b $URL_B --profile $PROFILE --rounds $ROUNDS --output-tokens $OUTPUT_TOKENS"
  timeout 560 "$PY" -m vfleet ab --a "$URL_A" --b "$URL_B" --profile "$PROFILE" --rounds "$ROUNDS" \
    --output-tokens "$OUTPUT_TOKENS" --out "$OUT/ab" 2>&1 | tee "$OUT/ab-stdout.txt"
  local rc=${PIPESTATUS[0]}
  echo "vfleet ab rc=$rc" | tee -a "$OUT/ab-stdout.txt"
  cp "$WORK/boot-ab-graph.log" "$WORK/boot-ab-$B.log" "$OUT/"
  return "$rc"
}

pack() {  # one tar of everything under $OUT
  tar -C "$OUT" -cf "$WORK/h200ab.tar" --exclude h200ab.tar . && find "$OUT" -mindepth 1 -delete \
    && mv "$WORK/h200ab.tar" "$OUT/h200ab.tar"
}

rc=0
for step in "$@"; do
  case $step in
    stage) stage || rc=1 ;;
    setup) setup || rc=1 ;;
    serve) serve_both || rc=1 ;;
    ab) run_ab || rc=1 ;;
    stop) stop ab-graph; stop "ab-$B" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  [ $rc -ne 0 ] && break
done
pack
exit $rc
