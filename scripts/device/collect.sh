#!/usr/bin/env bash
# Wait up to WAIT seconds for the background queue (queue.sh), then write into OUT: a digest of
# every store named in STORES (default /tmp/adamw), the queue log and the shard logs' tails, the
# queue's own outputs (GPU tests, profile, replay, report; a queue line replays, not this), the
# stores' replay.json files in one tar, and a GPU snapshot. The queue's state folder is
# $FLASHPROBE_QUEUE_STATE, as for queue.sh (default /tmp/device-queue).
set -u
OUT=${OUT:?set OUT}
WAIT=${WAIT:-540}
STORES=${STORES:-/tmp/adamw}
STATE=${FLASHPROBE_QUEUE_STATE:-/tmp/device-queue}
# the digest records the code version the queue was started with (queue.sh kept it)
[ -z "${FLASHPROBE_GIT_SHA:-}" ] && [ -s "$STATE/git_sha" ] && export FLASHPROBE_GIT_SHA=$(cat "$STATE/git_sha")
mkdir -p "$OUT"
end=$((SECONDS + WAIT))
while [ $SECONDS -lt $end ] && [ ! -e "$STATE/done" ]; do sleep 1; done
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv >"$OUT/gpu.txt" 2>&1
{
  cat "$STATE/queue.log"
  for store in $STORES; do
    for f in "$store"/*/logs/shard-*.log; do [ -e "$f" ] && echo "== $f" && tail -n 4 "$f"; done
  done
} >"$OUT/queue.log" 2>&1
for store in $STORES; do
  [ -d "$store" ] || continue
  name=$(basename "$store")
  bash "$(dirname "$0")/digest_store.sh" "$store" "$OUT/$name.json"
done
replays=$(for store in $STORES; do [ -d "$store" ] && find "$store" -name 'replay.json*'; done)
[ -n "$replays" ] && tar czf "$OUT/replays.tgz" $replays 2>/dev/null  # the δ replays: one file
for f in gpu-tests.log profile.log replay.log quick-report.md bench.log atomic-dq-grid.json; do
  [ -e "$STATE/$f" ] && cp "$STATE/$f" "$OUT/"
done
[ -e "$STATE/done" ] && echo "queue done" || echo "queue still running"
ls -la "$OUT"
