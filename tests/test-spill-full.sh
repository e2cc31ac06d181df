#!/bin/sh
# shellcheck disable=SC2086
# test-spill-full.sh — TAP checks of a spill directory that fills up: mlp
# spilling to the disk tier (--host-limit) under a file-size limit
# (RLIMIT_FSIZE with SIGXFSZ ignored, so a write or a reservation past it
# fails with EFBIG, as a full disk fails with ENOSPC or a quota with EDQUOT) stops with
# an error naming the folder and the fix and reports no results, whether
# the disk fills while the model is built or half-way through training;
# --spill-dir puts the file elsewhere (the same losses) and is checked.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT DLRT_SPILL_DIR

TOOL=$DLTRAIN PLAN=8
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 8); do skip "test $i" "python3 not found"; done
  exit 0
fi

common="--data generated --limit 1920 --epochs 2 --threads 1 --prefetch 1 --json --quiet
  --device cpu --mem-limit 3M --host-limit 1M --offload all"
mkdir -p "$tmp/spill"

# no_results: the run printed no JSON results line.
no_results() { ! grep -q '^{' "$tmp/out"; }

run $common
cp "$tmp/out" "$tmp/tmpdir.json"
[ $rc -eq 0 ] && last_json "$tmp/tmpdir.json" "assert d['disk_written_bytes'] > 8 << 20, d"
result "the run spills over 8 MiB to the disk tier in \$TMPDIR"

run $common --spill-dir "$tmp/spill"
[ $rc -eq 0 ] && python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
assert a['epoch_losses'] == b['epoch_losses'] and a['test_loss'] == b['test_loss'], (a, b)" \
  "$tmp/tmpdir.json" "$tmp/out"
result "--spill-dir DIR: the same losses bit for bit"

# A limit the spill file reaches while the model's state goes to disk.
run_limited $((1 << 20)) "$TOOL" $common --spill-dir "$tmp/spill"
[ $rc -eq 1 ] && no_results
result "a spill folder full while the model is built: exit 1, no results"
grep -q "the spill directory $tmp/spill is full" "$tmp/err" &&
  grep -q -- "--spill-dir DIR" "$tmp/err" && grep -q -- "--host-limit" "$tmp/err"
result "the message names the folder and the fixes (--spill-dir, --host-limit)"

# One it reaches half-way through training.
run_limited $((8 << 20)) "$TOOL" $common --spill-dir "$tmp/spill"
[ $rc -eq 1 ] && no_results
result "a spill folder that fills up during training: exit 1, no results"
grep -q "training failed: .*the spill directory $tmp/spill is full" "$tmp/err"
result "the message says where the step stopped and names the folder"

run $common --spill-dir "$tmp/no-such-folder"
[ $rc -eq 2 ] && grep -q -- "--spill-dir $tmp/no-such-folder: not a folder" "$tmp/err"
result "--spill-dir of a missing folder is a usage error"
touch "$tmp/a-file"
run $common --spill-dir "$tmp/a-file"
[ $rc -eq 2 ]
result "--spill-dir of a file is a usage error"
