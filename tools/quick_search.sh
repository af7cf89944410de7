#!/usr/bin/env bash
# The one-GPU search behind ablations/quick*.yaml: several small suites (quick.yaml, or SUITE, with
# other settings, one seed, a subset of its variants) run as concurrent processes on one GPU, each
# into its own store, each cut off after LIMIT seconds; then a digest per store and the logs in
# one archive (a device call brings back few files: more than 6 probes put their digests in
# OUT/search-digests.tar.gz).
#
#   OUT=results LIMIT=500 bash tools/quick_search.sh \
#     'muon-6e-3: optimizer.name=muon optimizer.lr=6e-3 -- paper-code paper-sfa fa2' \
#     'adamw-4e-3: optimizer.lr=4e-3 -- paper-code delta-o-fp32'
#
# A probe is "NAME: KEY=VALUE ... -- VARIANT ...": run-config or suite edits (as `--set`), then
# the variants to run (a branched variant's source runs too).
set -u
OUT=${OUT:?set OUT to a folder for the digests}
LIMIT=${LIMIT:-500}
STORES=${STORES:-$(mktemp -d /tmp/quick-search.XXXXXX)}  # fresh: a warm machine keeps /tmp
SEEDS=${SEEDS:-[0]}
SUITE=${SUITE:-ablations/quick.yaml}
mkdir -p "$OUT" "$STORES/logs"
: >"$OUT/status.txt"
DIGESTS=$OUT
if [ $# -gt 6 ]; then DIGESTS=$STORES/digests; mkdir -p "$DIGESTS"; fi
search() {  # search "NAME: SETTINGS... -- VARIANTS..."
  local name=${1%%:*} rest=${1#*:}
  local settings=${rest%%--*} variant_names=${rest#*--}
  local args=()
  for s in $settings; do args+=(--set "$s"); done
  for v in $variant_names; do args+=(--variant "$v"); done
  timeout "$LIMIT" python3 -m flashprobe ablate -c "$SUITE" --no-replay \
    --store "$STORES/$name" --set "seeds=$SEEDS" "${args[@]}" >"$STORES/logs/$name.log" 2>&1
  echo "$name: exit $?" >>"$OUT/status.txt"
  python3 -m flashprobe digest "$STORES/$name" "$DIGESTS/search-$name.json" \
    >>"$OUT/status.txt" 2>&1
}
for probe in "$@"; do search "$probe" & done
wait
tar -czf "$OUT/search-logs.tar.gz" -C "$STORES" logs
if [ "$DIGESTS" != "$OUT" ]; then tar -czf "$OUT/search-digests.tar.gz" -C "$DIGESTS" .; fi
cat "$OUT/status.txt"
