#!/bin/sh
# shellcheck disable=SC2086
# test-pipeline-zero.sh — TAP checks of ZeRO over the data-parallel ranks of
# a pipeline (issue 22, "they compose"): mpirun -np R dltrain --pipeline A,B
# --zero 1|2|3 gives each stage's executor its own ZeRO object, its model
# states in R ranges, one a rank. At stage 1 the gradient sums stay whole
# on every rank (all-reduced per stage as without ZeRO); at stages 2 and 3
# each stage's gradients stream to the host in buckets (the micro-batches
# summed there), each range is reduced to its owner only (the tied wte
# whole to every rank, as both end stages need it), and the overflow
# verdict and clipping norm are taken over each rank's ranges, then over
# the ranks. The updates, elementwise over each rank's range at the same
# scale, give the run without ZeRO's bits. Each rank's stages hold 1/R of
# their optimizer state (and gradients at stage 2, parameters too at 3), as
# the trainer's figures count them (dltrain's zero line and the JSON's
# "zero" object: the stages' sum). Checkpoints stay one whole file that
# resumes on one device; --zero with --pipeline in one process is refused
# by name (it shards over the ranks).

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=16
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

mpi_gpt_setup

# held A B R STAGE PARTS: run B (--zero STAGE over R ranks) holds 1/R of
# run A's (no ZeRO: all whole) PARTS (of param_bytes, grad_bytes and
# optimizer_bytes, comma-separated) and as much as A of the others; both
# print the zero line.
held() {
  python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1])['zero'] for p in sys.argv[1:3])
r, stage, parts = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5].split(',')
assert a['stage'] == 0 and b['stage'] == stage and a['replicas'] == b['replicas'] == r, (a, b)
said = []
for part in ('param_bytes', 'grad_bytes', 'optimizer_bytes'):
    assert a[part] == a['full_' + part] == b['full_' + part] > 0, (a, b)
    ratio = b[part] / a[part]
    assert abs(ratio - 1 / r) <= 0.02 if part in parts else ratio == 1.0, (part, ratio)
    said.append('%s %.3fx' % (part.split('_')[0], ratio))
print('# --zero %d over %d ranks, per rank of unsharded: %s' % (stage, r, ', '.join(said)))
" "$@" &&
    grep -q "^zero     stage 0, $3 replicas" "${1%.json}.err" &&
    grep -q "^zero     stage $4, $3 replicas" "${2%.json}.err"
}

# 1, 2: two stages over 2 ranks, against the same run without ZeRO.
mpi_ranks 2 p0 --steps 8 --pipeline cpu,cpu
mpi_ranks 2 p1 --steps 8 --pipeline cpu,cpu --zero 1
[ $rc -eq 0 ] && same_round_losses "$tmp/p0.json" "$tmp/p1.json"
result "mpirun -np 2 --pipeline cpu,cpu --zero 1: the losses of the run without ZeRO"
held "$tmp/p0.json" "$tmp/p1.json" 2 1 optimizer_bytes
result "--zero 1: each rank's stages hold 0.5x of their optimizer state, all else whole"

# 3, 4: three stages over 3 ranks with --accum 2, --clip-norm 0.1 (one
# global norm over the stages) and --checkpoint blocks.
all="--accum 2 --clip-norm 0.1 --checkpoint blocks --pipeline cpu,cpu,cpu"
mpi_ranks 3 all0 --steps 6 $all
mpi_ranks 3 all1 --steps 6 $all --zero 1
[ $rc -eq 0 ] && same_round_losses "$tmp/all0.json" "$tmp/all1.json"
result "mpirun -np 3 over three stages with --accum 2 --clip-norm 0.1 --zero 1: the same losses"
held "$tmp/all0.json" "$tmp/all1.json" 3 1 optimizer_bytes
result "over 3 ranks: each rank's stages hold 1/3 of their optimizer state"

# 5: fp16 loss scaling from 2^24, which overflows the first updates: every
# stage of every rank skips the same ones (one verdict over the stages).
mpi_ranks 2 fp0 --steps 8 --pipeline cpu,cpu --precision fp16 --loss-scale 16777216
mpi_ranks 2 fp1 --steps 8 --pipeline cpu,cpu --precision fp16 --loss-scale 16777216 --zero 1
[ $rc -eq 0 ] && same_round_losses "$tmp/fp0.json" "$tmp/fp1.json" && python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
assert 0 < a['skipped_steps'] == b['skipped_steps'] < 8, (a['skipped_steps'], b['skipped_steps'])
print('# %d of 8 updates skipped by both' % b['skipped_steps'])" "$tmp/fp0.json" "$tmp/fp1.json"
result "--zero 1 --precision fp16 from a scale of 2^24: the same updates skipped, same losses"

# 6, 7: saved at step 4 with --zero 1 (one whole file, its optimizer state
# gathered from the ranks), resumed on one device at the ranks' whole batch
# (the unbroken run's losses, 1e-5), and into the pipeline with --zero 1
# (bit for bit).
mpi_ranks 2 saved --steps 4 --pipeline cpu,cpu --zero 1 --save "$tmp/z1.st"
[ $rc -eq 0 ] && run $common --device cpu --steps 8 --batch 8 --resume "$tmp/z1.st" && [ $rc -eq 0 ] &&
  resumed_losses "$tmp/p0.json" "$tmp/out" 4 4 1e-5
result "a --pipeline --zero 1 checkpoint resumes on one device with the unbroken losses"
mpi_ranks 2 resumed --steps 8 --pipeline cpu,cpu --zero 1 --resume "$tmp/z1.st"
[ $rc -eq 0 ] && resumed_losses "$tmp/p0.json" "$tmp/resumed.json" 4 4
result "and resumes into the pipeline with --zero 1, bit for bit"

# 8: in one process there are no ranks to shard over: refused by name.
run $common --steps 2 --pipeline cpu,cpu --zero 2
[ $rc -eq 2 ] && grep -q "pipeline stage's model states over the data-parallel ranks" "$tmp/err" &&
  grep -q "mpirun -np R" "$tmp/err"
result "--pipeline --zero 2 in one process is a usage error naming mpirun"

# 9-11: --zero 2 (gradients reduce-scattered, summed over the micro-batches
# on the host) and --zero 3 (parameters gathered before each use) over 2
# ranks and 2 stages: the run without ZeRO's losses; 0.5x of the sharded
# parts.
failed=0
for z in 2 3; do
  mpi_ranks 2 p$z --steps 8 --pipeline cpu,cpu --zero $z
  [ $rc -eq 0 ] && same_round_losses "$tmp/p0.json" "$tmp/p$z.json" 16 ||
    { failed=1; break; }
done
[ $failed -eq 0 ]
result "mpirun -np 2 --pipeline cpu,cpu --zero 2 and 3: the losses of the run without ZeRO"
held "$tmp/p0.json" "$tmp/p2.json" 2 2 grad_bytes,optimizer_bytes
result "--zero 2: each rank's stages hold 0.5x of their gradients and optimizer state"
held "$tmp/p0.json" "$tmp/p3.json" 2 3 param_bytes,grad_bytes,optimizer_bytes
result "--zero 3: and 0.5x of their parameters"

# 12, 13: three stages over 3 ranks with --accum 2, --clip-norm 0.1 (the
# norm over each rank's ranges, then over the ranks) and --checkpoint
# blocks, at stages 2 and 3: the same losses, 1/3 of the sharded parts.
failed=0
for z in 2 3; do
  mpi_ranks 3 all$z --steps 6 $all --zero $z
  [ $rc -eq 0 ] && same_round_losses "$tmp/all0.json" "$tmp/all$z.json" 12 ||
    { failed=1; break; }
done
[ $failed -eq 0 ]
result "mpirun -np 3, three stages, --accum 2 --clip-norm 0.1 --zero 2 and 3: the same losses"
held "$tmp/all0.json" "$tmp/all2.json" 3 2 grad_bytes,optimizer_bytes &&
  held "$tmp/all0.json" "$tmp/all3.json" 3 3 param_bytes,grad_bytes,optimizer_bytes
result "over 3 ranks: 1/3 of the gradients (--zero 2) and the parameters too (--zero 3)"

# 14: fp16 from 2^24 at stages 2 and 3: one overflow verdict over every
# rank's ranges of every stage, the same updates skipped.
failed=0
for z in 2 3; do
  mpi_ranks 2 fp$z --steps 8 --pipeline cpu,cpu --precision fp16 --loss-scale 16777216 --zero $z
  [ $rc -eq 0 ] && same_round_losses "$tmp/fp0.json" "$tmp/fp$z.json" 16 &&
    python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
assert a['skipped_steps'] == b['skipped_steps'] > 0, (a['skipped_steps'], b['skipped_steps'])
print('# --zero %s: %d of 8 updates skipped, as without ZeRO' % (sys.argv[3], b['skipped_steps']))
" "$tmp/fp0.json" "$tmp/fp$z.json" $z ||
    { failed=1; break; }
done
[ $failed -eq 0 ]
result "--zero 2 and 3 --precision fp16 from a scale of 2^24: the same updates skipped"

# 15, 16: saved at step 4 with --zero 2 (one whole file), resumed on one
# device at the ranks' whole batch (the unbroken run's losses, 1e-5), and
# into the pipeline with --zero 3 (bit for bit).
mpi_ranks 2 saved2 --steps 4 --pipeline cpu,cpu --zero 2 --save "$tmp/z2.st"
[ $rc -eq 0 ] && run $common --device cpu --steps 8 --batch 8 --resume "$tmp/z2.st" &&
  [ $rc -eq 0 ] &&
  resumed_losses "$tmp/p0.json" "$tmp/out" 4 4 1e-5
result "a --pipeline --zero 2 checkpoint resumes on one device with the unbroken losses"
mpi_ranks 2 resumed3 --steps 8 --pipeline cpu,cpu --zero 3 --resume "$tmp/z2.st"
[ $rc -eq 0 ] && resumed_losses "$tmp/p0.json" "$tmp/resumed3.json" 4 4
result "and resumes into the pipeline with --zero 3, bit for bit"
