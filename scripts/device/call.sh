#!/usr/bin/env bash
# One device call that stands alone: train cells of a suite in order (spread.sh; a branched
# cell's runner trains its source first when the store lacks it) while they fit in BUDGET
# seconds, then write the store's digest, the log and a GPU snapshot into OUT. A lent machine is
# not reliably warm at the next call (lost between back-to-back calls in two sessions running),
# so nothing here relies on an earlier call: each call names the cells it trains.
#
#   OUT=$OUT bash scripts/device/call.sh SUITE "VARIANT:SEED ..." [ablate options]
#
# BUDGET (default 560) leaves the 600-s call limit room for the digest. A cell starts only if
# CELL_SECONDS (default 345; add the source's ~90 s when it is the call's first) still fit; the
# cells are stopped (SIGINT) at the budget's end, so a cut cell is digested as cut, not lost.
# THEN (optional): a command line run after the cells with the last THEN_SECONDS of the budget
# (the cells get the rest), stopped at its end too: e.g. the δ replay of the captures the cells
# made (`flashprobe replay /tmp/adamw ...`), which the digest then carries.
set -u
OUT=${OUT:?set OUT}
: "${2:?usage: call.sh SUITE \"VARIANT:SEED ...\" [ablate options]}"
BUDGET=${BUDGET:-560}
export DEADLINE=$(($(date +%s) + BUDGET))
export FLASHPROBE_CACHE=${FLASHPROBE_CACHE:-/tmp/fpcache} PYTHONUNBUFFERED=1
export STORE=${STORE:-/tmp/adamw}
mkdir -p "$OUT"
: >"$OUT/call.log"  # appended to: spread.sh's cell loop may outlive it by a line (it skips then)
THEN_SECONDS=$([ -n "${THEN:-}" ] && echo "${THEN_SECONDS:-0}" || echo 0)
DEADLINE=$((DEADLINE - THEN_SECONDS)) timeout -s INT "$((BUDGET - THEN_SECONDS))" \
  bash "$(dirname "$0")/spread.sh" "$@" >>"$OUT/call.log" 2>&1
echo "call.sh: spread.sh exit $? after $SECONDS s" >>"$OUT/call.log"
if [ -n "${THEN:-}" ]; then
  left=$((DEADLINE - $(date +%s)))
  if [ "$left" -gt 0 ]; then
    timeout -s INT "$left" bash -c "$THEN" >>"$OUT/call.log" 2>&1
    echo "call.sh: THEN exit $? after $SECONDS s" >>"$OUT/call.log"
  else
    echo "call.sh: THEN skipped, no time left" >>"$OUT/call.log"
  fi
fi
if [ -d "$STORE" ]; then
  bash "$(dirname "$0")/digest_store.sh" "$STORE" "$OUT/$(basename "$STORE").json" \
    >>"$OUT/call.log" 2>&1 || echo "call.sh: digest failed" >>"$OUT/call.log"
else
  echo "call.sh: no store at $STORE: no cell ran (see the lines above), no digest" >>"$OUT/call.log"
fi
nvidia-smi --query-gpu=name,utilization.gpu,memory.used --format=csv >"$OUT/gpu.txt" 2>&1
grep -v ' step [0-9]*/' "$OUT/call.log" | tail -n 25  # the cells' ends, not their progress
