#!/usr/bin/env bash
# ablations/quick.yaml (or SUITE) on one GPU with its cells side by side (`--jobs`: a 6-layer
# model leaves most of an H200 idle), then replay, report, figures and a digest into OUT: what a
# device call brings back.
#
#   OUT=results JOBS=9 STORE=/tmp/quick bash scripts/quick_run.sh [extra ablate arguments]
#   OUT=results JOBS=9 STORE=/tmp/quick bash scripts/quick_run.sh --resume   # next call, warm machine
#
# LIMIT (training, default 480 s) plus REPLAY_LIMIT (60 s) stay under a 10-minute device call;
# a cut-off suite continues from the step each cell reached with --resume in the same STORE.
set -u
OUT=${OUT:?set OUT to a folder for the results}
LIMIT=${LIMIT:-480}
STORE=${STORE:-$(mktemp -d /tmp/quick-run.XXXXXX)}  # fresh: a warm machine keeps /tmp
JOBS=${JOBS:-3}
SUITE=${SUITE:-ablations/quick.yaml}
NAME=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["name"])' "$SUITE")
mkdir -p "$OUT"
# SIGINT, like a Ctrl-C: every training process finishes its step, checkpoints it and stops.
timeout -s INT -k 60 "$LIMIT" python3 -m flashprobe ablate -c "$SUITE" --jobs "$JOBS" --no-replay \
  --store "$STORE" "$@" >"$OUT/train.log" 2>&1
echo "ablate exit $?" >>"$OUT/train.log"
tail -q -n 12 "$STORE/$NAME"/logs/shard-*.log >>"$OUT/train.log" 2>/dev/null
timeout "${REPLAY_LIMIT:-60}" python3 -m flashprobe replay "$STORE" --suite "$NAME" >"$OUT/replay.log" 2>&1
python3 -m flashprobe report "$STORE" --suite "$NAME" --format markdown >"$OUT/report.md" 2>&1
python3 -m flashprobe report "$STORE" --suite "$NAME" --plot "$OUT/plots" --force >/dev/null 2>&1
python3 -m flashprobe digest "$STORE" "$OUT/$NAME.json"
