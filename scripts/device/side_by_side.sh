#!/usr/bin/env bash
# Train cells of a suite side by side on one GPU (one process and one store per cell, so no two
# processes write one store), stop them all at BUDGET seconds (SIGINT: a cut cell is digested as
# cut), and write each store's digest into OUT. For cells from scratch whose outcome comes early
# (a cell that explodes stops, and the ones still running get its share of the GPU); branched
# cells need their source in each store: use call.sh for those.
#
#   export FLASHPROBE_GIT_SHA=<commit>; OUT=$OUT bash scripts/device/side_by_side.sh SUITE "VARIANT:SEED ..." [ablate options]
#
# Merge the digests afterwards: flashprobe digest-merge OUT.json OUT/*.json
set -u
OUT=${OUT:?set OUT}
SUITE=${1:?usage: side_by_side.sh SUITE "VARIANT:SEED ..." [ablate options]}
CELLS=${2:?usage: side_by_side.sh SUITE "VARIANT:SEED ..." [ablate options]}
shift 2
BUDGET=${BUDGET:-560}
STORES=${STORES:-/tmp/side}  # one store per cell under it
export FLASHPROBE_CACHE=${FLASHPROBE_CACHE:-/tmp/fpcache} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
for cell in $CELLS; do
  name=${cell%%:*}-${cell##*:}
  timeout -s INT "$BUDGET" python3 -m flashprobe ablate -c "$SUITE" --variant "${cell%%:*}" \
    --set "seeds=[${cell##*:}]" --jobs 1 "$@" --no-replay --store "$STORES/$name" \
    >"$OUT/$name.log" 2>&1 &
done
wait
echo "side_by_side.sh: cells done or stopped after $SECONDS s"
for cell in $CELLS; do
  name=${cell%%:*}-${cell##*:}
  python3 -m flashprobe digest "$STORES/$name" "$OUT/$name.json" --every 10 >/dev/null \
    || echo "side_by_side.sh: no digest for $name"
  grep -v ' step [0-9]*/' "$OUT/$name.log" | tail -n 3
done
nvidia-smi --query-gpu=name,memory.used --format=csv >"$OUT/gpu.txt" 2>&1
