#!/bin/sh
# shellcheck disable=SC2086
# test-tensor-parallel-memory.sh — TAP checks of dltrain --tensor-parallel
# with the memory options (issue 22: "they compose ... with the offload of
# the previous issues"): gpt-mini split over two CPU peers, each spilling
# within its own --mem-limit, trains as the unlimited split does bit for
# bit (spilling moves tensors, never changes the arithmetic on the cpu
# backend), with every --offload (activations, optimizer, all, params),
# with --accum 2 (summed on each peer's device), --checkpoint blocks and
# auto (segments chosen on the first peer and given to both: the peers'
# collectives inside recomputed segments meet in order), bf16; every
# peer's spilled storages stay within its budget, and where the peers have
# a device each (cpu beside PoCL's opencl:0, or a rank each under mpirun)
# each device's measured peak does; a checkpoint saved by spilling peers
# resumes on one device with the unbroken run's losses; --clip-norm and
# fp16 loss scaling (updates through the host: the peers' gradient runs
# spill too) keep the unlimited split's bits; what stays refused says what
# works. --plan --tensor-parallel
# plans each peer's shard as the peer's executor does (the trained runs'
# planned peaks to the byte, --checkpoint auto's segments too), the
# largest batch every peer fits, and with --simulate the split's step.
#
# CI runs 12 steps at context 64, batch 4: a peer plans a 10.4 MiB peak,
# and the budgets are 3 MiB (0.29x) unless said.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
DLINFO=${DLINFO:-./tools/dlinfo}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=24
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 24); do skip "test $i" "python3 not found"; done
  exit 0
fi

python3 "$(dirname "$0")/english_corpus.py" "$tmp/corpus.txt" 100000 96
common="--model gpt-mini --data $tmp/corpus.txt --context 64 --batch 4 --threads 1"
common="$common --eval-every 1 --eval-batches 1 --json --quiet --steps 12"

# keep NAME ARGS: dltrain $common ARGS, kept as $tmp/NAME.json.
keep() {
  name=$1
  shift
  run $common "$@"
  cp "$tmp/out" "$tmp/$name.json"
  [ $rc -eq 0 ]
}

# within FILE BUDGET SHARED: every peer spilled within BUDGET bytes (its
# storages' peak, spill_peak_bytes, when it spills; SHARED 1: its device's
# measured peak too, else the device's peak within the budgets of the
# peers on it), below its planned peak, and the run spilled.
within() {
  python3 -c "import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
budget, shared, tp = int(sys.argv[2]), sys.argv[3] == '1', d['tensor_parallel']
assert len(tp) >= 1 and d['spilled_bytes'] > 0, d
for p in tp:
    on = sum(1 for q in tp if q['device'] == p['device']) if shared else 1
    assert p['spill_budget_bytes'] == budget, (p, budget)
    assert p['measured_peak_bytes'] <= on * budget, (p, on, budget)
    assert p['spill_peak_bytes'] <= budget < p['planned_peak_bytes'], (p, budget)
print('# %s: budget %d a peer (%.2fx of its plan), spilled peaks %s, device peaks %s' % (
    sys.argv[1].split('/')[-1], budget, budget / tp[0]['planned_peak_bytes'],
    [p['spill_peak_bytes'] for p in tp], [p['measured_peak_bytes'] for p in tp]))" "$@"
}

M3=3145728

# 1-2: the budget alone.
keep free --tensor-parallel cpu,cpu
result "--tensor-parallel cpu,cpu: the unlimited split (reference)"
keep m3 --tensor-parallel cpu,cpu --mem-limit 3M
[ $rc -eq 0 ] && same_round_losses "$tmp/free.json" "$tmp/m3.json" 24 &&
  within "$tmp/m3.json" $M3 1 && grep -q "^spill    budget 3.0 MiB" "$tmp/err"
result "--mem-limit 3M: each peer spills within 3 MiB, the unlimited split's losses bit for bit"

# 3-6: the offloads.
for what in activations optimizer all; do
  keep $what --tensor-parallel cpu,cpu --mem-limit 3M --offload $what
  [ $rc -eq 0 ] && same_round_losses "$tmp/free.json" "$tmp/$what.json" 24 &&
    within "$tmp/$what.json" $M3 1
  result "--mem-limit 3M --offload $what: within the budget, the same losses bit for bit"
done
# Streamed parameters: the budget binds the device's allocator, which the
# two peers on cpu:0 share (twice the budget).
keep params --tensor-parallel cpu,cpu --mem-limit 8M --offload params
[ $rc -eq 0 ] && same_round_losses "$tmp/free.json" "$tmp/params.json" 24 && last_json \
  "$tmp/params.json" "
tp = d['tensor_parallel']
assert all(p['spill_budget_bytes'] == 8 << 20 for p in tp), tp
assert all(p['measured_peak_bytes'] <= 2 * (8 << 20) for p in tp), tp
assert d['fetched_bytes'] > 0, d
print('# cpu:0 peaked at %d for two peers of 8 MiB' % tp[0]['measured_peak_bytes'])"
result "--mem-limit 8M --offload params: the device within the peers' budgets, the same losses"

# 7-9: --accum, --checkpoint.
keep accum --tensor-parallel cpu,cpu --accum 2
keep accum3 --tensor-parallel cpu,cpu --accum 2 --mem-limit 3M
[ $rc -eq 0 ] && same_round_losses "$tmp/accum.json" "$tmp/accum3.json" 24 &&
  within "$tmp/accum3.json" $M3 1
result "--accum 2 --mem-limit 3M: summed on each peer's device, the unlimited --accum 2 bit for bit"
keep auto --tensor-parallel cpu,cpu --checkpoint auto --mem-limit 3M
[ $rc -eq 0 ] && same_round_losses "$tmp/free.json" "$tmp/auto.json" 24 &&
  within "$tmp/auto.json" $M3 1 && python3 -c "import json, sys
a, b, c = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:4])
pa = [p['planned_peak_bytes'] for p in a['tensor_parallel']]
pb = [p['planned_peak_bytes'] for p in b['tensor_parallel']]
assert pb[0] == pb[1] and pb[0] < pa[0], (pa, pb)
assert b['spilled_bytes'] < c['spilled_bytes'], (b['spilled_bytes'], c['spilled_bytes'])
print('# planned peak a peer %d -> %d; spilled %d -> %d bytes' % (
    pa[0], pb[0], c['spilled_bytes'], b['spilled_bytes']))" "$tmp/free.json" "$tmp/auto.json" \
    "$tmp/m3.json"
result "--checkpoint auto --mem-limit 3M: one choice of segments, lower plans, less spilled"
keep blocks --tensor-parallel cpu,cpu --checkpoint blocks --mem-limit 2M
[ $rc -eq 0 ] && same_round_losses "$tmp/free.json" "$tmp/blocks.json" 24 &&
  within "$tmp/blocks.json" 2097152 1
result "--checkpoint blocks --mem-limit 2M: within the budget, the same losses bit for bit"

# 10: bf16.
keep bf --tensor-parallel cpu,cpu --precision bf16
keep bf2 --tensor-parallel cpu,cpu --precision bf16 --mem-limit 2M
[ $rc -eq 0 ] && same_round_losses "$tmp/bf.json" "$tmp/bf2.json" 24 &&
  within "$tmp/bf2.json" 2097152 1
result "--precision bf16 --mem-limit 2M: the unlimited bf16 split's losses bit for bit"

# 11: a checkpoint saved by spilling peers resumes on one device.
keep one --device cpu
run $(echo "$common" | sed 's/--steps 12/--steps 6/') --tensor-parallel cpu,cpu --mem-limit 3M \
  --save "$tmp/m3.st" && [ $rc -eq 0 ] && run $common --device cpu --resume "$tmp/m3.st" &&
  [ $rc -eq 0 ] && resumed_losses "$tmp/one.json" "$tmp/out" 6 6 1e-5
result "a checkpoint saved by peers spilling within 3 MiB resumes on one device (1e-5)"

# 12: a device each: cpu beside OpenCL device 0.
if has_opencl; then
  keep ofree --tensor-parallel cpu,opencl:0
  keep o3 --tensor-parallel cpu,opencl:0 --mem-limit 3M
  [ $rc -eq 0 ] && same_round_losses "$tmp/ofree.json" "$tmp/o3.json" 24 &&
    within "$tmp/o3.json" $M3 0
  result "--tensor-parallel cpu,opencl:0 --mem-limit 3M: each device peaks within 3 MiB, same bits"
else
  skip "cpu,opencl:0 within 3 MiB" "no OpenCL device"
fi

# 13-15: over MPI ranks, a device (process) each.
why=$(mpi_why)
if [ -z "$why" ]; then
  mpi_ranks 2 mfree --device cpu --tensor-parallel 2
  mpi_ranks 2 m3r --device cpu --tensor-parallel 2 --mem-limit 3M
  [ $rc -eq 0 ] && same_round_losses "$tmp/mfree.json" "$tmp/m3r.json" 24 &&
    within "$tmp/m3r.json" $M3 0 && same_round_losses "$tmp/free.json" "$tmp/m3r.json" 24
  result "mpirun -np 2 --tensor-parallel 2 --mem-limit 3M: rank 0 peaks within 3 MiB, same bits"
  mpi_ranks 2 mall --device cpu --tensor-parallel 2 --mem-limit 3M --accum 2 --checkpoint auto
  [ $rc -eq 0 ] && same_round_losses "$tmp/accum.json" "$tmp/mall.json" 24 &&
    within "$tmp/mall.json" $M3 0
  result "... with --accum 2 --checkpoint auto (the ranks' shortest segments): the same bits"
  # Two replicas of the split: their sums, beside each budget, averaged
  # over the replicas through the host.
  mpi_ranks 4 mrepfree --device cpu --tensor-parallel 2
  mpi_ranks 4 mrep --device cpu --tensor-parallel 2 --mem-limit 3M
  [ $rc -eq 0 ] && same_round_losses "$tmp/mrepfree.json" "$tmp/mrep.json" 24 &&
    within "$tmp/mrep.json" $M3 0
  result "mpirun -np 4 --tensor-parallel 2 --mem-limit 3M: the unlimited replicas' bits, within"
else
  for what in "ranks within 3 MiB" "ranks with accum and auto" "replicas within 3 MiB"; do
    skip "$what" "$why"
  done
fi

# 16-18: the updates through the host (one global norm, one overflow
# verdict): the peers' gradient runs spill, their sums beside the budget.
keep clip --tensor-parallel cpu,cpu --clip-norm 0.1
keep clip3 --tensor-parallel cpu,cpu --clip-norm 0.1 --mem-limit 3M
[ $rc -eq 0 ] && same_round_losses "$tmp/clip.json" "$tmp/clip3.json" 24 &&
  within "$tmp/clip3.json" $M3 1
result "--clip-norm 0.1 --mem-limit 3M: the unlimited clipped split's losses bit for bit"
keep f16 --tensor-parallel cpu,cpu --precision fp16
keep f163 --tensor-parallel cpu,cpu --precision fp16 --mem-limit 3M --offload optimizer
[ $rc -eq 0 ] && same_round_losses "$tmp/f16.json" "$tmp/f163.json" 24 &&
  within "$tmp/f163.json" $M3 1
result "--precision fp16 --mem-limit 3M --offload optimizer: the unlimited fp16 split's bits"
run $common --tensor-parallel cpu,cpu --mem-limit 8M --offload params --clip-norm 0.1
[ $rc -eq 2 ] && grep -q "offload params goes without --clip-norm and --precision fp16" "$tmp/err"
result "--tensor-parallel --offload params --clip-norm is a usage error naming what works"

# 19-20: what stays refused, and a budget too small.
run $common --tensor-parallel cpu,cpu --mem-limit 3M --zero 1
[ $rc -eq 2 ] && grep -q "zero goes without --mem-limit" "$tmp/err"
result "--tensor-parallel --mem-limit --zero is a usage error"
run $common --tensor-parallel cpu,cpu --mem-limit 64K
[ $rc -ne 0 ] && grep -q "tensor parallel peer 0 on cpu:0 (heads 0-1)" "$tmp/err" &&
  grep -q "smallest budget that fits" "$tmp/err"
result "a budget below what a peer's operation needs names the peer and the least budget"

# 21-24: --plan --tensor-parallel.
# plan_is_run PLAN RUN: each peer's planned peak in PLAN's --plan --json is
# the trained RUN's, to the byte.
plan_is_run() {
  python3 -c "import json, sys
p, r = (json.loads(open(f).read().splitlines()[-1]) for f in sys.argv[1:3])
a = [x['planned_peak_bytes'] for x in p['plan']['tensor_parallel']]
b = [x['planned_peak_bytes'] for x in r['tensor_parallel']]
assert a == b and len(a) == 2, (a, b)
assert all(x['spill_least_bytes'] < x['planned_peak_bytes'] for x in p['plan']['tensor_parallel'])
print('# planned peaks %s, the runs\' own' % a)" "$1" "$2"
}
run $common --tensor-parallel cpu,cpu --plan
cp "$tmp/out" "$tmp/plan.json"
[ $rc -eq 0 ] && plan_is_run "$tmp/plan.json" "$tmp/free.json" && keep w13 --steps 2 \
  --tensor-parallel cpu@1,cpu@3 && run $common --tensor-parallel cpu@1,cpu@3 --plan &&
  plan_is_run "$tmp/out" "$tmp/w13.json"
result "--plan --tensor-parallel: each peer's planned peak is the run's (even and 1:3 heads)"
run $common --tensor-parallel cpu,cpu --plan --checkpoint auto --mem-limit 3M
[ $rc -eq 0 ] && plan_is_run "$tmp/out" "$tmp/auto.json" && last_json "$tmp/out" "
assert d['plan']['checkpoint_every'] > 0, d['plan']
assert all(x['fits_mem_limit'] for x in d['plan']['tensor_parallel']), d['plan']"
result "--plan --checkpoint auto --mem-limit 3M: the segments the split chose, the same peaks"
# The largest batch in 32 MiB a peer: its peak fits, one more window's does not.
run $common --tensor-parallel 2 --device cpu --plan --device-memory 32M
most=$(last_json "$tmp/out" "print(d['plan']['max_batch'])" | tail -1)
run $common --tensor-parallel 2 --device cpu --plan --device-memory 32M --batch "$most" &&
  last_json "$tmp/out" "assert all(x['fits'] for x in d['plan']['tensor_parallel'])" &&
  run $common --tensor-parallel 2 --device cpu --plan --device-memory 32M \
    --batch $((most + 1)) &&
  last_json "$tmp/out" "assert not all(x['fits'] for x in d['plan']['tensor_parallel'])
print('# batch $most fits 32 MiB a peer, $((most + 1)) does not')"
result "--plan --tensor-parallel 2 --device-memory 32M: the largest batch every peer fits"
# --simulate: the split's step on the machine, as --plan's splits predict
# a tensor degree of 2 without pipeline or replicas.
run $common --tensor-parallel cpu,cpu --plan --simulate h200-pcie5
cp "$tmp/out" "$tmp/sim.json"
[ $rc -eq 0 ] && run $common --device cpu --plan --simulate h200-pcie5 --splits 60 \
  --max-devices 2 && python3 -c "import json, sys
sim = json.loads(open(sys.argv[1]).read().splitlines()[-1])['plan']['simulate']
lines = [json.loads(l) for l in open(sys.argv[2]).read().splitlines() if l.startswith('{')]
best = [x for l in lines if 'splits' in l for x in l['splits']['best']]
t2 = [x for x in best if (x['tensor'], x['pipeline'], x['data'], x['checkpoint']) ==
      (2, 1, 1, False)]
assert len(t2) == 1 and sim['tensor_s'] > 0, (sim, len(best))
assert abs(sim['step_s'] - t2[0]['step_s']) <= 1e-9 * t2[0]['step_s'], (sim, t2[0])
print('# predicted step %.4g ms (tensor all-reduces %.3g ms), the splits\' t=2' % (
    sim['step_s'] * 1e3, sim['tensor_s'] * 1e3))" "$tmp/sim.json" "$tmp/out" &&
  run $common --tensor-parallel cpu@1,cpu@3 --plan --simulate h200-pcie5 && [ $rc -eq 2 ] &&
  grep -q "predicts even shares" "$tmp/err"
result "--plan --simulate --tensor-parallel: the split's predicted step (uneven shares refused)"
