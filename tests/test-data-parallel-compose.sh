#!/bin/sh
# shellcheck disable=SC2086
# test-data-parallel-compose.sh — TAP checks that plain data parallelism
# (no --tensor-parallel, no --pipeline) takes the options one device takes,
# in one process (--devices), across MPI ranks, and both at once: --accum K
# (K gradient runs summed on each replica, one all-reduce an update) trains
# as one device with the same global batch (to fp32 rounding);
# --checkpoint (blocks, auto) and --mem-limit with --offload activations,
# optimizer or all (each replica spilling within the budget on its own
# device) keep the unlimited run's losses bit for bit on the CPU, with
# --accum, --clip-norm and fp16 loss scaling too; on OpenCL device 0 beside
# the CPU the device's measured peak stays within the budget; --zero 1|2|3
# with --accum trains as the unsharded replicas (to fp32 rounding); what
# stays refused (--offload params, --zero with --mem-limit) says what works.
#
# gpt-mini at context 64, batch 4, 20 steps, an evaluation after each
# (40 losses a run). --devices cpu@1,cpu@1 fixes the split (2 rows each)
# so runs compare bit for bit; a replica plans a peak of about 10 MiB, and
# 10 MiB (--mem-limit 10M) makes it spill.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
DLINFO=${DLINFO:-./tools/dlinfo}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=25
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 $PLAN); do skip "test $i" "python3 not found"; done
  exit 0
fi

python3 "$(dirname "$0")/english_corpus.py" "$tmp/corpus.txt" 100000 96
common="--model gpt-mini --data $tmp/corpus.txt --context 64 --batch 4 --threads 1"
common="$common --eval-every 1 --eval-batches 1 --json --quiet --steps 20"
two="--devices cpu@1,cpu@1"

# keep NAME ARGS: dltrain $common ARGS, kept as $tmp/NAME.json.
keep() {
  name=$1
  shift
  run $common "$@"
  cp "$tmp/out" "$tmp/$name.json"
  [ $rc -eq 0 ]
}

# spilled FILE: the run spilled (its replicas' or ranks' storages moved).
spilled() {
  last_json "$1" "assert d['spilled_bytes'] > 0, d['spilled_bytes']
print('# spilled %d bytes, fetched %d' % (d['spilled_bytes'], d['fetched_bytes']))"
}

# 1-3: accumulation in one process.
keep one_acc --device cpu --accum 2
result "one device --accum 2 (reference)"
keep two_free $two
result "--devices cpu@1,cpu@1 (reference)"
keep two_acc $two --accum 2
[ $rc -eq 0 ] && round_losses_close "$tmp/one_acc.json" "$tmp/two_acc.json" 1e-5
result "--devices cpu,cpu --accum 2 trains as one device with --accum 2 (within 1e-5)"

# 4-5: checkpointing on every replica.
keep two_blocks $two --checkpoint blocks
[ $rc -eq 0 ] && same_round_losses "$tmp/two_free.json" "$tmp/two_blocks.json" 40
result "--devices --checkpoint blocks: the unsegmented replicas' losses bit for bit"
keep two_auto $two --checkpoint auto --mem-limit 10M --offload activations
[ $rc -eq 0 ] && same_round_losses "$tmp/two_free.json" "$tmp/two_auto.json" 40
result "--devices --checkpoint auto --mem-limit 10M: one choice for both, the same losses"

# 6-8: each replica spills within the budget on its device.
keep two_m3 $two --mem-limit 10M --offload optimizer
[ $rc -eq 0 ] && same_round_losses "$tmp/two_free.json" "$tmp/two_m3.json" 40 &&
  spilled "$tmp/two_m3.json"
result "--devices --mem-limit 10M --offload optimizer: the unlimited losses bit for bit"
keep two_acc_m3 $two --accum 2 --mem-limit 10M --offload all
[ $rc -eq 0 ] && same_round_losses "$tmp/two_acc.json" "$tmp/two_acc_m3.json" 40 &&
  spilled "$tmp/two_acc_m3.json"
result "--devices --accum 2 --mem-limit 10M --offload all: --accum 2's losses bit for bit"
keep two_clip $two --accum 2 --clip-norm 0.5
keep two_clip_m3 $two --accum 2 --clip-norm 0.5 --mem-limit 10M --offload activations
[ $rc -eq 0 ] && same_round_losses "$tmp/two_clip.json" "$tmp/two_clip_m3.json" 40
result "--devices --accum 2 --clip-norm 0.5 under --mem-limit 10M: the unlimited bits"

# 9-10: clipping and fp16 loss scaling as on one device.
keep one_clip --device cpu --accum 2 --clip-norm 0.5
[ $rc -eq 0 ] && round_losses_close "$tmp/one_clip.json" "$tmp/two_clip.json" 1e-5
result "--devices --accum 2 --clip-norm 0.5 trains as one device does (within 1e-5)"
keep one_f16 --device cpu --accum 2 --precision fp16
keep two_f16 $two --accum 2 --precision fp16 --mem-limit 10M --offload optimizer
[ $rc -eq 0 ] && round_losses_close "$tmp/one_f16.json" "$tmp/two_f16.json" 1e-3
result "--devices --accum 2 --precision fp16 under --mem-limit: as one device (within 1e-3)"

# 11-12: OpenCL device 0 beside the CPU, its measured peak within the budget.
if has_opencl; then
  mixed="--devices cpu@1,opencl:0@1"
  keep mixed_free $mixed --accum 2
  result "--devices cpu,opencl:0 --accum 2 (reference)"
  keep mixed_m3 $mixed --accum 2 --mem-limit 10M --offload optimizer
  [ $rc -eq 0 ] && same_round_losses "$tmp/mixed_free.json" "$tmp/mixed_m3.json" 40 &&
    last_json "$tmp/mixed_m3.json" "devs = d['devices']
assert [x['device'] for x in devs] == ['cpu:0', 'opencl:0'], devs
assert 0 < devs[1]['peak_device_bytes'] <= 10 << 20, devs
print('# opencl:0 measured peak %d bytes of 10 MiB' % devs[1]['peak_device_bytes'])"
  result "cpu,opencl:0 under --mem-limit 10M: the same losses, opencl:0's peak within 10 MiB"
else
  skip "--devices cpu,opencl:0 --accum 2" "no OpenCL device"
  skip "cpu,opencl:0 under --mem-limit 10M" "no OpenCL device"
fi

# 13-14: what stays refused names what works.
run $common $two --mem-limit 10M --offload params
[ $rc -eq 2 ] && grep -q "devices with --mem-limit goes without --offload params" "$tmp/err" &&
  grep -q "activations, optimizer or all work" "$tmp/err"
result "--devices --offload params: a usage error naming the offloads that work"
run $common $two --zero 1 --mem-limit 10M
[ $rc -eq 2 ] && grep -q "zero goes without --mem-limit" "$tmp/err"
result "--devices --zero 1 --mem-limit 10M: a usage error naming --mem-limit"

# 15: ZeRO with accumulation: each replica's range from the update's mean.
keep two_acc_z3 $two --accum 2 --zero 3
[ $rc -eq 0 ] && round_losses_close "$tmp/two_acc.json" "$tmp/two_acc_z3.json" 1e-5
result "--devices --accum 2 --zero 3 trains as --devices --accum 2 (within 1e-5)"

# 16-25: across MPI ranks, and ranks with --devices each.
why=$(mpi_why)
if [ -n "$why" ]; then
  while [ $n -lt $PLAN ]; do skip "test $((n + 1))" "$why"; done
  exit 0
fi
mpi_ranks 2 mpi_free --device cpu
result "mpirun -np 2 (reference)"
keep one_b8_acc --device cpu --batch 8 --accum 2
result "one device --batch 8 --accum 2 (reference)"
mpi_ranks 2 mpi_acc --device cpu --accum 2
[ $rc -eq 0 ] && round_losses_close "$tmp/one_b8_acc.json" "$tmp/mpi_acc.json" 1e-5
result "mpirun -np 2 --accum 2 trains as one device with --batch 8 --accum 2 (within 1e-5)"
for z in 1 2; do
  mpi_ranks 2 mpi_acc_z$z --device cpu --accum 2 --zero $z
  [ $rc -eq 0 ] && round_losses_close "$tmp/mpi_acc.json" "$tmp/mpi_acc_z$z.json" 1e-5
  result "mpirun -np 2 --accum 2 --zero $z trains as --accum 2 (within 1e-5)"
done
mpi_ranks 2 mpi_m3 --device cpu --mem-limit 10M --offload optimizer
[ $rc -eq 0 ] && same_round_losses "$tmp/mpi_free.json" "$tmp/mpi_m3.json" 40 &&
  spilled "$tmp/mpi_m3.json"
result "mpirun -np 2 --mem-limit 10M --offload optimizer: the unlimited losses bit for bit"
mpi_ranks 2 mpi_acc_m3 --device cpu --accum 2 --mem-limit 10M --offload all --clip-norm 0.5
mpi_ranks 2 mpi_acc_clip --device cpu --accum 2 --clip-norm 0.5
[ $rc -eq 0 ] && same_round_losses "$tmp/mpi_acc_clip.json" "$tmp/mpi_acc_m3.json" 40
result "mpirun -np 2 --accum 2 --clip-norm 0.5 under --mem-limit 10M: the unlimited bits"
mpi_ranks 2 mpi_auto --device cpu --checkpoint auto --mem-limit 10M --offload activations
[ $rc -eq 0 ] && same_round_losses "$tmp/mpi_free.json" "$tmp/mpi_auto.json" 40
result "mpirun -np 2 --checkpoint auto --mem-limit 10M: the ranks agree, the same losses"
mpi_ranks 2 mpi_two_acc $two --accum 2
[ $rc -eq 0 ] && round_losses_close "$tmp/one_b8_acc.json" "$tmp/mpi_two_acc.json" 1e-5
result "mpirun -np 2 --devices cpu,cpu --accum 2: as one device with --batch 8 --accum 2"
mpi_ranks 2 mpi_two_acc_m3 $two --accum 2 --mem-limit 10M --offload optimizer
[ $rc -eq 0 ] && same_round_losses "$tmp/mpi_two_acc.json" "$tmp/mpi_two_acc_m3.json" 40
result "mpirun -np 2 --devices cpu,cpu --accum 2 --mem-limit 10M: the unlimited bits"
