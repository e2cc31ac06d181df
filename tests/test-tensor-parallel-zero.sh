#!/bin/sh
# shellcheck disable=SC2086
# test-tensor-parallel-zero.sh — TAP checks of ZeRO over the data-parallel
# replicas of a tensor-parallel model (issue 22, "they compose"): mpirun -np
# 4 dltrain --tensor-parallel 2 --zero 1|2|3 (2 replicas of 2 shards, one a
# rank) trains as the same run without ZeRO, bit for bit (the updates are
# elementwise over each replica's range, and the two replicas' sums are the
# same two-term sums in either order), while each rank holds half of its
# shard's optimizer state (stage 1), and of its gradients (2) and its
# parameters (3) as well, as the trainer's own figures count them (the
# JSON's "zero" object: tensor bytes held, and what they are unsharded).
# With --accum, --clip-norm, --checkpoint blocks and fp16 loss scaling (the
# overflowing updates skipped by every rank alike); checkpoints stay one
# whole file that resumes on one device and into another split; a replica
# per rank split over its own devices (--tensor-parallel cpu,cpu) shards
# too, stage 3 as well; ZeRO without replicas is a usage error; and the planner's best split
# that this version runs for gpt3-175b on 40 GB devices is now a
# tensor-parallel one with ZeRO.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=14
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

mpi_gpt_setup
tp2="--device cpu --tensor-parallel 2"

# 1-3: each stage against the same 2 x 2 run without ZeRO.
mpi_ranks 4 z0 --steps 8 $tp2
for z in 1 2 3; do
  mpi_ranks 4 z$z --steps 8 $tp2 --zero $z
  [ $rc -eq 0 ] && same_round_losses "$tmp/z0.json" "$tmp/z$z.json" 16 &&
    grep -q "^zero     stage $z, 2 replicas" "$tmp/z$z.err"
  result "mpirun -np 4 --tensor-parallel 2 --zero $z: the losses of the run without ZeRO"
done

# 4-6: what each rank holds, by the trainer's figures: stage 1 halves the
# optimizer state, 2 the gradients too, 3 the parameters too.
python3 -c "import json, sys
runs = [json.loads(open(sys.argv[1] + '/z%d.json' % z).read().splitlines()[-1])['zero']
        for z in range(4)]
base = runs[0]
assert base['stage'] == 0 and base['replicas'] == 2, base
for part in ('param_bytes', 'grad_bytes', 'optimizer_bytes'):
    assert base[part] == base['full_' + part] > 0, base
for z in (1, 2, 3):
    r = runs[z]
    print('# stage %d: ' % z + ', '.join('%s %.3fx' % (p, r[p] / base[p])
          for p in ('param_bytes', 'grad_bytes', 'optimizer_bytes')))
open(sys.argv[1] + '/ratios', 'w').write(json.dumps(
    [{p: runs[z][p] / base[p] for p in ('param_bytes', 'grad_bytes', 'optimizer_bytes')}
     for z in range(4)]))" "$tmp"
ratio() { python3 -c "import json, sys
r = json.load(open(sys.argv[1]))[int(sys.argv[2])]
for p in sys.argv[3].split(','):
    assert 0.45 <= r[p] <= 0.55, (p, r)
for p in sys.argv[4].split(',') if sys.argv[4] else []:
    assert r[p] == 1.0, (p, r)" "$tmp/ratios" "$@"; }
ratio 1 optimizer_bytes param_bytes,grad_bytes
result "--zero 1: each rank holds 0.5x of its shard's optimizer state, all else whole"
ratio 2 optimizer_bytes,grad_bytes param_bytes
result "--zero 2: 0.5x of the optimizer state and the gradients"
ratio 3 optimizer_bytes,grad_bytes,param_bytes ""
result "--zero 3: 0.5x of the optimizer state, the gradients and the parameters"

# 7: with --accum 2, --clip-norm 0.1 (one global norm over the ranges each
# replica reduced) and --checkpoint blocks.
mpi_ranks 4 all0 --steps 8 $tp2 --accum 2 --clip-norm 0.1 --checkpoint blocks
failed=0
for z in 2 3; do
  mpi_ranks 4 all$z --steps 8 $tp2 --accum 2 --clip-norm 0.1 --checkpoint blocks \
    --zero $z
  [ $rc -eq 0 ] && same_round_losses "$tmp/all0.json" "$tmp/all$z.json" 16 ||
    { failed=1; break; }
done
[ $failed -eq 0 ]
result "--zero 2 and 3 with --accum 2 --clip-norm 0.1 --checkpoint blocks: the same losses"

# 8: fp16 loss scaling from 2^24, which overflows the first updates: every
# rank skips the same ones (one verdict over the ranges each replica holds).
mpi_ranks 4 fp0 --steps 8 $tp2 --precision fp16 --loss-scale 16777216
mpi_ranks 4 fp2 --steps 8 $tp2 --precision fp16 --loss-scale 16777216 --zero 2
[ $rc -eq 0 ] && same_round_losses "$tmp/fp0.json" "$tmp/fp2.json" 16 && python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
assert 0 < a['skipped_steps'] == b['skipped_steps'] < 8, (a['skipped_steps'], b['skipped_steps'])
print('# %d of 8 updates skipped by both' % b['skipped_steps'])" "$tmp/fp0.json" "$tmp/fp2.json"
result "--zero 2 --precision fp16 from a scale of 2^24: the same updates skipped, same losses"

# 9, 10: saved at step 4 with --zero 3 (one whole file, written by rank 0),
# resumed on one device at the replicas' whole batch, and into the 2 x 2
# with --zero 2: the unbroken run's losses.
mpi_ranks 4 saved --steps 4 $tp2 --zero 3 --save "$tmp/z3.st"
[ $rc -eq 0 ] && run $common --device cpu --steps 8 --batch 8 --resume "$tmp/z3.st" && [ $rc -eq 0 ] &&
  resumed_losses "$tmp/z0.json" "$tmp/out" 4 4 1e-5
result "a --zero 3 checkpoint of the 2 x 2 resumes on one device with the unbroken losses"
mpi_ranks 4 resumed --steps 8 $tp2 --zero 2 --resume "$tmp/z3.st"
[ $rc -eq 0 ] && resumed_losses "$tmp/z0.json" "$tmp/resumed.json" 4 4
result "and resumes into the 2 x 2 with --zero 2, bit for bit"

# 11, 12: a replica per rank, split over its own devices: two sharded
# executors in one process (at stage 3 their gathers' prefetches once raced:
# each copy must wait for every allocation's ordering on the other's stream).
mpi_ranks 2 mixed0 --steps 8 --tensor-parallel cpu,cpu
for z in 2 3; do
  mpi_ranks 2 mixed$z --steps 8 --tensor-parallel cpu,cpu --zero $z
  [ $rc -eq 0 ] && same_round_losses "$tmp/mixed0.json" "$tmp/mixed$z.json" 16
  result "mpirun -np 2 --tensor-parallel cpu,cpu --zero $z: the losses of the run without ZeRO"
done

# 13: no replicas to shard over.
mpi_ranks 2 alone --steps 2 $tp2 --zero 1
[ $rc -ne 0 ] && grep -q "run mpirun -np N x R with --tensor-parallel N" "$tmp/alone.err"
result "mpirun -np 2 --tensor-parallel 2 --zero 1 (no replicas) is a usage error saying how"

# 14: the planner's best split that runs now, for gpt3-175b on 40 GB devices.
run --plan --model gpt3-175b --device-memory 40G --json
[ $rc -eq 0 ] && python3 -c "import json, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if l.startswith('{')]
s = [json.loads(l) for l in lines if 'splits' in json.loads(l)][0]['splits']['best_runs_now']
assert s and s['runs_now'] and s['fits'] and s['tensor'] > 1 and s['zero'] > 0, s
assert s['data'] > 1 and '--zero' in s['flags'] and '--tensor-parallel' in s['flags'], s
print('# %d devices: %s' % (s['devices'], s['flags']))" "$tmp/out"
result "--plan gpt3-175b 40G: the best split this version runs is tensor parallel with ZeRO"
