#!/usr/bin/env bash
# Wait up to WAIT seconds for the background queue (queue.sh), then write into OUT: a digest of
# every store named in STORES (default /tmp/adamw), the queue log and the shard logs' tails, and
# a GPU snapshot. REPLAY=1 also replays each store's suites and writes their reports.
set -u
OUT=${OUT:?set OUT}
WAIT=${WAIT:-540}
STORES=${STORES:-/tmp/adamw}
STATE=/tmp/device-queue
mkdir -p "$OUT"
end=$((SECONDS + WAIT))
while [ $SECONDS -lt $end ] && [ ! -e "$STATE/done" ]; do sleep 5; done
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv >"$OUT/gpu.txt" 2>&1
{ cat "$STATE/queue.log"; for f in /tmp/adamw*/*/logs/shard-*.log; do echo "== $f"; tail -n 4 "$f"; done; } \
  >"$OUT/queue.log" 2>&1
for store in $STORES; do
  [ -d "$store" ] || continue
  name=$(basename "$store")
  if [ "${REPLAY:-0}" = 1 ]; then
    for suite in "$store"/*/; do
      s=$(basename "$suite")
      timeout "${REPLAY_LIMIT:-120}" python3 -m flashprobe replay "$store" --suite "$s" \
        >>"$OUT/replay.log" 2>&1
      python3 -m flashprobe report "$store" --suite "$s" --format markdown \
        >"$OUT/$name-$s-report.md" 2>&1
    done
  fi
  python3 -m flashprobe digest "$store" "$OUT/$name.json" --every 10 >/dev/null
done
for f in gpu-tests.log profile.log replay.log quick-report.md; do  # the queue's own outputs
  [ -e "$STATE/$f" ] && cp "$STATE/$f" "$OUT/"
done
[ -e "$STATE/done" ] && echo "queue done" || echo "queue still running"
ls -la "$OUT"
