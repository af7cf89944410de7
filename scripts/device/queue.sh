#!/usr/bin/env bash
# Run a device session's queue of `flashprobe ablate` commands in the background, so that it
# outlives one 10-minute device call; later calls of collect.sh wait for it and bring back
# digests. A warm machine keeps the queue running between back-to-back calls.
#
#   bash scripts/device/queue.sh QUEUE_FILE       # first call: starts, returns at once
#   OUT=... WAIT=560 bash scripts/device/collect.sh   # every call: waits, then digests into OUT
#
# QUEUE_FILE holds one command per line (blank lines and # comments skipped), run in order with
# stdin from /dev/null; `&` at the end of a line runs it beside the next ones; `wait` waits for
# those. STATE/queue.log gets each line's start, its output and its end with the exit code;
# STATE/done marks the queue's end, and `kill -- -$(cat STATE/pid)` stops it. STATE is
# $FLASHPROBE_QUEUE_STATE (default /tmp/device-queue; the tests set their own), exported so that
# lines write their own outputs there (collect.sh copies gpu-tests.log, replay.log, ...).
# Everything runs with FLASHPROBE_CACHE=/tmp/fpcache (the corpus is built once per machine);
# set FLASHPROBE_GIT_SHA to the commit when the copied tree carries no usable .git.
set -u
QUEUE=${1:?usage: queue.sh QUEUE_FILE}
export FLASHPROBE_QUEUE_STATE=${FLASHPROBE_QUEUE_STATE:-/tmp/device-queue}
STATE=$FLASHPROBE_QUEUE_STATE
mkdir -p "$STATE"
cp "$QUEUE" "$STATE/queue.txt"
rm -f "$STATE/done" "$STATE/git_sha"  # a queue started again: collect.sh waits for this one
# collect.sh runs in later calls, whose shells lack this call's FLASHPROBE_GIT_SHA: keep it here
[ -n "${FLASHPROBE_GIT_SHA:-}" ] && echo "$FLASHPROBE_GIT_SHA" >"$STATE/git_sha"
export FLASHPROBE_CACHE=${FLASHPROBE_CACHE:-/tmp/fpcache} PYTHONUNBUFFERED=1
setsid bash -c '
  cd "$0"
  while IFS= read -r line; do
    case "$line" in ""|\#*) continue;; esac
    echo "$(date +%T) start: $line" >>"$1/queue.log"
    eval "$line" </dev/null >>"$1/queue.log" 2>&1
    rc=$?  # before the $(date) below, which sets $? itself
    echo "$(date +%T) end ($rc): $line" >>"$1/queue.log"
  done <"$1/queue.txt"
  wait
  echo "$(date +%T) queue done" >>"$1/queue.log"
  touch "$1/done"
' "$PWD" "$STATE" </dev/null >/dev/null 2>&1 &
echo $! >"$STATE/pid"  # setsid runs in place (no job control here): the session's leader
# DEADLINE (epoch seconds), when exported: the end of the device session's budget, which
# spread.sh and before_deadline.sh keep their lines inside
[ -n "${DEADLINE:-}" ] && echo "deadline: $(date -d "@$DEADLINE" +%T 2>/dev/null || echo "$DEADLINE")"
echo "queue started: $(grep -cv '^\s*\(#\|$\)' "$QUEUE") commands"
