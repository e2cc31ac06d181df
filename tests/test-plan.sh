#!/bin/sh
# shellcheck disable=SC2086
# test-plan.sh — TAP checks of dltrain --plan: the planned peak of a training
# step is within 5% of the peak the allocator measures in a real run, for mlp
# and cnn at three batch sizes, on the CPU and on OpenCL device 0 when there
# is one; the largest batch that fits is consistent with the plan; the
# what-if table gives the GPT-3 figures; bad options are usage errors.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
DLINFO=${DLINFO:-./tools/dlinfo}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=16
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 16); do skip "test $i" "python3 not found"; done
  exit 0
fi

field() { # FILE KEY... : a field of the JSON on the last line of FILE
  python3 -c "import json, sys; d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
for k in sys.argv[2:]: d = d[k]
print(d)" "$@"
}

opencl=no
[ -x "$DLINFO" ] && "$DLINFO" --device opencl:0 >/dev/null 2>&1 && opencl=yes

# 1-12: planned against measured.
for device in cpu opencl:0; do
  for model in mlp cnn; do
    for batch in 16 64 256; do
      what="$model, batch $batch, on $device: planned peak within 5% of the measured"
      if [ $device = opencl:0 ] && [ $opencl = no ]; then
        skip "$what" "no OpenCL device"
        continue
      fi
      common="--data generated --model $model --batch $batch --device $device --json --quiet"
      run $common --plan
      cp "$tmp/out" "$tmp/plan.json"
      run $common --limit $((batch * 2))
      if [ $rc -ne 0 ]; then
        false
        result "$what"
        continue
      fi
      planned=$(field "$tmp/plan.json" plan planned_peak_bytes)
      measured=$(field "$tmp/out" peak_device_bytes)
      python3 -c "import sys; p, m = int(sys.argv[1]), int(sys.argv[2])
assert abs(p - m) <= 0.05 * m, (p, m)" "$planned" "$measured"
      result "$what ($planned vs $measured bytes)"
    done
  done
done

# 13: the largest batch fits and one more does not.
run --data generated --model cnn --plan --device-memory 200M --json --device cpu
best=$(field "$tmp/out" max_batch plain)
run --data generated --model cnn --plan --batch "$best" --json --device cpu
fits=$(field "$tmp/out" plan planned_peak_bytes)
run --data generated --model cnn --plan --batch $((best + 1)) --json --device cpu
over=$(field "$tmp/out" plan planned_peak_bytes)
[ "$best" -gt 0 ] && [ "$fits" -le 209715200 ] && [ "$over" -gt 209715200 ]
result "--device-memory 200M: batch $best plans $fits bytes, one more $over"

# 14: GPT-3 what-if.
run --data generated --plan --what-if 175e9 --device-memory 80G --json --device cpu
[ $rc -eq 0 ] && python3 -c "import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
w = {r['strategy']: r for r in d['what_if']}
r = w['fp16 weights alone (inference)']
assert r['device_bytes'] == 350e9 and r['devices'] == 5 and not r['fits_one_device'], r
assert w['mixed precision training, Adam']['device_bytes'] == 2800e9, w" "$tmp/out"
result "--what-if 175e9: 350 GB of fp16 weights, 5 devices of 80 GiB; 2.8 TB to train"

# 15, 16
for args in "--device-memory lots" "--what-if 175e9"; do
  run --data generated $args
  [ $rc -eq 2 ] && [ -s "$tmp/err" ]
  result "$args (without --plan, or malformed) is a usage error"
done
