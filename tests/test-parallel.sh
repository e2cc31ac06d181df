#!/bin/sh
# shellcheck disable=SC2086
# test-parallel.sh — TAP checks of dltrain --devices (data parallel in one
# process): two replicas on the CPU, and the CPU beside OpenCL device 0 when
# there is one, train as one device with the same batch does (to fp32
# rounding); the split is reported and adds up to the batch; --json lists
# every device with its rows (it named only the first); --pipeline trains as
# one device, refuses batch norm before its last stage; bad lists and
# combinations are usage errors.

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

opencl=no
has_opencl && opencl=yes
common="--data generated --limit 2560 --epochs 2 --batch 64 --threads 1 --optimizer sgd"
common="$common --momentum 0.9 --json --quiet"


# 1
run $common --device cpu
cp "$tmp/out" "$tmp/one.json"
[ $rc -eq 0 ]
result "one device: the reference run"

# 2, 3
run $common --devices cpu,cpu
cp "$tmp/err" "$tmp/two.err"
[ $rc -eq 0 ] && losses_close "$tmp/one.json" "$tmp/out" 1e-5
result "--devices cpu,cpu trains as one device (losses within 1e-5 relative)"
grep "^devices" "$tmp/two.err" | tail -1 | python3 -c "import re, sys
rows = [int(n) for n in re.findall(r'(\d+) rows', sys.stdin.read())]
assert len(rows) == 2 and sum(rows) == 64 and min(rows) >= 1, rows"
result "the split after measuring is reported and adds up to the batch"

# 4, 5: --json names every device, each with its rows of the batch.
last_json "$tmp/out" "devs = d['devices']
assert [x['device'] for x in devs] == ['cpu:0', 'cpu:0'], devs
assert sum(x['rows'] for x in devs) == 64 and all(x['rows'] >= 1 for x in devs), devs
assert all(x['device_name'] and x['peak_device_bytes'] > 0 for x in devs), devs"
result "--devices cpu,cpu: --json lists both replicas with their rows"
last_json "$tmp/one.json" "assert [x['device'] for x in d['devices']] == ['cpu:0'], d['devices']
assert d['devices'][0]['rows'] == 64, d['devices']"
result "one device: --json lists it, with the whole batch"

# 6
if [ $opencl = yes ]; then
  run $common --devices cpu,opencl:0
  [ $rc -eq 0 ] && losses_close "$tmp/one.json" "$tmp/out" 1e-4 &&
    last_json "$tmp/out" "assert [x['device'] for x in d['devices']] == ['cpu:0', 'opencl:0'], d"
  result "--devices cpu,opencl:0 trains as one device (losses within 1e-4 relative), both in --json"
else
  skip "--devices cpu,opencl:0" "no OpenCL device"
fi

# 7-9: pipeline parallel (GPipe): the same losses as one device.
run $common --pipeline cpu,cpu
cp "$tmp/err" "$tmp/pipe.err"
[ $rc -eq 0 ] && losses_close "$tmp/one.json" "$tmp/out" 1e-4 &&
  grep -q "^pipeline cpu:0 layers 1-2, cpu:0 layers 3-6; 4 micro-batches of 16" "$tmp/pipe.err"
result "--pipeline cpu,cpu: two stages balanced by parameters, losses within 1e-4 of one device"
run $common --pipeline cpu,cpu,cpu --micro-batches 8
[ $rc -eq 0 ] && losses_close "$tmp/one.json" "$tmp/out" 1e-4 &&
  last_json "$tmp/out" "assert len(d['devices']) == 3 and all(x['rows'] == 64 for x in d['devices']), d"
result "--pipeline over three stages with 8 micro-batches: the same, the three stages in --json"
if [ $opencl = yes ]; then
  run $common --pipeline cpu,opencl:0
  [ $rc -eq 0 ] && losses_close "$tmp/one.json" "$tmp/out" 1e-4
  result "--pipeline cpu,opencl:0: the same"
else
  skip "--pipeline cpu,opencl:0" "no OpenCL device"
fi

# 10
run --data generated --limit 640 --pipeline cpu,cpu --micro-batches 5
[ $rc -eq 1 ] && grep -q "does not split into 5 micro-batches" "$tmp/err"
result "a batch that does not split into the micro-batches fails and says so"

# 11: batch norm before the last stage (the forward pass there evaluates,
# the recomputation trains) is refused; in the last stage it trains.
printf 'linear 16\nbatchnorm\nrelu\nlinear 512\nrelu\nlinear 512\nrelu\n' >"$tmp/bn.model"
run --model "$tmp/bn.model" --data generated --limit 640 --pipeline cpu,cpu --quiet
[ $rc -eq 1 ] && grep -q "stage before the last (layers 1-4) has batch norm" "$tmp/err" &&
  printf 'linear 64\nbatchnorm\nrelu\nlinear 64\nrelu\n' >"$tmp/bn.model" &&
  run --model "$tmp/bn.model" --data generated --limit 640 --pipeline cpu,cpu --quiet &&
  [ $rc -eq 0 ] && grep -q "^pipeline cpu:0 layers 1-1, cpu:0 layers 2-6;" "$tmp/out"
result "--pipeline refuses batch norm before the last stage, trains it in the last"

# 12-17
for args in "--devices cpu --device cpu" "--devices bogus" "--devices cpu@0,cpu" \
  "--devices ," "--pipeline cpu" "--pipeline cpu,cpu --devices cpu,cpu"; do
  run --data generated --limit 640 $args
  [ $rc -eq 2 ] && [ -s "$tmp/err" ]
  result "$args is a usage error"
done
