#!/usr/bin/env bash
# ablations/quick.yaml on one GPU, one process per seed side by side (the GPU has room: a
# 6-layer model leaves most of an H200 idle), then replay and report on the merged store.
#
#   OUT=results LIMIT=470 bash scripts/quick_run.sh
set -u
OUT=${OUT:?set OUT to a folder for the results}
LIMIT=${LIMIT:-470}
STORE=${STORE:-/tmp/quick}
SEEDS=${SEEDS:-0 1 2}
mkdir -p "$OUT"
for seed in $SEEDS; do
  timeout "$LIMIT" python3 -m flashprobe ablate -c ablations/quick.yaml --no-replay \
    --store "$STORE" --set "seeds=[$seed]" >"$STORE.seed$seed.log" 2>&1 &
done
wait
tail -n 25 "$STORE".seed*.log >"$OUT/train.log"
timeout "${REPLAY_LIMIT:-90}" python3 -m flashprobe replay "$STORE" --suite quick >"$OUT/replay.log" 2>&1
python3 -m flashprobe report "$STORE" --suite quick --format markdown >"$OUT/report.md" 2>&1
python3 -m flashprobe report "$STORE" --suite quick --plot "$OUT/plots" >/dev/null 2>&1
python3 scripts/store_digest.py "$STORE" "$OUT/quick.json"
