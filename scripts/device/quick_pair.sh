#!/usr/bin/env bash
# The quick pair as issue 23 is judged: `flashprobe ablate -c ablations/quick.yaml --jobs 2` on a
# seed not used before, timed from the start (the corpus build included on a fresh machine), then
# `flashprobe report` and the store's digest, all into OUT. One device call: the pair must finish
# in 10 minutes, so a call of 600 s is the test itself (BUDGET stops it, cut cells digested as cut).
#
#   export FLASHPROBE_GIT_SHA=<commit>; OUT=$OUT SEED=8 bash scripts/device/quick_pair.sh
set -u
OUT=${OUT:?set OUT}
SEED=${SEED:?set SEED (a seed the committed results do not use)}
BUDGET=${BUDGET:-580}  # the judge's 600 s less the report and digest after it
export FLASHPROBE_CACHE=${FLASHPROBE_CACHE:-/tmp/fpcache} PYTHONUNBUFFERED=1
STORE=${STORE:-/tmp/quick}
mkdir -p "$OUT"
start=$(date +%s)
timeout -s INT "$BUDGET" python3 -m flashprobe ablate -c ablations/quick.yaml \
  --set "seeds=[$SEED]" --jobs 2 --store "$STORE" >"$OUT/pair.log" 2>&1
status=$?
echo "quick_pair.sh: ablate exit $status after $(($(date +%s) - start)) s (corpus build included)" \
  >>"$OUT/pair.log"
python3 -m flashprobe report "$STORE" --suite quick >"$OUT/report.txt" 2>&1
python3 -m flashprobe digest "$STORE" "$OUT/quick.json" --every 10 >/dev/null \
  || echo "quick_pair.sh: digest failed" >>"$OUT/pair.log"
nvidia-smi --query-gpu=name,memory.used --format=csv >"$OUT/gpu.txt" 2>&1
grep -v ' step [0-9]*/' "$OUT/pair.log" | tail -n 12
