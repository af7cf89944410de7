#!/usr/bin/env bash
# Train cells of a suite one process per cell, spread over every GPU of the machine: the cells
# are dealt out in turn (cell i to GPU i mod G) and each GPU trains its cells one after another;
# returns when all are done, non-zero if any failed. On one GPU that is the cells in order.
#
#   bash scripts/device/spread.sh SUITE "VARIANT:SEED VARIANT:SEED ..." [ablate options...]
#
# Each cell runs `flashprobe ablate -c SUITE --variant VARIANT --set 'seeds=[SEED]' [options]
# --no-replay --store $STORE` (STORE default /tmp/adamw; one store, one digest) with
# CUDA_VISIBLE_DEVICES its GPU. A branched suite's cells need their source finished in the
# store first: spread the sources in a call of their own before the cells that branch from them
# (two processes must not train the same source at once). Each process adds its seed to the
# store's suite.json (`flashprobe ablate` merges the seeds of runs that differ in nothing else),
# so it names every seed trained.
#
# A device session has a fixed budget: with DEADLINE set (epoch seconds), a cell starts only if
# CELL_SECONDS (default 345: a cell of 2,900 steps that does not explode, 5.2-5.4 min on one
# H200, and its start) still fit
# before it; the others are skipped with a line in the log, so the session does not end on a
# cell cut short and the queue's later lines get the time (both through before_deadline.sh).
set -u
SUITE=${1:?usage: spread.sh SUITE "VARIANT:SEED ..." [ablate options]}
CELLS=${2:?usage: spread.sh SUITE "VARIANT:SEED ..." [ablate options]}
shift 2
HERE=$(dirname "$0")
GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
[ "${GPUS:-0}" -ge 1 ] || GPUS=1
echo "spread.sh: $(echo $CELLS | wc -w) cells of $SUITE over $GPUS GPUs"
for gpu in $(seq 0 $((GPUS - 1))); do
  (
    i=0; failed=0
    for cell in $CELLS; do
      if [ $((i % GPUS)) -eq "$gpu" ]; then
        CUDA_VISIBLE_DEVICES=$gpu bash "$HERE/before_deadline.sh" "${CELL_SECONDS:-345}" \
          python3 -m flashprobe ablate -c "$SUITE" --variant "${cell%%:*}" \
          --set "seeds=[${cell##*:}]" --jobs 1 "$@" --no-replay --store "${STORE:-/tmp/adamw}" || failed=1
      fi
      i=$((i + 1))
    done
    exit $failed
  ) &
done
status=0
for job in $(jobs -p); do wait "$job" || status=1; done
exit $status
