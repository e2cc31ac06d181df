#!/bin/sh
# shellcheck disable=SC2086
# test-tensor-parallel-compose.sh — TAP checks of dltrain --tensor-parallel
# composed with the rest (issue 22, "they compose"): gpt-mini split over two
# CPU peers trains as one device does (every step's train and validation
# loss within tolerance) with --accum 2, with --clip-norm (the global norm:
# a clip that bites, and the same losses), with --checkpoint blocks (a
# lower planned peak per peer) and with --precision fp16 (loss scaling, and
# the updates it skips agreed by every shard, the same over ranks as over
# threads); and data x tensor parallel over MPI ranks: mpirun -np 4
# --tensor-parallel 2 (2 replicas of 2 shards, one a rank) and mpirun -np 2
# --tensor-parallel cpu,cpu (a replica per rank, split over its devices)
# train as one device on the replicas' whole batch, save one whole
# checkpoint that resumes on one device with the unbroken run's losses,
# and replicas split otherwise stop the job; what stays refused is a usage error naming what works.
#
# CI runs 12 steps at context 64 (the bars' 50 steps of the full gpt-mini
# are measured once: see README, "Tensor parallelism").

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=18
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 18); do skip "test $i" "python3 not found"; done
  exit 0
fi

python3 "$(dirname "$0")/english_corpus.py" "$tmp/corpus.txt" 100000 96
common="--model gpt-mini --data $tmp/corpus.txt --context 64 --threads 1"
common="$common --eval-every 1 --eval-batches 1 --json --quiet --steps 12"

# differ A B: the two runs' losses are not the same (the option bites).
differ() {
  python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
x, y = a['round_losses'], b['round_losses']
worst = max(abs(p - q) / abs(p) for p, q in zip(x, y))
assert worst > 1e-3, (x, y, worst)
print('# the runs differ by up to %.2g' % worst)" "$1" "$2"
}

# one NAME ARGS: the one-device reference run, kept as $tmp/NAME.json.
one() {
  name=$1
  shift
  run $common --device cpu "$@"
  cp "$tmp/out" "$tmp/$name.json"
  [ $rc -eq 0 ]
}

# 1, 2: --accum 2.
one accum --batch 4 --accum 2
run $common --batch 4 --accum 2 --tensor-parallel cpu,cpu
[ $rc -eq 0 ] && round_losses_close "$tmp/accum.json" "$tmp/out" 1e-5
result "--tensor-parallel cpu,cpu --accum 2: every step's losses within 1e-5 of one device"
one plain --batch 4 && differ "$tmp/plain.json" "$tmp/accum.json"
result "(--accum 2 trains otherwise than --accum 1)"

# 3, 4: --clip-norm 0.1 clips every step of these (gradient norms near 1).
one clip --batch 4 --clip-norm 0.1
run $common --batch 4 --clip-norm 0.1 --tensor-parallel cpu,cpu
[ $rc -eq 0 ] && round_losses_close "$tmp/clip.json" "$tmp/out" 1e-5
result "--tensor-parallel cpu,cpu --clip-norm 0.1: losses within 1e-5 of one device"
differ "$tmp/plain.json" "$tmp/clip.json"
result "(the clip bites: the losses are not the unclipped run's)"

# 5, 6: --checkpoint blocks.
run $common --batch 4 --checkpoint blocks --tensor-parallel cpu,cpu
cp "$tmp/out" "$tmp/blocks.json"
[ $rc -eq 0 ] && round_losses_close "$tmp/plain.json" "$tmp/out" 1e-5
result "--tensor-parallel cpu,cpu --checkpoint blocks: losses within 1e-5 of one device"
run $common --batch 4 --tensor-parallel cpu,cpu
[ $rc -eq 0 ] && python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
x = max(p['planned_peak_bytes'] for p in a['tensor_parallel'])
y = max(p['planned_peak_bytes'] for p in b['tensor_parallel'])
assert x < y, (x, y)
print('# planned peak per peer %d with blocks, %d without' % (x, y))" "$tmp/blocks.json" "$tmp/out"
result "each peer plans a lower peak with --checkpoint blocks"

# 7, 8: fp16 with dynamic loss scaling from 1024 (no update overflows
# there, on one device or split); then from a scale of 2^30, which
# overflows the first updates: they are skipped (every shard agrees on it,
# or the shards would train apart) and the rest train. Where the updates
# overflow, one device and the split differ (from the default 65536 one
# device skipped 4 of these 12 updates that the split made: its fp16
# intermediates are not the shards'), so the ranks' form below must skip
# what the threads' skip.
one fp16 --batch 4 --precision fp16 --loss-scale 1024
run $common --batch 4 --precision fp16 --loss-scale 1024 --tensor-parallel cpu,cpu
[ $rc -eq 0 ] && round_losses_close "$tmp/fp16.json" "$tmp/out" 1e-3
result "--tensor-parallel cpu,cpu --precision fp16: losses within 1e-3 of one device"
run $common --batch 4 --precision fp16 --loss-scale 1073741824 --tensor-parallel cpu,cpu
cp "$tmp/out" "$tmp/skip.json"
[ $rc -eq 0 ] && last_json "$tmp/out" "
import math
x, s = d['round_losses'] + d['round_val_losses'], d['skipped_steps']
assert 0 < s < 12 and all(math.isfinite(v) for v in x), (s, x)
assert d['round_losses'][-1] < d['round_losses'][0] - 0.3, x
print('# %d of 12 updates skipped, train loss %.4f to %.4f' % (s, x[0], d['round_losses'][-1]))"
result "fp16 from a scale of 2^30: the overflowing updates skipped, the rest train"

# 9-16: data x tensor parallel over MPI ranks.
why=$(mpi_why)
if [ -z "$why" ]; then
  mpi2=$(mpi_np 2)
  mpi4=$(mpi_np 4)
  one wide --batch 8
  $mpi4 "$DLTRAIN" $common --batch 4 --device cpu --tensor-parallel 2 \
    >"$tmp/dt.json" 2>"$tmp/dt.err"
  rc=$?
  [ $rc -eq 0 ] && round_losses_close "$tmp/wide.json" "$tmp/dt.json" 1e-5 &&
    grep -q "^mpi      4 ranks: 2 data-parallel replicas of 2 shards" "$tmp/dt.err"
  result "mpirun -np 4 --tensor-parallel 2 --batch 4: one device's --batch 8 losses (1e-5)"
  last_json "$tmp/dt.json" "
tp, whole = d['tensor_parallel'], d['param_bytes']
assert len(tp) == 1 and tp[0]['param_bytes'] <= 0.55 * whole, (tp, whole)
print('# rank 0: %d of %d parameter bytes (%.3fx)' % (tp[0]['param_bytes'], whole,
                                                      tp[0]['param_bytes'] / whole))"
  result "each rank of the 2 x 2 holds at most 0.55x of the parameter bytes"
  $mpi2 "$DLTRAIN" $common --batch 4 --tensor-parallel cpu,cpu >"$tmp/mixed.json" \
    2>"$tmp/mixed.err"
  rc=$?
  [ $rc -eq 0 ] && round_losses_close "$tmp/wide.json" "$tmp/mixed.json" 1e-5
  result "mpirun -np 2 --tensor-parallel cpu,cpu --batch 4: one device's --batch 8 losses"
  # Saved at step 6 by the 2 x 2, resumed on one device to step 12.
  $mpi4 "$DLTRAIN" $(echo "$common" | sed 's/--steps 12/--steps 6/') --batch 4 --device cpu \
    --tensor-parallel 2 --save "$tmp/dt.st" >"$tmp/out" 2>"$tmp/err" &&
    run $common --batch 8 --device cpu --resume "$tmp/dt.st" && [ $rc -eq 0 ] &&
    resumed_losses "$tmp/wide.json" "$tmp/out" 6 6 1e-5
  result "the 2 x 2's checkpoint (one file, whole tensors) resumes on one device"
  $mpi2 "$DLTRAIN" $common --batch 4 --precision fp16 --loss-scale 1073741824 --device cpu \
    --tensor-parallel 2 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 0 ] && round_losses_close "$tmp/skip.json" "$tmp/out" 1e-5 && python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
assert a['skipped_steps'] == b['skipped_steps'], (a['skipped_steps'], b['skipped_steps'])" \
    "$tmp/skip.json" "$tmp/out"
  result "fp16 from 2^30 over 2 ranks skips the updates the threads skip, the same losses"
  # All at once: 2 x 2 ranks with --accum 2, --clip-norm 0.1, --checkpoint blocks.
  one all --batch 8 --accum 2 --clip-norm 0.1
  $mpi4 "$DLTRAIN" $common --batch 4 --accum 2 --clip-norm 0.1 --checkpoint blocks \
    --device cpu --tensor-parallel 2 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 0 ] && round_losses_close "$tmp/all.json" "$tmp/out" 1e-5
  result "2 x 2 ranks with --accum 2 --clip-norm 0.1 --checkpoint blocks: one device's losses"
  $mpi4 "$DLTRAIN" $common --batch 4 --device cpu --tensor-parallel 3 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -ne 0 ] && grep -q "a divisor of the ranks" "$tmp/err"
  result "mpirun -np 4 --tensor-parallel 3 is a usage error naming the divisors"
  # Replicas split otherwise (one rank's weights 1:3) stop with a message.
  mpmd=$(echo "$mpi2" | sed 's/ -np 2$//')
  $mpmd -np 1 "$DLTRAIN" $common --batch 4 --tensor-parallel cpu,cpu : \
    -np 1 "$DLTRAIN" $common --batch 4 --tensor-parallel cpu@1,cpu@3 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -ne 0 ] && grep -q "split differently" "$tmp/err"
  result "replicas split differently (cpu,cpu beside cpu@1,cpu@3) stop the job, saying so"
else
  for what in "2 x 2 losses" "2 x 2 bytes" "mixed losses" "2 x 2 checkpoint" "fp16 ranks" \
    "2 x 2 all" "divisor" "split differently"; do
    skip "$what" "$why"
  done
fi

# 17, 18: what stays refused names what works (the memory options that
# compose: test-tensor-parallel-memory.sh).
run $common --batch 4 --tensor-parallel cpu,cpu --mem-limit 100M --offload params --clip-norm 0.1
[ $rc -eq 2 ] && grep -q "offload optimizer, activations or all work" "$tmp/err"
result "--tensor-parallel --offload params --clip-norm is a usage error naming what works"
run $common --batch 4 --tensor-parallel cpu,cpu --mem-limit 100M --offload auto
[ $rc -eq 2 ] && grep -q "offload activations, optimizer, params or all, not auto" "$tmp/err"
result "--tensor-parallel --offload auto is a usage error naming the offloads that work"
