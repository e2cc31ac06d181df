#!/bin/sh
# shellcheck disable=SC2086
# test-pinned-staging.sh — TAP checks of the pinned pool's budget seen from
# dltrain: mlp spilling under --mem-limit with its optimizer on the host,
# its host copies past a small DLRT_PINNED_LIMIT, trains with the same
# losses bit for bit as with the default limit, its staging in pageable
# memory (the JSON counts it), and says so once on stderr; a
# DLRT_PINNED_LIMIT that is no size is a clear error.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT DLRT_PINNED_LIMIT

TOOL=$DLTRAIN PLAN=6
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 6); do skip "test $i" "python3 not found"; done
  exit 0
fi

common="--data generated --limit 1920 --epochs 2 --threads 1 --prefetch 1 --json --quiet
  --device cpu --mem-limit 3M --offload optimizer"

run $common
cp "$tmp/out" "$tmp/default.json"
[ $rc -eq 0 ] && last_json "$tmp/default.json" "
assert d['pageable_staging_peak_bytes'] == 0, d
assert d['spilled_bytes'] > 0, d"
result "the default limit: the run spills, all its staging pinned"

# The host copies of mlp's parameters, state and activations are some MiB:
# a 256 KiB pinned pool holds few of them.
DLRT_PINNED_LIMIT=256K run $common
cp "$tmp/out" "$tmp/small.json"
[ $rc -eq 0 ]
result "DLRT_PINNED_LIMIT=256K: the run completes"
python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
assert a['epoch_losses'] == b['epoch_losses'] and a['test_loss'] == b['test_loss'], (a, b)" \
  "$tmp/default.json" "$tmp/small.json"
result "the same losses bit for bit as under the default limit"
last_json "$tmp/small.json" "assert d['pageable_staging_peak_bytes'] > 256 * 1024, d"
result "the staging past the limit went to pageable memory (the JSON counts it)"
[ "$(grep -c 'pinned host pool is at its limit' "$tmp/err")" -eq 1 ] &&
  grep -q 'DLRT_PINNED_LIMIT' "$tmp/err"
result "stderr says so once, naming DLRT_PINNED_LIMIT"

DLRT_PINNED_LIMIT=lots run $common
[ $rc -ne 0 ] && grep -q 'DLRT_PINNED_LIMIT="lots" is not a size' "$tmp/err"
result "DLRT_PINNED_LIMIT=lots: a clear error, a non-zero exit"
