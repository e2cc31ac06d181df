#!/bin/sh
# shellcheck disable=SC2086
# test-offload-params.sh — TAP checks of dltrain --offload params: a small
# GPT whose parameters, gradients and Adam state (6.9 MB) exceed the device
# budget of 4 MiB (half of its 7.7 MiB unlimited peak) trains with its
# parameters streamed from the host, with the unlimited run's losses bit
# for bit on the CPU and on OpenCL device 0 (the printed step losses, the
# JSON val loss; test-param-stream checks every bit), within the budget, the JSON
# counting the parameters fetched and the gradients sent back; a look-ahead
# of 1 node, and checkpointed blocks, give the same losses; what it does
# not go with is refused. Under --host-limit the state goes to disk, and
# below the masters' bytes the masters with it (fp32 and bf16, cpu and
# OpenCL: the same losses); a full spill folder is an error, no results.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
DLINFO=${DLINFO:-./tools/dlinfo}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=22
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 22); do skip "test $i" "python3 not found"; done
  exit 0
fi

python3 "$(dirname "$0")/english_corpus.py" "$tmp/corpus.txt" 60000 20
small="--model gpt-mini --layers 2 --heads 4 --embd 128 --context 32 --batch 4 --threads 2
  --data $tmp/corpus.txt --steps 4 --eval-every 2 --eval-batches 2 --json"

# same_losses A B: two runs' losses on their step lines (train and val)
# and final val loss are the same.
same_losses() {
  grep '^step ' "$1.err" | grep -o 'loss [0-9.]*' >"$1.losses"
  grep '^step ' "$2.err" | grep -o 'loss [0-9.]*' >"$2.losses"
  [ -s "$1.losses" ] && cmp -s "$1.losses" "$2.losses" && python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
assert a['val_loss'] == b['val_loss'], (a['val_loss'], b['val_loss'])" "$1" "$2"
}

for device in cpu opencl:0; do
  if [ $device = opencl:0 ] && ! has_opencl; then
    for what in "unlimited" "--offload params" "the same losses" "within the budget"; do
      skip "$device: $what" "no OpenCL device"
    done
    continue
  fi
  run $small --device $device
  cp "$tmp/out" "$tmp/free-$device"
  cp "$tmp/err" "$tmp/free-$device.err"
  [ $rc -eq 0 ]
  result "$device: the unlimited run"
  run $small --device $device --mem-limit 4M --offload params
  cp "$tmp/out" "$tmp/stream-$device"
  cp "$tmp/err" "$tmp/stream-$device.err"
  [ $rc -eq 0 ]
  result "$device: --mem-limit 4M --offload params trains"
  same_losses "$tmp/free-$device" "$tmp/stream-$device"
  result "$device: the step losses and the val loss equal the unlimited run's"
  last_json "$tmp/stream-$device" "
assert d['params'] * 16 > 4 << 20, 'parameters, gradients and Adam state exceed the budget'
assert d['peak_device_bytes'] <= 4 << 20, d['peak_device_bytes']
# The JSON's traffic is the last stretch between evaluations: 2 steps.
assert d['fetched_bytes'] > 2 * d['params'] * 4, d['fetched_bytes']
assert d['spilled_bytes'] == 2 * d['params'] * 4, d['spilled_bytes']"
  result "$device: within the budget; each step fetches every parameter and sends every gradient back"
done

run $small --device cpu --mem-limit 4M --offload params --spill-prefetch 1
cp "$tmp/out" "$tmp/ahead1"
cp "$tmp/err" "$tmp/ahead1.err"
[ $rc -eq 0 ] && same_losses "$tmp/free-cpu" "$tmp/ahead1"
result "cpu: fetching 1 node ahead gives the same bits"

# Checkpointed blocks recompute from streamed parameters (fetched again).
run $small --device cpu --checkpoint blocks
cp "$tmp/err" "$tmp/ck-free.err"
cp "$tmp/out" "$tmp/ck-free"
run $small --device cpu --checkpoint blocks --mem-limit 4M --offload params
cp "$tmp/err" "$tmp/ck-stream.err"
cp "$tmp/out" "$tmp/ck-stream"
[ $rc -eq 0 ] && same_losses "$tmp/ck-free" "$tmp/ck-stream"
result "cpu: with --checkpoint blocks the same losses"

# Mixed precision: the host writes the 16-bit copies, the device fetches them.
for device in cpu opencl:0; do
  if [ $device = opencl:0 ] && ! has_opencl; then
    skip "$device: bf16 streamed" "no OpenCL device"
    continue
  fi
  run $small --device $device --precision bf16
  cp "$tmp/out" "$tmp/bf-free"
  cp "$tmp/err" "$tmp/bf-free.err"
  run $small --device $device --precision bf16 --mem-limit 4M --offload params
  cp "$tmp/out" "$tmp/bf-stream"
  cp "$tmp/err" "$tmp/bf-stream.err"
  [ $rc -eq 0 ] && same_losses "$tmp/bf-free" "$tmp/bf-stream" && python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
assert b['fetched_bytes'] < 0.6 * a['fetched_bytes'], (b['fetched_bytes'], a['fetched_bytes'])
" "$tmp/stream-$device" "$tmp/bf-stream"
  result "$device: bf16 streamed: the unlimited bf16 run's losses, about half the fp32 run's bytes fetched"
done

run $small --device cpu --precision fp16
cp "$tmp/out" "$tmp/h-free"
cp "$tmp/err" "$tmp/h-free.err"
run $small --device cpu --precision fp16 --mem-limit 4M --offload params
cp "$tmp/out" "$tmp/h-stream"
cp "$tmp/err" "$tmp/h-stream.err"
[ $rc -eq 0 ] && same_losses "$tmp/h-free" "$tmp/h-stream"
result "cpu: fp16 (dynamic loss scaling) streamed: the same losses"

run $small --device cpu --accum 2 --clip-norm 0.5
cp "$tmp/out" "$tmp/ac-free"
cp "$tmp/err" "$tmp/ac-free.err"
run $small --device cpu --accum 2 --clip-norm 0.5 --mem-limit 4M --offload params
cp "$tmp/out" "$tmp/ac-stream"
cp "$tmp/err" "$tmp/ac-stream.err"
[ $rc -eq 0 ] && same_losses "$tmp/ac-free" "$tmp/ac-stream"
result "cpu: --accum 2 --clip-norm 0.5 streamed: the same losses"

# The optimizer state past --host-limit on disk, in a quarter of its 1.7 MB
# of Adam state.
deep="--model gpt-mini --layers 4 --heads 4 --embd 64 --context 32 --batch 4 --threads 2
  --data $tmp/corpus.txt --steps 4 --eval-every 2 --eval-batches 2 --json --device cpu
  --mem-limit 4M --offload params"
mkdir -p "$tmp/spill"
run $deep
cp "$tmp/out" "$tmp/deep-host"
cp "$tmp/err" "$tmp/deep-host.err"
run $deep --host-limit 420K --spill-dir "$tmp/spill"
cp "$tmp/out" "$tmp/deep-disk"
cp "$tmp/err" "$tmp/deep-disk.err"
[ $rc -eq 0 ] && same_losses "$tmp/deep-host" "$tmp/deep-disk" && last_json "$tmp/deep-disk" "
state = d['params'] * 8
assert 420 << 10 < state / 4, state
assert d['disk_written_bytes'] > state / 2, d['disk_written_bytes']"
result "cpu: --host-limit at a quarter of the Adam state: the same losses, the state through the disk"

# 100K is less than three times the largest state (128 KiB): that state
# passes through the slots in chunks.
run $deep --host-limit 100K --spill-dir "$tmp/spill"
cp "$tmp/out" "$tmp/deep-chunks"
cp "$tmp/err" "$tmp/deep-chunks.err"
[ $rc -eq 0 ] && same_losses "$tmp/deep-host" "$tmp/deep-chunks" && last_json "$tmp/deep-chunks" "
state = d['params'] * 8
assert d['disk_written_bytes'] > state * 3 / 4, d['disk_written_bytes']"
result "cpu: --host-limit 100K, below three times the largest state: it streams in chunks, the same losses"

run $deep --host-limit 1K
[ $rc -eq 1 ] && grep -q -- "--host-limit of 1.0 KiB .* is too small for the optimizer state and \
masters .* give at least 4.0 KiB" "$tmp/err"
result "--host-limit below the slots of the least chunks: an error naming the least that would do"

# 420K is below the 874 KB of fp32 masters: they go to disk with their
# state (--host-limit holds both), updated in the slots, fetched in fp32 or
# cast to bf16 there; the host-only streamed run's losses, bit for bit.
for device in cpu opencl:0; do
  if [ $device = opencl:0 ] && ! has_opencl; then
    skip "$device: fp32 masters on disk" "no OpenCL device"
    skip "$device: bf16 masters on disk" "no OpenCL device"
    continue
  fi
  on=$(echo $deep | sed "s/--device cpu/--device $device/")
  for precision in fp32 bf16; do
    run $on --precision $precision
    cp "$tmp/out" "$tmp/m-host"
    cp "$tmp/err" "$tmp/m-host.err"
    run $on --precision $precision --host-limit 420K --spill-dir "$tmp/spill"
    cp "$tmp/out" "$tmp/m-disk"
    cp "$tmp/err" "$tmp/m-disk.err"
    [ $rc -eq 0 ] && same_losses "$tmp/m-host" "$tmp/m-disk" && last_json "$tmp/m-disk" "
st = d['stream']
assert st['state_disk_bytes'] > d['params'] * 8, (st, d['params'])
assert st['disk_written_bytes'] >= st['state_disk_bytes'], st
# Read: the state and masters on disk once a step for the updates, the
# masters alone for the fetches (4 steps of two, 4 evaluation batches of
# one), not each chunk whole at each fetch; at most 1.2x that.
disk = st['state_disk_bytes']
bound = 1.2 * (4 * disk + 12 * disk / 3)
assert st['disk_read_bytes'] <= bound, (st, bound)
assert st['disk_fetch_read_bytes'] <= 12 * disk / 3, st
print('read %.2f of the bound, the fetches %d bytes' % (st['disk_read_bytes'] / bound,
      st['disk_fetch_read_bytes']), file=sys.stderr)"
    result "$device: $precision masters on disk under --host-limit 420K: the host-only losses bit for bit"
  done
done

run_limited $((256 << 10)) "$DLTRAIN" $deep --host-limit 420K --spill-dir "$tmp/spill"
[ $rc -eq 1 ] && ! grep -q '^{' "$tmp/out" && grep -q "the spill directory $tmp/spill is full" "$tmp/err"
result "a spill folder too small for the state on disk: exit 1 naming it, no results"
