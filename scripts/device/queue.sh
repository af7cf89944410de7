#!/usr/bin/env bash
# Run a device session's queue of `flashprobe ablate` commands in the background, so that it
# outlives one 10-minute device call; later calls of collect.sh wait for it and bring back
# digests. A warm machine keeps the queue running between back-to-back calls.
#
#   bash scripts/device/queue.sh QUEUE_FILE       # first call: starts, returns at once
#   OUT=... WAIT=560 bash scripts/device/collect.sh   # every call: waits, then digests into OUT
#
# QUEUE_FILE holds one command per line (blank lines and # comments skipped), run in order;
# `&` at the end of a line runs it beside the next ones; `wait` waits for those.
# Everything runs with FLASHPROBE_CACHE=/tmp/fpcache (the corpus is built once per machine);
# set FLASHPROBE_GIT_SHA to the commit when the copied tree carries no usable .git.
set -u
QUEUE=${1:?usage: queue.sh QUEUE_FILE}
STATE=/tmp/device-queue
mkdir -p "$STATE"
cp "$QUEUE" "$STATE/queue.txt"
# collect.sh runs in later calls, whose shells lack this call's FLASHPROBE_GIT_SHA: keep it here
[ -n "${FLASHPROBE_GIT_SHA:-}" ] && echo "$FLASHPROBE_GIT_SHA" >"$STATE/git_sha"
export FLASHPROBE_CACHE=${FLASHPROBE_CACHE:-/tmp/fpcache} PYTHONUNBUFFERED=1
setsid bash -c '
  cd "$0"
  while IFS= read -r line; do
    case "$line" in ""|\#*) continue;; esac
    echo "$(date +%T) start: $line" >>"$1/queue.log"
    eval "$line" >>"$1/queue.log" 2>&1
    echo "$(date +%T) end ($?): $line" >>"$1/queue.log"
  done <"$1/queue.txt"
  wait
  echo "$(date +%T) queue done" >>"$1/queue.log"
  touch "$1/done"
' "$PWD" "$STATE" </dev/null >/dev/null 2>&1 &
echo "queue started: $(grep -cv '^\s*\(#\|$\)' "$QUEUE") commands"
