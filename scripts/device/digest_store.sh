#!/usr/bin/env bash
# Digest a result store for a device call: `flashprobe digest STORE OUT_JSON`, and where that
# refuses the store's replay results (a torn or unreadable replay.json: exit 2, as `report`
# refuses them), set every replay.json aside (renamed *.set-aside) and digest again, so the
# call's training results come back even when its replay did not. Used by call.sh, collect.sh.
#
#   bash scripts/device/digest_store.sh STORE OUT_JSON
set -u
store=${1:?usage: digest_store.sh STORE OUT_JSON} out=${2:?usage: digest_store.sh STORE OUT_JSON}
python3 -m flashprobe digest "$store" "$out" --every 10 >/dev/null && exit 0
echo "digest_store.sh: the digest of $store failed (above); again without its replay.json files" >&2
find "$store" -name replay.json -exec mv {} {}.set-aside \;
python3 -m flashprobe digest "$store" "$out" --every 10 >/dev/null
