#!/bin/sh
# shellcheck disable=SC2086
# test-link-tools.sh — TAP checks of the host link model through the tools:
# dltrain --link spills under --mem-limit with the losses of the run without
# it bit for bit, on the CPU and on OpenCL device 0, and takes at least the
# time its copies back to the device are modelled to; a bad spec is a usage
# error naming the fault (a bad DLRT_LINK fails the run); dlbench copy
# --link shows the model (MODEL, the device's link in the JSON) and never
# beats it, a preset's rate being the measured GEMM rate over its FLOP per
# byte; test-spill passes under DLRT_LINK. Times are lower bounds only.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
DLBENCH=${DLBENCH:-./tools/dlbench}
DLINFO=${DLINFO:-./tools/dlinfo}
TEST_SPILL=${TEST_SPILL:-./tests/test-spill}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT DLRT_LINK

TOOL=$DLTRAIN PLAN=20
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

# 1: the help
run --help
grep -q -- "--link SPEC" "$tmp/out" && grep -q "DLRT_LINK" "$tmp/out" &&
  grep -q "h200-pcie5" "$tmp/out"
result "dltrain --help documents --link, its presets and DLRT_LINK"

# 2-5: bad specs
bad_link() { # WORD SPEC: a usage error (exit 2) whose message has WORD
  run --data generated --limit 64 --link "$2"
  [ $rc -eq 2 ] && grep -q -- "--link" "$tmp/err" && grep -q -- "$1" "$tmp/err"
  result "--link $2 is a usage error naming $1"
}
bad_link "h200-pcie5, h100-pcie5" h300-pcie5
bad_link "above zero" 0GB/s
bad_link "bits" 12Gb/s
DLRT_LINK=fast run --data generated --limit 64
[ $rc -eq 1 ] && grep -q "DLRT_LINK" "$tmp/err" && grep -q "fast" "$tmp/err"
result "a bad DLRT_LINK fails the run, naming the variable and the spec"

if [ $have_python = no ]; then
  for i in $(seq 6 $PLAN); do skip "test $i" "python3 not found"; done
  exit 0
fi

opencl=no
has_opencl && opencl=yes
common="--model mlp --data generated --limit 640 --epochs 1 --threads 1 --prefetch 1 \
  --mem-limit 5M --offload optimizer --json --quiet"
rate=500000000 # B/s, --link 500MB/s

now() { python3 -c 'import time; print(time.monotonic())'; }

# 6-11: the same losses with and without the link, on each device; a run
# with it takes at least its fetched bytes over the rate (one engine each
# way: its copies to the device queue on one).
for device in cpu opencl:0; do
  if [ $device = opencl:0 ] && [ $opencl = no ]; then
    for i in 1 2 3; do skip "$device: dltrain --link" "no OpenCL device"; done
    continue
  fi
  run $common --device $device
  cp "$tmp/out" "$tmp/plain.json"
  [ $rc -eq 0 ] && last_json "$tmp/plain.json" 'assert d["fetched_bytes"] > 0, d'
  result "$device: dltrain --mem-limit 5M spills (without a link)"
  t0=$(now)
  run $common --device $device --link 500MB/s
  t1=$(now)
  cp "$tmp/out" "$tmp/link.json"
  [ $rc -eq 0 ] && python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
keys = ('epoch_losses', 'test_loss', 'final_loss', 'final_accuracy', 'test_accuracy',
        'spilled_bytes', 'fetched_bytes')
for k in keys:
    assert a[k] == b[k], (k, a[k], b[k])" "$tmp/plain.json" "$tmp/link.json"
  result "$device: with --link 500MB/s the losses and the traffic are the same bit for bit"
  last_json "$tmp/link.json" "
fetched = d['fetched_bytes']
wall = $t1 - $t0
assert wall >= fetched / $rate, (wall, fetched / $rate)
print('# %.3f s for %d bytes fetched: at least %.3f s' % (wall, fetched, fetched / $rate))" \
    >"$tmp/bound" 2>&1 && cat "$tmp/bound"
  result "$device: and takes at least its fetched bytes over 500 MB/s"
done

# 12-18: dlbench copy --link, and the help texts
run_bench() {
  "$DLBENCH" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
}
run_bench copy --quick --quiet --device cpu --link 100MB/s:1ms --json "$tmp/copy.json"
[ $rc -eq 0 ] && grep -q "^link     cpu:0 *100 MB/s + 1 ms" "$tmp/out" &&
  grep -q "MODEL" "$tmp/out"
result "dlbench copy --link 100MB/s:1ms names the link and has a MODEL column"
python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
dev = d['machine']['devices'][0]
l = dev['link']
assert l['spec'] == '100MB/s:1ms' and l['preset'] is None, l
assert l['bytes_per_s'] == 1e8 and abs(l['latency_s'] - 1e-3) < 1e-12, l
rows = [r for r in d['results'] if r['suite'] == 'copy']
assert rows
for r in rows:
    if r['case'].startswith('d2d'):
        assert r['model'] is None and 'not on the link' in r['note'], r
        continue
    want = r['bytes'] / (r['bytes'] / 1e8 + 1e-3) / 1e9
    assert abs(r['model'] - want) < 1e-5 * want, (r['case'], r['model'], want)  # 6 digits
    # a copy never ends before its model: never a higher rate
    assert r['max'] <= r['model'] * (1 + 1e-3), (r['case'], r['max'], r['model'])
" "$tmp/copy.json"
result "each host<->device row's MODEL is bytes / (bytes / rate + latency), never beaten"
python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
sizes = [r['bytes'] for r in d['results'] if r['suite'] == 'copy']
assert max(sizes) == 1 << 20, sizes  # 16 MiB would take 0.17 s
assert any(s['suite'] == 'copy' and 'modelled link' in s['reason'] for s in d['skipped']), d
" "$tmp/copy.json"
result "the sizes stop where a copy would pass 50 ms, saying so"
run_bench copy --quick --quiet --device cpu --filter h2d-pinned/4KiB --link h200-pcie5 \
  --json "$tmp/preset.json"
[ $rc -eq 0 ] && python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
l = d['machine']['devices'][0]['link']
assert l['preset'] == 'h200-pcie5' and l['device_flops'] > 0, l
assert abs(l['bytes_per_s'] / (l['device_flops'] / l['flop_per_byte']) - 1) < 1e-4, l
assert 13000 < l['flop_per_byte'] < 15000, l
print('# %s' % l['text'])" "$tmp/preset.json"
result "--link h200-pcie5: the device's measured GEMM rate over the preset's FLOP per byte"
run_bench copy --quick --device cpu --link mi301
[ $rc -eq 2 ] && grep -q -- "--link" "$tmp/err" && grep -q "mi300x-pcie5" "$tmp/err" &&
  [ ! -s "$tmp/out" ]
result "dlbench --link mi301 is a usage error listing the presets"
run_bench --help
grep -q -- "--link SPEC" "$tmp/out" && grep -q "DLRT_LINK" "$tmp/out"
result "dlbench --help documents --link and DLRT_LINK"
DLRT_LINK=2GB/s "$DLINFO" --help >"$tmp/out" 2>&1 && grep -q "DLRT_LINK" "$tmp/out"
result "dlinfo --help documents DLRT_LINK"

# 19-20: the spill tests under a link: the same bits as the unlimited run
if [ -x "$TEST_SPILL" ]; then
  DLRT_LINK=1GB/s:5us "$TEST_SPILL" >"$tmp/spill.log" 2>&1
  status=$?
  [ $status -eq 0 ] && ! grep -q "^not ok" "$tmp/spill.log" &&
    grep -q "bit for bit" "$tmp/spill.log"
  result "test-spill passes under DLRT_LINK=1GB/s:5us (its runs end with the unlimited run's bits)"
  grep -c "^ok" "$tmp/spill.log" | sed 's/^/# test-spill points: /'
  DLRT_LINK=bogus "$TEST_SPILL" >"$tmp/spill.log" 2>&1
  [ $? -ne 0 ]
  result "and fails under DLRT_LINK=bogus (the variable is read)"
else
  skip "test-spill under DLRT_LINK" "no $TEST_SPILL"
  skip "test-spill under a bad DLRT_LINK" "no $TEST_SPILL"
fi
