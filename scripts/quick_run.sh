#!/usr/bin/env bash
# ablations/quick.yaml on one GPU with its seeds side by side (`--jobs`: a 6-layer model leaves
# most of an H200 idle), then replay, report, figures and a digest into OUT: what a device call
# brings back.
#
#   OUT=results LIMIT=540 bash scripts/quick_run.sh [extra ablate arguments, e.g. --variant fp32]
set -u
OUT=${OUT:?set OUT to a folder for the results}
LIMIT=${LIMIT:-540}
STORE=${STORE:-/tmp/quick}
JOBS=${JOBS:-3}
mkdir -p "$OUT"
timeout "$LIMIT" python3 -m flashprobe ablate -c ablations/quick.yaml --jobs "$JOBS" --no-replay \
  --store "$STORE" "$@" >"$OUT/train.log" 2>&1
echo "ablate exit $?" >>"$OUT/train.log"
tail -q -n 12 "$STORE"/quick/logs/shard-*.log >>"$OUT/train.log" 2>/dev/null
timeout "${REPLAY_LIMIT:-90}" python3 -m flashprobe replay "$STORE" --suite quick >"$OUT/replay.log" 2>&1
python3 -m flashprobe report "$STORE" --suite quick --format markdown >"$OUT/report.md" 2>&1
python3 -m flashprobe report "$STORE" --suite quick --plot "$OUT/plots" >/dev/null 2>&1
python3 scripts/store_digest.py "$STORE" "$OUT/quick.json"
