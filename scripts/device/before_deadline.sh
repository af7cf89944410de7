#!/usr/bin/env bash
# Run a command only if SECONDS_NEEDED still fit before DEADLINE (epoch seconds; unset: always
# run): a queue line that would be cut off by the end of the device session is skipped instead,
# with a line in the log.
#
#   bash scripts/device/before_deadline.sh 360 flashprobe bench --preset fa2 --dq both ...
set -u
NEEDED=${1:?usage: before_deadline.sh SECONDS_NEEDED COMMAND [ARGS...]}
shift
[ $# -ge 1 ] || { echo "usage: before_deadline.sh SECONDS_NEEDED COMMAND [ARGS...]" >&2; exit 2; }
if [ -n "${DEADLINE:-}" ] && [ $(($(date +%s) + NEEDED)) -gt "$DEADLINE" ]; then
  echo "before_deadline.sh: skipped ($NEEDED s would pass the deadline): $*"
  exit 0
fi
exec "$@"
