#!/bin/sh
# shellcheck disable=SC2086
# test-tensor-pipeline.sh — TAP checks of tensor x pipeline parallelism
# (issue 22, "they compose"): mpirun -np N dltrain --pipeline A,B
# --tensor-parallel N cuts a GPT's blocks into pipeline stages in each
# process and splits every stage Megatron-style over the N ranks (each rank
# holds its shard of every stage: heads, MLP columns, vocabulary rows of the
# tied wte on both end stages), the stages' collectives over the ranks; with
# N x R ranks, R data-parallel replicas. It trains as one device does
# (every step's train and validation loss within 1e-5, relative), each
# stage of each rank holding about 1/(stages x N) of one device's parameter
# bytes (--json's "stages"); --accum, --clip-norm (one global norm over the
# stages and shards), --checkpoint blocks and fp16 go with it; a checkpoint
# saved from it is one whole file that resumes on one device and back into
# the composition with the unbroken run's losses; what it does not take is
# a usage error naming what works.
#
# CI runs 12 steps at context 64 (the README's table: the same runs).

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=15
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

mpi_gpt_setup

# stage_bytes FILE STAGES RANKS MOST: STAGES stages listed, each of this
# rank's shard (ranks RANKS), each with at most MOST of the whole model's
# parameter bytes.
stage_bytes() {
  python3 -c "import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
st, whole = d['stages'], d['param_bytes']
n, ranks, most = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
assert len(st) == n and whole > 0 and all(s['ranks'] == ranks for s in st), (st, whole)
worst = max(s['param_bytes'] for s in st) / whole
assert worst <= most, (st, whole, worst)
print('# parameter bytes per stage of rank 0: %s of %d (worst %.3fx)'
      % ([s['param_bytes'] for s in st], whole, worst))" "$@"
}

# 1: the reference, one device.
run $common --steps 12 --device cpu
cp "$tmp/out" "$tmp/one.json"
[ $rc -eq 0 ]
result "one device: the reference run (12 steps)"

# 2, 3: two stages in each of two ranks, each stage split over both.
mpi_ranks 2 tp2 --steps 12 --pipeline cpu,cpu --tensor-parallel 2
[ $rc -eq 0 ] && round_losses_close "$tmp/one.json" "$tmp/tp2.json" 1e-5
result "mpirun -np 2 --pipeline cpu,cpu --tensor-parallel 2: losses within 1e-5 of one device"
stage_bytes "$tmp/tp2.json" 2 2 0.30 &&
  grep -q "; each stage split over 2 ranks, this one's heads 0-1, vocabulary 0-127" \
    "$tmp/tp2.err"
result "each stage of a rank holds at most 0.30x of the parameter bytes (1/4 ideal)"

# 4: 2 tensor-parallel ranks x 2 data-parallel replicas, against one device
# at the replicas' whole batch.
run $common --steps 12 --device cpu --batch 8
cp "$tmp/out" "$tmp/one8.json"
mpi_ranks 4 tp2dp2 --steps 12 --pipeline cpu,cpu --tensor-parallel 2
[ $rc -eq 0 ] && round_losses_close "$tmp/one8.json" "$tmp/tp2dp2.json" 1e-5
result "mpirun -np 4 (2 replicas of 2 shards, 2 stages each): within 1e-5 of one device at batch 8"

# 5, 6: --accum 2, --clip-norm 0.1 (clips every step: the global norm over
# both stages and both shards, the tied wte once) and --checkpoint blocks.
opts="--accum 2 --clip-norm 0.1 --checkpoint blocks"
run $common --steps 12 --device cpu $opts
cp "$tmp/out" "$tmp/one-opts.json"
mpi_ranks 2 opts --steps 12 --pipeline cpu,cpu --tensor-parallel 2 $opts
[ $rc -eq 0 ] && round_losses_close "$tmp/one-opts.json" "$tmp/opts.json" 1e-5
result "--accum 2 --clip-norm 0.1 --checkpoint blocks: within 1e-5 of one device with them"
run $common --steps 12 --device cpu --accum 2 --checkpoint blocks
! round_losses_close "$tmp/out" "$tmp/opts.json" 1e-3 >/dev/null 2>&1
result "and the clip changes the run (more than 1e-3 from the unclipped one)"

# 7: the same options over 2 replicas of 2 shards, against one device at
# batch 8 (the clipping norm of the replicas' mean gradients).
run $common --steps 12 --device cpu --batch 8 $opts
cp "$tmp/out" "$tmp/one8-opts.json"
mpi_ranks 4 opts4 --steps 12 --pipeline cpu,cpu --tensor-parallel 2 $opts
[ $rc -eq 0 ] && round_losses_close "$tmp/one8-opts.json" "$tmp/opts4.json" 1e-5
result "2 replicas x 2 shards with them: within 1e-5 of one device at batch 8"

# 8, 9: saved after 4 steps from the composition (the shards of every
# stage gathered, rank 0 writes one whole file), resumed on one device and
# back into the composition: the unbroken run's next losses.
run $common --steps 8 --device cpu
cp "$tmp/out" "$tmp/one-8.json"
mpi_ranks 2 saved --steps 4 --pipeline cpu,cpu --tensor-parallel 2 --save "$tmp/tp.st"
[ $rc -eq 0 ] && run $common --device cpu --steps 8 --resume "$tmp/tp.st" && [ $rc -eq 0 ] &&
  resumed_losses "$tmp/one-8.json" "$tmp/out" 4 4 1e-5
result "a checkpoint of the composition resumes on one device with the unbroken losses"
mpi_ranks 2 resumed --steps 8 --pipeline cpu,cpu --tensor-parallel 2 --resume "$tmp/tp.st"
[ $rc -eq 0 ] && resumed_losses "$tmp/one-8.json" "$tmp/resumed.json" 4 4 1e-5
result "and resumes into the composition with them"

# 10: at step 0 (--steps 0 --save: the initial parameters) the file the
# composition gathers from its shards is one device's, byte for byte: the
# same whole tensors, names, order and metadata.
run $common --steps 0 --device cpu --save "$tmp/one0.st"
mpi_ranks 2 zero-steps --steps 0 --pipeline cpu,cpu --tensor-parallel 2 --save "$tmp/tp0.st"
[ $rc -eq 0 ] && cmp "$tmp/one0.st" "$tmp/tp0.st"
result "--steps 0 --save: the composition's checkpoint is one device's, byte for byte"

# 11: three stages over two ranks (uneven blocks: 2, 1, 1 of gpt-mini's 4).
mpi_ranks 2 three --steps 12 --pipeline cpu,cpu,cpu --tensor-parallel 2
[ $rc -eq 0 ] && round_losses_close "$tmp/one.json" "$tmp/three.json" 1e-5
result "three stages split over 2 ranks: within 1e-5 of one device"

# 12: fp16 loss scaling: one overflow verdict over the stages and the
# ranks. From a scale of 1024, where neither run overflows, the same run
# to fp16 rounding (the split's partial sums meet in fp32; 1e-3, as
# test-tensor-parallel-compose.sh holds the split alone).
fp16="--precision fp16 --loss-scale 1024"
run $common --steps 12 --device cpu $fp16
cp "$tmp/out" "$tmp/one-fp16.json"
mpi_ranks 2 fp16 --steps 12 --pipeline cpu,cpu --tensor-parallel 2 $fp16
[ $rc -eq 0 ] && round_losses_close "$tmp/one-fp16.json" "$tmp/fp16.json" 1e-3
result "--precision fp16 --loss-scale 1024: within 1e-3 of one device in fp16"

# 13-15: what it does not take names what works.
run $common --steps 1 --pipeline cpu,cpu --tensor-parallel cpu,cpu
[ $rc -eq 2 ] && grep -q "with --pipeline as a number of MPI ranks only" "$tmp/err"
result "--pipeline with --tensor-parallel A,B (devices) is a usage error naming the rank form"
# (--zero with both shards each stage's shard over its replicas:
# test-tensor-pipeline-zero.sh; without replicas there is nothing to shard.)
mpi_ranks 2 zero-alone --steps 1 --pipeline cpu,cpu --tensor-parallel 2 --zero 1
[ $rc -ne 0 ] && grep -q "run mpirun -np N x R with --tensor-parallel N (R > 1 replicas)" \
  "$tmp/err"
result "--zero with both and no replicas (-np N) is an error naming N x R ranks"
run $common --steps 1 --pipeline cpu,cpu --tensor-parallel 2 --checkpoint auto
[ $rc -eq 2 ] && grep -q "with --pipeline takes --checkpoint blocks, sqrt or every:N (not auto)" \
  "$tmp/err" && run $common --plan --pipeline cpu,cpu --tensor-parallel 2 && [ $rc -eq 2 ] &&
  grep -q "and no --plan" "$tmp/err"
result "--checkpoint auto (each rank's stage would choose apart) and --plan with both are usage errors"
