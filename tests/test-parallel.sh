#!/bin/sh
# shellcheck disable=SC2086
# test-parallel.sh — TAP checks of dltrain --devices (data parallel in one
# process): two replicas on the CPU, and the CPU beside OpenCL device 0 when
# there is one, train as one device with the same batch does (to fp32
# rounding); the split is reported and adds up to the batch; bad lists and
# combinations are usage errors.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
DLINFO=${DLINFO:-./tools/dlinfo}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=8
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 8); do skip "test $i" "python3 not found"; done
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

# 4
if [ $opencl = yes ]; then
  run $common --devices cpu,opencl:0
  [ $rc -eq 0 ] && losses_close "$tmp/one.json" "$tmp/out" 1e-4
  result "--devices cpu,opencl:0 trains as one device (losses within 1e-4 relative)"
else
  skip "--devices cpu,opencl:0" "no OpenCL device"
fi

# 5-8
for args in "--devices cpu --device cpu" "--devices bogus" "--devices cpu,cpu --accum 2" \
  "--devices ,"; do
  run --data generated --limit 640 $args
  [ $rc -eq 2 ] && [ -s "$tmp/err" ]
  result "$args is a usage error"
done
