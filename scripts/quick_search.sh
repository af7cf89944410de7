#!/usr/bin/env bash
# The one-GPU search behind ablations/quick.yaml: several small suites (quick.yaml with other
# learning rates / optimizers, one seed, a subset of its variants) run as concurrent processes
# on one GPU, each into its own store, each cut off after LIMIT seconds; then a digest per store.
#
#   OUT=results LIMIT=500 bash scripts/quick_search.sh
set -u
OUT=${OUT:?set OUT to a folder for the digests}
LIMIT=${LIMIT:-500}
STORES=${STORES:-/tmp/quick-search}
mkdir -p "$OUT" "$STORES"
search() {  # search NAME SETTINGS... -- VARIANTS...
  local name=$1; shift
  local sets=() variants=()
  while [ "$1" != "--" ]; do sets+=(--set "$1"); shift; done; shift
  for v in "$@"; do variants+=(--variant "$v"); done
  timeout "$LIMIT" python3 -m flashprobe ablate -c ablations/quick.yaml --no-replay \
    --store "$STORES/$name" --set 'seeds=[0]' "${sets[@]}" "${variants[@]}" \
    >"$OUT/$name.log" 2>&1
  echo "$name: exit $?" >>"$OUT/status.txt"
  python3 scripts/store_digest.py "$STORES/$name" "$OUT/$name.json" >>"$OUT/status.txt" 2>&1
}
search adamw-6e-3 optimizer.lr=6e-3 train.steps=3000 -- \
  paper-code delta-o-fp32 score-fp32 acc-fp32 fa2 fp32-attention &
search muon-4e-3 optimizer.name=muon optimizer.lr=4e-3 train.steps=2500 -- \
  paper-code delta-o-fp32 fa2 &
search adamw-4e-3 optimizer.lr=4e-3 train.steps=2500 -- paper-code delta-o-fp32 fa2 &
wait
cat "$OUT/status.txt"
