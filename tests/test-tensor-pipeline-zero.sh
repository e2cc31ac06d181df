#!/bin/sh
# shellcheck disable=SC2086
# test-tensor-pipeline-zero.sh — TAP checks of ZeRO over the replicas of
# tensor x pipeline parallelism (issue 22, "they compose": data x tensor x
# pipeline ... ZeRO): mpirun -np N x R dltrain --pipeline A,B
# --tensor-parallel N --zero 1|2|3 gives every stage executor of a rank (its
# shard of the stage) its own ZeRO object over the R replicas of the same
# shard (the shard's data-parallel communicator), as --pipeline --zero does
# over a plain pipeline's ranks. Stage 1 keeps the stages' gradient sums
# whole (the norm and overflow verdict over the stages and the shards as
# without ZeRO); stages 2 and 3 reduce-scatter each stage's sums to their
# owners (the tied wte whole), the norm and the verdict over each rank's
# ranges, then the replicas, then the shards. The losses are the run
# without ZeRO's bit for bit (within 1e-5 under --clip-norm at stage 2: the
# norm is summed in another order); each stage executor holds 1/R of its
# sharded parts (--json's "zero", the stages' sum); a checkpoint stays one
# whole file that resumes on one device and back into the composition.
#
# 2 shards x 2 replicas x 2 stages of gpt-mini at context 64, 6 steps (and
# 3 replicas x 3 stages, 4 steps).

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=12
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

mpi_gpt_setup
ptp="--pipeline cpu,cpu --tensor-parallel 2"

# held A B STAGE PARTS [R]: run B (--zero STAGE over R replicas, default 2)
# holds 1/R of run A's (no ZeRO) PARTS (of param_bytes, grad_bytes and
# optimizer_bytes, comma-separated) and as much as A of the others; both
# print the zero line.
held() {
  r=${5:-2}
  python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1])['zero'] for p in sys.argv[1:3])
stage, parts, r = int(sys.argv[3]), sys.argv[4].split(','), int(sys.argv[5])
assert a['stage'] == 0 and b['stage'] == stage and a['replicas'] == b['replicas'] == r, (a, b)
said = []
for part in ('param_bytes', 'grad_bytes', 'optimizer_bytes'):
    assert a[part] == a['full_' + part] == b['full_' + part] > 0, (a, b)
    ratio = b[part] / a[part]
    assert abs(ratio - 1 / r) <= 0.02 if part in parts else ratio == 1.0, (part, ratio)
    said.append('%s %d of %d (%.3fx)' % (part.split('_')[0], b[part], a[part], ratio))
print('# --zero %d over %d replicas, the stages of rank 0 against no ZeRO: %s'
      % (stage, r, ', '.join(said)))
" "$1" "$2" "$3" "$4" "$r" &&
    grep -q "^zero     stage 0, $r replicas" "${1%.json}.err" &&
    grep -q "^zero     stage $3, $r replicas" "${2%.json}.err"
}

# 1-6: each stage against the same composition without ZeRO.
mpi_ranks 4 z0 --steps 6 $ptp
for z in 1 2 3; do
  mpi_ranks 4 z$z --steps 6 $ptp --zero $z
  [ $rc -eq 0 ] && same_round_losses "$tmp/z0.json" "$tmp/z$z.json" 12
  result "mpirun -np 4 $ptp --zero $z: the losses of the run without ZeRO"
  case $z in
  1) parts=optimizer_bytes ;;
  2) parts=grad_bytes,optimizer_bytes ;;
  3) parts=param_bytes,grad_bytes,optimizer_bytes ;;
  esac
  held "$tmp/z0.json" "$tmp/z$z.json" $z $parts
  result "--zero $z: each stage executor holds 0.5x of $parts, all else whole"
done

# 7, 8: --accum 2, --clip-norm 0.1 (one global norm over the stages, shards
# and replicas) and --checkpoint blocks: stage 1 bit for bit (its norm is
# the one without ZeRO's), stage 2 within 1e-5 (each rank's ranges first).
opts="--accum 2 --clip-norm 0.1 --checkpoint blocks"
mpi_ranks 4 o0 --steps 6 $ptp $opts
mpi_ranks 4 o1 --steps 6 $ptp $opts --zero 1
[ $rc -eq 0 ] && same_round_losses "$tmp/o0.json" "$tmp/o1.json" 12
result "--zero 1 $opts: the losses of the run without ZeRO"
mpi_ranks 4 o2 --steps 6 $ptp $opts --zero 2
[ $rc -eq 0 ] && round_losses_close "$tmp/o0.json" "$tmp/o2.json" 1e-5
result "--zero 2 $opts: within 1e-5 of the run without ZeRO"

# 9: fp16 from 2^24, which overflows the first updates: one verdict over
# the stages, shards and replicas, the same updates skipped at stage 2.
fp16="--precision fp16 --loss-scale 16777216"
mpi_ranks 4 f0 --steps 6 $ptp $fp16
mpi_ranks 4 f2 --steps 6 $ptp $fp16 --zero 2
[ $rc -eq 0 ] && same_round_losses "$tmp/f0.json" "$tmp/f2.json" 12 && python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
assert 0 < a['skipped_steps'] == b['skipped_steps'] < 6, (a['skipped_steps'], b['skipped_steps'])
print('# %d of 6 updates skipped by both' % b['skipped_steps'])" "$tmp/f0.json" "$tmp/f2.json"
result "--zero 2 $fp16: the same updates skipped, the same losses"

# 10, 11: saved at step 3 with --zero 2 (each stage's ranges gathered over
# the replicas, then the shards: one whole file), resumed on one device at
# the replicas' whole batch (the unbroken run's losses, 1e-5) and into the
# composition with --zero 3 (1e-5, as test-tensor-pipeline.sh holds the
# composition's own resume).
mpi_ranks 4 saved --steps 3 $ptp --zero 2 --save "$tmp/z2.st"
[ $rc -eq 0 ] && run $common --device cpu --steps 6 --batch 8 --resume "$tmp/z2.st" &&
  [ $rc -eq 0 ] && resumed_losses "$tmp/z0.json" "$tmp/out" 3 3 1e-5
result "a --zero 2 checkpoint of the composition resumes on one device with the unbroken losses"
mpi_ranks 4 resumed --steps 6 $ptp --zero 3 --resume "$tmp/z2.st"
[ $rc -eq 0 ] && resumed_losses "$tmp/z0.json" "$tmp/resumed.json" 3 3 1e-5
result "and resumes into the composition with --zero 3 with them"

# 12: 3 replicas of 2 shards, three stages (mpirun -np 6), --accum 2
# --checkpoint blocks, --zero 3: the losses of the run without ZeRO, 1/3 of
# each sharded part (uneven cuts of each stage's shard).
three="--pipeline cpu,cpu,cpu --tensor-parallel 2 --accum 2 --checkpoint blocks"
mpi_ranks 6 t0 --steps 4 $three
mpi_ranks 6 t3 --steps 4 $three --zero 3
[ $rc -eq 0 ] && same_round_losses "$tmp/t0.json" "$tmp/t3.json" 8 &&
  held "$tmp/t0.json" "$tmp/t3.json" 3 param_bytes,grad_bytes,optimizer_bytes 3
result "mpirun -np 6 (3 replicas x 2 shards x 3 stages) --zero 3: the same losses, 1/3 of the parts"
