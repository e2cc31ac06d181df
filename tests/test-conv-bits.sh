#!/bin/sh
# shellcheck disable=SC2086
# test-conv-bits.sh — TAP checks that slicing a convolution stack under a
# budget keeps the bits on the CPU backend: the cnn trained within a quarter
# of its unlimited peak (its checkpointed segments then run in slices of
# fewer images than a convolution's chunk) and within half of it ends with
# the unlimited run's parameters byte for byte (the checkpoints are the same
# file) and the same losses, training and test, for the planner's choice
# (--plan-strategy auto) and for --checkpoint sqrt; and a model whose
# evaluation block is driven to its smallest slices evaluates and trains to
# the same bits. OpenBLAS's sgemm rounds a column differently in a GEMM of
# another column count, so these hold only because every convolution GEMM
# covers one fixed piece of images (lib/exec/exec_ops.c, run_conv).

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT DLRT_LINK DLRT_PLAN_STRATEGY DLRT_CONV_WORKSPACE

TOOL=$DLTRAIN PLAN=6
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 6); do skip "test $i" "python3 not found"; done
  exit 0
fi

# Two threads whatever the machine: the backend's pool splits a GEMM's
# columns by thread, so bits are compared between runs of one thread count.
cnn="--model cnn --data generated --batch 64 --limit 640 --epochs 1 --device cpu --threads 2
     --json --quiet"

# same_run NAME ARGS: trains the cnn with ARGS; passes when it ran within
# its budget (the last of ARGS' --mem-limit), its checkpoint is the
# unlimited one's bytes and its losses are the same floats. $slices: what
# spill_slice_images must be ("sliced": 1 to 63, "any").
same_run() {
  name=$1
  shift
  run $cnn "$@" --save "$tmp/$name.st"
  [ $rc -eq 0 ] && cmp -s "$tmp/free.st" "$tmp/$name.st" && python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
assert (a['epoch_losses'], a['test_loss']) == (b['epoch_losses'], b['test_loss']), (a, b)
assert b['peak_device_bytes'] <= int(sys.argv[3]), b
assert b['spilled_bytes'] > 0, b
if sys.argv[4] == 'sliced':
    assert 0 < b['spill_slice_images'] < b['batch'], b['spill_slice_images']" \
    "$tmp/free.json" "$tmp/out" "$limit" "$slices"
}

# 1: the unlimited run, saved; its peak sets the budgets.
run $cnn --save "$tmp/free.st"
cp "$tmp/out" "$tmp/free.json"
[ $rc -eq 0 ] && last_json "$tmp/free.json" "assert d['peak_device_bytes'] > 8 << 20, d"
result "cnn on cpu: the unlimited run"
peak=$(last_json "$tmp/free.json" "print(d['peak_device_bytes'])" 2>/dev/null || echo 0)

# 2-3: a quarter of the peak: the segments run in slices (16 images, the
# first convolution's piece, where its own chunk is 32).
limit=$((peak / 4)) slices=sliced
same_run quarter-auto --mem-limit $limit --offload optimizer --plan-strategy auto
result "a quarter of the peak ($limit B), --plan-strategy auto: in slices, the same bytes as unlimited"
same_run quarter-sqrt --mem-limit $limit --offload optimizer --checkpoint sqrt
result "a quarter of the peak, --checkpoint sqrt: in slices, the same bytes as unlimited"

# 4: half the peak.
limit=$((peak / 2)) slices=any
same_run half-auto --mem-limit $limit --offload optimizer --plan-strategy auto
result "half the peak ($limit B), --plan-strategy auto: the same bytes as unlimited"

# 5-6: an evaluation block (two convolutions in a segment of the evaluation
# schedule) driven to its smallest slices, which were not bounded by its
# convolutions' pieces (no weight gradients in it): its test loss, and the
# training run's parameters, are the unlimited run's.
model="$tmp/eval-worst.model"
printf 'conv2d 12 3 pad=1\nrelu\nmaxpool 2\nconv2d 16 3 pad=5\nrelu\nmaxpool 2\nlinear 10\n' >"$model"
worst="--data generated --model $model --batch 64 --limit 192 --epochs 1 --device cpu --threads 2
       --json --quiet"
run $worst --save "$tmp/worst-free.st"
cp "$tmp/out" "$tmp/worst-free.json"
[ $rc -eq 0 ]
result "a model of two convolution blocks: the unlimited run"
run $worst --mem-limit 2200K --offload optimizer --checkpoint sqrt --save "$tmp/worst.st"
[ $rc -eq 0 ] && cmp -s "$tmp/worst-free.st" "$tmp/worst.st" && python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
assert (a['epoch_losses'], a['test_loss']) == (b['epoch_losses'], b['test_loss']), (a, b)
assert 0 < b['spill_slice_images'] < 64 and b['peak_device_bytes'] <= 2200 << 10, b" \
  "$tmp/worst-free.json" "$tmp/out"
result "the same model in 2200K: the smallest slices, the same bytes and test loss as unlimited"
