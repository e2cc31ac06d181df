#!/bin/sh
# shellcheck disable=SC2086
# test-pipeline-compose.sh — TAP checks that dltrain --pipeline composes with
# the options a user expects: --accum K (the stages' gradient sums run on
# over K batches), --clip-norm (one global norm over the stages, the tied wte
# counted once), --checkpoint blocks|sqrt|every:N inside the stages (the
# same bits, a smaller stage peak; auto: each stage's own), --precision bf16 and fp16 (one loss
# scale and one overflow verdict for all stages), each against one device
# with the same options; --mem-limit (each stage spilling within it on its
# device, the unlimited pipeline's bits); and that what it still refuses is
# a usage error.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
DLINFO=${DLINFO:-./tools/dlinfo}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=20
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 20); do skip "test $i" "python3 not found"; done
  exit 0
fi

python3 "$(dirname "$0")/english_corpus.py" "$tmp/corpus.txt" 100000 96
gpt="--model gpt-mini --layers 4 --heads 2 --embd 32 --context 32 --batch 8 --threads 2"
gpt="$gpt --data $tmp/corpus.txt --steps 12 --eval-every 4 --eval-batches 2 --lr 3e-3"
gpt="$gpt --json --quiet"

# differ A B MIN: some round loss of A and B differs by more than MIN
# (relative): the option under test changed the run.
differ() {
  python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
x, y = a['round_losses'] + a['round_val_losses'], b['round_losses'] + b['round_val_losses']
worst = max(abs(p - q) / abs(p) for p, q in zip(x, y))
assert worst > float(sys.argv[3]), worst" "$1" "$2" "$3"
}
# same_bits A B: every round loss of A and B is the same float.
same_bits() {
  python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
x, y = a['round_losses'] + a['round_val_losses'], b['round_losses'] + b['round_val_losses']
assert len(x) == len(y) == 6 and x == y, (x, y)" "$1" "$2"
}
# stage_peaks A B: every stage of B peaked lower than the same stage of A.
stage_peaks_lower() {
  python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1])['devices'] for p in sys.argv[1:3])
pa, pb = [x['peak_device_bytes'] for x in a], [x['peak_device_bytes'] for x in b]
assert len(pa) == len(pb) >= 2 and all(q < p for p, q in zip(pa, pb)), (pa, pb)
print('# stage peaks', pa, '->', pb)" "$1" "$2"
}

# stages_within FILE BUDGET: every stage's budget is BUDGET, its own
# storages' peak within BUDGET less its sums (a float per parameter and a
# granule a tensor), and the run spilled.
stages_within() {
  python3 -c "import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
budget, st = int(sys.argv[2]), d['stages']
assert len(st) >= 2 and d['spilled_bytes'] > 0, d
for s in st:
    assert s['spill_budget_bytes'] == budget, (s, budget)
    assert 0 < s['spill_peak_bytes'] <= budget - s['param_bytes'] - 64 * 512, (s, budget)
print('# budget %d a stage (%.2fx of the first plan), spilled peaks %s, %d bytes spilled' % (
    budget, budget / st[0]['planned_peak_bytes'], [s['spill_peak_bytes'] for s in st],
    d['spilled_bytes']))" "$@"
}

# 1: --accum 2 against one device with --accum 2.
run $gpt --accum 2 --device cpu
cp "$tmp/out" "$tmp/accum-one.json"
run $gpt --accum 2 --pipeline cpu,cpu
[ $rc -eq 0 ] && round_losses_close "$tmp/accum-one.json" "$tmp/out" 1e-5
result "--pipeline cpu,cpu --accum 2: one device's losses with --accum 2 (within 1e-5)"

# 2, 3: --clip-norm, small enough to clip every step: one global norm over
# the stages, as one device clips.
run $gpt --clip-norm 0.05 --device cpu
cp "$tmp/out" "$tmp/clip-one.json"
run $gpt --device cpu
cp "$tmp/out" "$tmp/plain-one.json"
differ "$tmp/plain-one.json" "$tmp/clip-one.json" 1e-3
result "--clip-norm 0.05 clips this run (its losses differ from the unclipped one's)"
run $gpt --clip-norm 0.05 --pipeline cpu,cpu,cpu --micro-batches 2
[ $rc -eq 0 ] && round_losses_close "$tmp/clip-one.json" "$tmp/out" 1e-5
result "--pipeline over three stages --clip-norm 0.05: one device's clipped losses (within 1e-5)"

# 4-6: checkpointing inside the stages recomputes what the stage's backward
# pass needs: the same bits as the pipeline without it, a lower peak on
# every stage.
run $gpt --pipeline cpu,cpu
cp "$tmp/out" "$tmp/pipe.json"
for ck in blocks every:4; do
  run $gpt --pipeline cpu,cpu --checkpoint $ck
  [ $rc -eq 0 ] && same_bits "$tmp/pipe.json" "$tmp/out" &&
    stage_peaks_lower "$tmp/pipe.json" "$tmp/out"
  result "--pipeline cpu,cpu --checkpoint $ck: the same bits, a lower peak on each stage"
done
run $gpt --pipeline cpu,cpu --checkpoint sqrt
[ $rc -eq 0 ] && same_bits "$tmp/pipe.json" "$tmp/out"
result "--pipeline cpu,cpu --checkpoint sqrt: the same bits"

# 7: all of them together, against one device with the same options.
all="--accum 2 --clip-norm 0.05 --checkpoint blocks"
run $gpt $all --device cpu
cp "$tmp/out" "$tmp/all-one.json"
run $gpt $all --pipeline cpu,cpu,cpu --micro-batches 4
[ $rc -eq 0 ] && round_losses_close "$tmp/all-one.json" "$tmp/out" 1e-5
result "--pipeline over three stages with $all: one device's losses (within 1e-5)"

# 8: a stage on PoCL.
if has_opencl; then
  run $gpt $all --pipeline cpu,opencl:0
  [ $rc -eq 0 ] && round_losses_close "$tmp/all-one.json" "$tmp/out" 1e-4
  result "--pipeline cpu,opencl:0 with $all: one device's losses (within 1e-4)"
else
  skip "--pipeline cpu,opencl:0 with $all" "no OpenCL device"
fi

# 9: a classifier: accumulation and clipping over its stages.
mlp="--data generated --limit 1280 --epochs 2 --batch 64 --threads 1 --json --quiet"
run $mlp --accum 2 --clip-norm 0.5 --device cpu
cp "$tmp/out" "$tmp/mlp-one.json"
run $mlp --accum 2 --clip-norm 0.5 --pipeline cpu,cpu
[ $rc -eq 0 ] && losses_close "$tmp/mlp-one.json" "$tmp/out" 1e-5
result "mlp --pipeline cpu,cpu --accum 2 --clip-norm 0.5: one device's losses (within 1e-5)"

# 10, 11: mixed precision: the activations between stages stay fp32; with
# fp16 only the last stage's loss is scaled (the others' upstream gradients
# carry the scale), by scale / M per micro-batch, as one device's rows are.
run $gpt --precision bf16 --device cpu
cp "$tmp/out" "$tmp/bf16-one.json"
run $gpt --precision bf16 --pipeline cpu,cpu,cpu
[ $rc -eq 0 ] && round_losses_close "$tmp/bf16-one.json" "$tmp/out" 1e-5
result "--pipeline over three stages --precision bf16: one device's bf16 losses (within 1e-5)"
run $gpt --precision fp16 $all --device cpu
cp "$tmp/out" "$tmp/fp16-one.json"
run $gpt --precision fp16 $all --pipeline cpu,cpu,cpu --micro-batches 4
[ $rc -eq 0 ] && round_losses_close "$tmp/fp16-one.json" "$tmp/out" 1e-5 &&
  last_json "$tmp/out" "assert d['skipped_steps'] == 0, d['skipped_steps']"
result "--pipeline --precision fp16 $all: one device's fp16 losses (within 1e-5), no skips"

# 12, 13: overflow: from a scale that overflows every step, every update is
# skipped on every stage, as on one device (the parameters never move);
# from one that overflows some, the stages skip together, back off and then
# train. (How many skips depends on the micro-batches: a weight gradient's
# fp16 partial sums cover a micro-batch's rows.)
run $gpt --precision fp16 --loss-scale 1e10 --device cpu
cp "$tmp/out" "$tmp/skip-one.json"
run $gpt --precision fp16 --loss-scale 1e10 --pipeline cpu,cpu,cpu
[ $rc -eq 0 ] && round_losses_close "$tmp/skip-one.json" "$tmp/out" 1e-6 &&
  last_json "$tmp/out" "assert d['skipped_steps'] == 12, d['skipped_steps']"
result "--pipeline fp16 from a scale of 1e10: all 12 updates skipped, as on one device"
run $gpt --precision fp16 --loss-scale 3e7 --pipeline cpu,cpu --micro-batches 8
[ $rc -eq 0 ] && last_json "$tmp/out" "assert 0 < d['skipped_steps'] < 12, d['skipped_steps']
v = d['round_val_losses']
assert v[-1] < v[0] - 0.3, v
print('# skipped', d['skipped_steps'], 'of 12; validation losses', v)"
result "--pipeline fp16 from 3e7: some updates skipped, then the stages train together"

# 14-16: data parallel over MPI ranks, each rank a pipeline: 2 ranks of
# --batch 4 train as one device with --batch 8.
why=$(mpi_why)
if [ -z "$why" ]; then
  mpi2=$(mpi_np 2)
  wide=$(echo "$gpt" | sed 's/--batch 8/--batch 4/')
  $mpi2 "$DLTRAIN" $wide --pipeline cpu,cpu >"$tmp/mpi.json" 2>"$tmp/mpi.err"
  rc=$?
  [ $rc -eq 0 ] && round_losses_close "$tmp/plain-one.json" "$tmp/mpi.json" 1e-5 &&
    grep -q "^mpi      2 ranks, 4 windows per rank per step (8 per update)" "$tmp/mpi.err"
  result "mpirun -np 2 --pipeline cpu,cpu --batch 4: one device's --batch 8 losses (1e-5)"
  $mpi2 "$DLTRAIN" $wide $all --pipeline cpu,cpu,cpu >"$tmp/mpi.json" 2>"$tmp/mpi.err"
  rc=$?
  [ $rc -eq 0 ] && round_losses_close "$tmp/all-one.json" "$tmp/mpi.json" 1e-5
  result "mpirun -np 2 --pipeline over three stages --batch 4 with $all: one device's --batch 8"
  # 16: each rank's stages spilling: their gradient sums read, averaged
  # over the ranks and written back from beside the pools.
  $mpi2 "$DLTRAIN" $wide --pipeline cpu,cpu >"$tmp/mpi.json" 2>"$tmp/mpi.err"
  $mpi2 "$DLTRAIN" $wide --pipeline cpu,cpu --mem-limit 500K >"$tmp/mpim.json" 2>"$tmp/mpi.err"
  rc=$?
  [ $rc -eq 0 ] && same_bits "$tmp/mpi.json" "$tmp/mpim.json" &&
    stages_within "$tmp/mpim.json" 512000
  result "mpirun -np 2 --pipeline cpu,cpu --mem-limit 500K: the unlimited ranks' bits, within it"
else
  skip "mpirun -np 2 --pipeline cpu,cpu" "$why"
  skip "mpirun -np 2 --pipeline with $all" "$why"
  skip "mpirun -np 2 --pipeline --mem-limit" "$why"
fi

# 17: --checkpoint auto: each stage chooses its segments for its own
# device (here the whole device: none), the pipeline's bits.
run $gpt --pipeline cpu,cpu --checkpoint auto
[ $rc -eq 0 ] && same_bits "$tmp/pipe.json" "$tmp/out" &&
  grep -q "checkpointing auto" "$tmp/err"
result "--pipeline --checkpoint auto: each stage's own segments, the same losses bit for bit"
# 18-19: --mem-limit: each stage spills within it on its device (its
# gradient runs too, their sums beside its pool: the pool's peak stays
# within the budget less the sums), the unlimited pipeline's bits.
run $gpt --pipeline cpu,cpu --mem-limit 600K
[ $rc -eq 0 ] && same_bits "$tmp/pipe.json" "$tmp/out" && stages_within "$tmp/out" 614400
result "--pipeline cpu,cpu --mem-limit 600K: each stage within it, the pipeline's bits"
run $gpt --pipeline cpu,cpu --clip-norm 0.05 --precision fp16
cp "$tmp/out" "$tmp/pipe-fp16.json"
run $gpt --pipeline cpu,cpu --clip-norm 0.05 --precision fp16 --mem-limit 400K --offload optimizer
[ $rc -eq 0 ] && same_bits "$tmp/pipe-fp16.json" "$tmp/out" && stages_within "$tmp/out" 409600
result "--pipeline --clip-norm fp16 --mem-limit 400K --offload optimizer: the same bits, within it"
# 20: what a pipeline does not take yet is a usage error that says so.
run $gpt --pipeline cpu,cpu --mem-limit 8M --offload params
[ $rc -eq 2 ] && grep -q "pipeline with --mem-limit goes without --tensor-parallel" "$tmp/err"
result "--pipeline --mem-limit --offload params is a usage error"
