#!/bin/sh
# shellcheck disable=SC2086
# test-dltrain-diverge.sh — TAP checks that dltrain stops a run that diverges: a loss
# that turns inf or NaN (a learning rate of 1e30, a huge weight decay, a
# schedule that grows the rate past a float, fp16 or bf16 with either) exits 1
# with a message naming the update and the likely cause, and no checkpoint is
# written or overwritten. automake's tap-driver runs it from the top of the
# build tree; DLTRAIN may name another binary. Short runs on generated data.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=8
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

quick="--data generated --limit 1000 --batch 32 --device cpu --quiet"
ck="$tmp/good.safetensors"

# 1: a good checkpoint to resume from.
run $quick --epochs 1 --save "$ck"
[ $rc -eq 0 ] && [ -s "$ck" ] && cp "$ck" "$tmp/good.copy"
result "one good epoch saves a checkpoint"

# 2, 3: resumed with --lr 1e30, the run stops in its second epoch and leaves
# the checkpoint as it was.
run $quick --epochs 2 --resume "$ck" --save "$ck" --lr 1e30
[ $rc -eq 1 ] && grep -q "training diverged at update [0-9]* (epoch 2, step" "$tmp/err" &&
  grep -q "the learning rate 1e+30" "$tmp/err" && ! grep -qi "loss.*nan" "$tmp/out"
result "--lr 1e30 exits 1 naming the update, epoch and learning rate"
cmp -s "$ck" "$tmp/good.copy"
result "... and the checkpoint it would have overwritten is unchanged"

# 4-8: each stops at once (exit 1, the cause named) and writes no checkpoint.
check() { # CAUSE ARGS...: the run diverges with CAUSE in the message
  cause=$1
  shift
  rm -f "$tmp/new.safetensors"
  run $quick --epochs 2 --save "$tmp/new.safetensors" "$@"
  [ $rc -eq 1 ] && grep -q "training diverged" "$tmp/err" && grep -q -- "$cause" "$tmp/err" &&
    [ ! -e "$tmp/new.safetensors" ]
  result "$* exits 1 blaming '$cause', writing no checkpoint"
}
check "the weight decay 100000" --optimizer sgd --weight-decay 1e5
check "the schedule raised the learning rate" --schedule step:1:1e30
check "updates in a row, each skipped by the loss scaler" --precision fp16 --lr 1e30
check "the learning rate 1e+30" --precision bf16 --lr 1e30
check "fp16 without loss scaling" --precision fp16 --loss-scale off --lr 1e30
