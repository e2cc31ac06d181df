#!/bin/sh
# shellcheck disable=SC2086
# test-pipeline.sh — TAP checks of the data pipeline through the tools:
# dlrecord writes record files that dltrain reads (read or mapped) with the
# same results as the IDX or generated source; the batches, and so the
# losses, do not depend on --workers or --prefetch; the JSON reports the
# loader's figures; corrupt files and bad options fail clearly. DLTRAIN and
# DLRECORD may name other binaries.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
DLRECORD=${DLRECORD:-./tools/dlrecord}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=17
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

json() {
  python3 -c "import json, sys; d = json.loads(sys.stdin.read().splitlines()[-1])
$1" <"${2:-$tmp/out}"
}
# The epoch losses and test loss of the JSON in FILE, as one line.
losses() {
  python3 -c "import json, sys; d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(d['epoch_losses'], d['test_loss'])" "$1"
}

det="--device cpu --threads 1 --deterministic --limit 2000 --batch 32 --epochs 2 --json --quiet"
aug="--augment --erase 0.3 --normalize 0.29,0.35"

# 1-3
"$DLRECORD" --help >"$tmp/out" 2>&1 && grep -q "convert SOURCE FOLDER" "$tmp/out"
result "dlrecord --help exits 0 and documents convert"
"$DLRECORD" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "give a command" "$tmp/err"
result "dlrecord without a command is a usage error (exit 2)"
"$DLRECORD" convert generated "$tmp/rec" >"$tmp/out" 2>"$tmp/err" &&
  [ "$(wc -c <"$tmp/rec/train.dlrec")" -eq $((64 + 60000 * 785)) ] &&
  [ "$(wc -c <"$tmp/rec/test.dlrec")" -eq $((64 + 10000 * 785)) ]
result "dlrecord convert generated writes train.dlrec and test.dlrec of the right sizes"

if [ $have_python = no ]; then
  for i in 4 5 6 7 8 9 10 11; do skip "test $i" "python3 not found"; done
else
  # 4, 5
  run --data generated $det
  cp "$tmp/out" "$tmp/generated.json"
  run --data "$tmp/rec" $det
  cp "$tmp/out" "$tmp/records.json"
  [ $rc -eq 0 ] && [ "$(losses "$tmp/records.json")" = "$(losses "$tmp/generated.json")" ]
  result "training from the record files equals training from the generated source"
  run --data "$tmp/rec" --mmap $det
  [ $rc -eq 0 ] && grep -q mapped "$tmp/err" &&
    [ "$(losses "$tmp/out")" = "$(losses "$tmp/generated.json")" ]
  result "mapped record files (--mmap) give the same losses"

  # 6-8: the same batches for any number of workers and any prefetch depth.
  run --data generated $det $aug --workers 1 --prefetch 1
  cp "$tmp/out" "$tmp/w1.json"
  run --data generated $det $aug --workers 4 --prefetch 3
  cp "$tmp/out" "$tmp/w4.json"
  [ $rc -eq 0 ] && [ "$(losses "$tmp/w4.json")" = "$(losses "$tmp/w1.json")" ]
  result "augmented: --workers 4 --prefetch 3 gives the losses of --workers 1 --prefetch 1"
  run --data generated $det $aug --workers 0 --prefetch 0
  [ $rc -eq 0 ] && [ "$(losses "$tmp/out")" = "$(losses "$tmp/w1.json")" ]
  result "augmented: loading in the training thread (--workers 0 --prefetch 0) too"
  [ "$(losses "$tmp/w1.json")" != "$(losses "$tmp/generated.json")" ]
  result "augmentation changes the losses (it does something)"

  # 9
  json 'assert d["workers"] == 4 and d["prefetch"] == 3 and d["augment"] is True, d
assert 0 <= d["stall_fraction"] <= 1, d["stall_fraction"]
assert d["loader_images_per_s"] > 0, d["loader_images_per_s"]' "$tmp/w4.json"
  result "the JSON reports workers, prefetch, augment, stall_fraction, loader_images_per_s"

  # 10: a single record file trains, its last tenth the test split (it was
  # always refused).
  run --data "$tmp/rec/test.dlrec" --device cpu --epochs 1 --json --quiet
  [ $rc -eq 0 ] && json 'assert d["train_images"] == 9000 and d["test_images"] == 1000, d
assert d["test_accuracy"] > 0.5, d' &&
    grep -q "9000 training and 1000 test images" "$tmp/err"
  result "a single record file as --data trains on 9/10 and tests on its last tenth"

  # 11
  head -c 1000000 "$tmp/rec/train.dlrec" >"$tmp/cut.dlrec"
  mkdir "$tmp/cut" && mv "$tmp/cut.dlrec" "$tmp/cut/train.dlrec" &&
    cp "$tmp/rec/test.dlrec" "$tmp/cut/test.dlrec"
  run --data "$tmp/cut" $det
  [ $rc -eq 1 ] && grep -q "cut/train.dlrec: truncated" "$tmp/err" && [ ! -s "$tmp/out" ]
  result "a truncated record file exits 1 naming the file"
fi

# 12-16
for args in "--workers -1" "--prefetch 65" "--normalize 0.5" "--erase 1.5"; do
  run --data generated $args
  [ $rc -eq 2 ] && [ -s "$tmp/err" ] && [ ! -s "$tmp/out" ]
  result "$args is a usage error (exit 2)"
done
"$DLRECORD" info "$tmp/rec/train.dlrec" "$tmp/nothing.dlrec" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "60000 samples" "$tmp/out" && grep -q "nothing.dlrec" "$tmp/err"
result "dlrecord info reports a good file and fails (exit 1) naming a missing one"

# 17: dlrecord writes only over regular files: a FIFO as FOLDER/test.dlrec
# is refused before anything is written (no train.dlrec beside it), exit 1,
# and stays a FIFO.
mkdir "$tmp/fifo-rec" && mkfifo "$tmp/fifo-rec/test.dlrec"
"$DLRECORD" convert generated "$tmp/fifo-rec" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "test.dlrec is a FIFO" "$tmp/err" && [ -p "$tmp/fifo-rec/test.dlrec" ] &&
  [ ! -e "$tmp/fifo-rec/train.dlrec" ]
result "dlrecord convert to a FIFO exits 1 before writing, naming it, and leaves the FIFO"
