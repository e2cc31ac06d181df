#!/bin/sh
# shellcheck disable=SC2086
# test-tensor-parallel-dltrain.sh — TAP checks of dltrain --tensor-parallel (GPT
# models split Megatron-style: heads, MLP and vocabulary): gpt-mini on two
# CPU peers, on the CPU beside OpenCL device 0, and over two MPI ranks
# trains as one device does (every step's train loss and validation loss
# within fp32 tolerance), each peer holding at most 0.55x of one device's
# parameter bytes; heads follow --tensor-parallel weights (1:3 gives one
# and three heads) with the same losses; a checkpoint saved with
# --tensor-parallel (in one process or across ranks) resumes on one device
# with the unbroken run's next losses, and one device's checkpoint resumes
# split; what is not built is a usage error naming what works (the
# compositions: test-tensor-parallel-compose.sh).
#
# CI runs 12 steps at context 64 (the bar's 50 steps of the full gpt-mini
# are measured once: see README, "Tensor parallelism").

DLTRAIN=${DLTRAIN:-./tools/dltrain}
DLINFO=${DLINFO:-./tools/dlinfo}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=17
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 17); do skip "test $i" "python3 not found"; done
  exit 0
fi

# About 100 KB of English-like text, the same on every machine.
python3 "$(dirname "$0")/english_corpus.py" "$tmp/corpus.txt" 100000 96
common="--model gpt-mini --data $tmp/corpus.txt --context 64 --batch 4 --threads 1"
common="$common --eval-every 1 --eval-batches 1 --json --quiet"

# shard_bytes FILE PEERS: PEERS peers listed, each with at most 0.55x of the
# whole model's parameter bytes.
shard_bytes() {
  python3 -c "import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
tp, whole = d['tensor_parallel'], d['param_bytes']
assert len(tp) == int(sys.argv[2]) and whole > 0, (tp, whole)
worst = max(p['param_bytes'] for p in tp) / whole
assert worst <= 0.55, (tp, whole)
print('# parameter bytes per peer: %s of %d (%.3fx)' % ([p['param_bytes'] for p in tp], whole,
                                                        worst))" "$1" "$2"
}

# 1
run $common --steps 12 --device cpu
cp "$tmp/out" "$tmp/one.json"
[ $rc -eq 0 ]
result "one device: the reference run (12 steps)"

# 2, 3
run $common --steps 12 --tensor-parallel cpu,cpu
cp "$tmp/err" "$tmp/two.err"
[ $rc -eq 0 ] && round_losses_close "$tmp/one.json" "$tmp/out" 1e-5
result "--tensor-parallel cpu,cpu: every step's losses within 1e-5 of one device"
shard_bytes "$tmp/out" 2 && grep -q "^tensor parallel cpu:0 heads 0-1, vocabulary 0-127" \
  "$tmp/two.err"
result "each peer holds half the heads and vocabulary, at most 0.55x of the parameter bytes"

# 4, 5
if has_opencl; then
  run $common --steps 12 --tensor-parallel cpu,opencl:0
  [ $rc -eq 0 ] && round_losses_close "$tmp/one.json" "$tmp/out" 1e-4
  result "--tensor-parallel cpu,opencl:0: every step's losses within 1e-4 of one device"
  shard_bytes "$tmp/out" 2 && last_json "$tmp/out" "
assert [p['device'] for p in d['tensor_parallel']] == ['cpu:0', 'opencl:0'], d
assert [x['device'] for x in d['devices']] == ['cpu:0', 'opencl:0'], d"
  result "cpu,opencl:0: both peers at most 0.55x, both in --json"
else
  skip "--tensor-parallel cpu,opencl:0" "no OpenCL device"
  skip "cpu,opencl:0 peers' bytes" "no OpenCL device"
fi

# 6, 7: uneven weights: heads 1 and 3, a quarter and three quarters of the
# vocabulary.
run $common --steps 12 --tensor-parallel cpu@1,cpu@3
[ $rc -eq 0 ] && round_losses_close "$tmp/one.json" "$tmp/out" 1e-5
result "--tensor-parallel cpu@1,cpu@3: the same losses"
last_json "$tmp/out" "
tp = d['tensor_parallel']
assert [(p['head_first'], p['heads']) for p in tp] == [(0, 1), (1, 3)], tp
assert [(p['vocab_first'], p['vocab']) for p in tp] == [(0, 64), (64, 192)], tp
assert tp[0]['param_bytes'] < tp[1]['param_bytes'], tp"
result "weights 1:3 give one head and three, 64 and 192 vocabulary rows"

# 8, 9: saved split at step 6, resumed on one device to 12: the unbroken
# run's losses for steps 7 to 12.
run $common --steps 6 --tensor-parallel cpu,cpu --save "$tmp/tp.st"
[ $rc -eq 0 ] && [ -s "$tmp/tp.st" ]
result "6 steps with --tensor-parallel cpu,cpu save a checkpoint"
run $common --steps 12 --device cpu --resume "$tmp/tp.st"
[ $rc -eq 0 ] && grep -q "resumed .* after 6 steps" "$tmp/err" && python3 -c "
import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
x, y = a['round_losses'][6:] + a['round_val_losses'][6:], b['round_losses'] + b['round_val_losses']
worst = max(abs(p - q) / abs(p) for p, q in zip(x, y))
assert len(x) == len(y) == 12 and worst <= 1e-5, (x, y, worst)
print('# steps 7-12 resumed on one device: worst relative difference %.2g' % worst)
" "$tmp/one.json" "$tmp/out"
result "it resumes on one device: steps 7-12 have the unbroken run's losses (1e-5)"

# 10: one device's checkpoint resumed split.
run $common --steps 6 --device cpu --save "$tmp/one.st"
run $common --steps 12 --tensor-parallel cpu,cpu --resume "$tmp/one.st"
[ $rc -eq 0 ] && python3 -c "
import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
x, y = a['round_losses'][6:], b['round_losses']
assert len(y) == 6 and max(abs(p - q) / abs(p) for p, q in zip(x, y)) <= 1e-5, (x, y)
" "$tmp/one.json" "$tmp/out"
result "one device's checkpoint resumes split over cpu,cpu with the same losses"

# 11-13: across two MPI ranks.
why=$(mpi_why)
if [ -z "$why" ]; then
  mpi=$(mpi_np 2)
  $mpi "$DLTRAIN" $common --steps 12 --device cpu --tensor-parallel 2 \
    >"$tmp/mpi.json" 2>"$tmp/mpi.err"
  rc=$?
  [ $rc -eq 0 ] && round_losses_close "$tmp/one.json" "$tmp/mpi.json" 1e-5 &&
    grep -q "^mpi      2 ranks, one shard of the model each" "$tmp/mpi.err"
  result "mpirun -np 2 --tensor-parallel 2: every step's losses within 1e-5 of one device"
  shard_bytes "$tmp/mpi.json" 1
  result "rank 0 holds at most 0.55x of the parameter bytes"
  $mpi "$DLTRAIN" $common --steps 6 --device cpu --tensor-parallel 2 --save "$tmp/mpi.st" \
    >"$tmp/out" 2>"$tmp/err" &&
    run $common --steps 12 --device cpu --resume "$tmp/mpi.st" && [ $rc -eq 0 ] && python3 -c "
import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
x, y = a['round_losses'][6:], b['round_losses']
assert len(y) == 6 and max(abs(p - q) / abs(p) for p, q in zip(x, y)) <= 1e-5, (x, y)
" "$tmp/one.json" "$tmp/out"
  result "the ranks' checkpoint (gathered, written by rank 0) resumes on one device"
else
  for what in "mpirun --tensor-parallel 2" "rank 0's bytes" "the ranks' checkpoint"; do
    skip "$what" "$why"
  done
fi

# 14-17: usage errors name what works.
run --model mlp --data generated --tensor-parallel cpu,cpu
[ $rc -eq 2 ] && grep -q "splits GPT models" "$tmp/err"
result "--tensor-parallel on an MLP is a usage error naming GPT models and --devices"
run $common --steps 1 --tensor-parallel cpu,cpu --zero 1
[ $rc -eq 2 ] && grep -q "run mpirun -np N x R with --tensor-parallel N" "$tmp/err"
result "--tensor-parallel --zero 1 in one process (no replicas) is a usage error saying how"
run $common --steps 1 --tensor-parallel cpu,cpu --pipeline cpu,cpu
[ $rc -eq 2 ] && grep -q "with --pipeline as a number of MPI ranks only" "$tmp/err"
result "--tensor-parallel A,B with --pipeline is a usage error naming the form that works"
run $common --steps 1 --tensor-parallel 2
[ $rc -eq 2 ] && grep -q "mpirun -np N" "$tmp/err" && grep -q "cpu,opencl:0" "$tmp/err"
result "--tensor-parallel 2 outside mpirun is a usage error naming both forms"
