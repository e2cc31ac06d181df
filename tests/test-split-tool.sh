#!/bin/sh
# shellcheck disable=SC2086
# test-split-tool.sh — TAP checks of dltrain --plan's splits of a GPT over
# devices (dltrain-split.c): gpt3-175b on 40 GB devices lists tensor x
# pipeline x data splits that fit, with their device counts (t x p x d) and
# command lines, an 8 x 12-or-more one among them, in under 60 s (0.5 s on an
# idle machine: nothing is allocated); with
# --simulate a100-pcie4 each one's predicted step, its splits line before
# the simulate object (which stays the last line); gpt-mini's best split is
# one device, which this version runs; --splits 0 shows none; a machine
# without figures between devices predicts one device only; bad --splits
# and --max-devices are usage errors (exit 2) naming the problem.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=11
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 11); do skip "test $i" "python3 not found"; done
  exit 0
fi

start=$(date +%s)
run --plan --model gpt3-175b --device-memory 40G
end=$(date +%s)
[ $rc -eq 0 ] && grep -q '^splits of gpt3-175b over devices of 40.0 GiB' "$tmp/out" &&
  grep -q 'dltrain --model gpt3-175b' "$tmp/out" && [ $((end - start)) -lt 60 ]
result "gpt3-175b, 40G: the splits' table and command lines, in $((end - start)) s"

run --plan --model gpt3-175b --device-memory 40G --splits 1000 --json
[ $rc -eq 0 ] && last_json "$tmp/out" "s = d['splits']
b = s['best']
assert s['fitting'] > 0 and len(b) == 1000, (s['fitting'], len(b))
for x in b[:s['fitting']]:
    assert x['fits'] and x['device_bytes'] <= 40 * 2**30, x
    assert x['devices'] == x['tensor'] * x['pipeline'] * x['data'], x
    assert x['device_bytes'] == x['param_bytes'] + x['grad_bytes'] + x['optimizer_bytes'] + x['activation_bytes'], x
assert [x['devices'] for x in b] == sorted(x['devices'] for x in b), 'by devices'
assert any(x['tensor'] == 8 and x['pipeline'] >= 12 and x['fits'] for x in b)
assert d['plan']['model'] == 'gpt3-175b'"
result "--json: the plan's splits fit 40 GB, devices = t x p x d, fewest first, t=8 x p>=12 among them"

run --plan --model gpt3-175b --device-memory 40G --simulate a100-pcie4 --json
[ $rc -eq 0 ] && python3 -c "import json, sys
lines = open(sys.argv[1]).read().splitlines()
s = json.loads(lines[-2])['splits']
assert 'simulate' in json.loads(lines[-1])
assert s['machine'] == 'a100-pcie4' and s['ranked_by'] == 'tokens_per_s_per_device', s
b = s['best']
assert b and b[0]['fits'], b
for x in b:
    assert x['step_s'] >= x['compute_s'] > 0 and x['tokens_per_s'] > 0, x
    assert abs(x['tokens_per_s'] * x['step_s'] - s['batch'] * s['context']) <= 1e-6 * x['tokens_per_s'] * x['step_s'], x
r = [x['tokens_per_s'] / x['devices'] for x in b]
assert r == sorted(r, reverse=True), r" "$tmp/out"
result "--simulate a100-pcie4 --json: each split's step; the splits line, then simulate's last"

run --plan --model gpt3-175b --device-memory 40G --simulate a100-pcie4 --splits 3
[ $rc -eq 0 ] && grep -q 'predicted tokens per second per device' "$tmp/out" &&
  grep -q 'tokens/s' "$tmp/out" && grep -q '      step: compute' "$tmp/out" &&
  grep -q '^simulate gpt3-175b on a100-pcie4' "$tmp/out"
result "--simulate's table, then the splits with their predicted steps"

run --plan --model gpt3-175b --device-memory 40G --simulate a100-pcie4 --max-devices 128 --json
[ $rc -eq 0 ] && python3 -c "import json, sys
s = json.loads(open(sys.argv[1]).read().splitlines()[-2])['splits']
assert s['ranked_by'] == 'tokens_per_s' and s['max_devices'] == 128, s
assert all(x['devices'] <= 128 for x in s['best'])
t = [x['tokens_per_s'] for x in s['best'] if x['fits']]
assert t == sorted(t, reverse=True), t" "$tmp/out"
result "--max-devices 128: at most 128 devices, ranked by tokens per second in all"

run --plan --model gpt-mini --json
[ $rc -eq 0 ] && last_json "$tmp/out" "b = d['splits']['best'][0]
assert b['devices'] == 1 and b['runs_now'] and b['needs'] == '' and b['fits'], b
assert b['flags'].startswith('dltrain --model gpt-mini --batch 32'), b"
result "gpt-mini: the best split is one device, which this version runs"

run --plan --model gpt-mini --splits 0
[ $rc -eq 0 ] && grep -q '^splits of gpt-mini' "$tmp/out" && ! grep -q '      dltrain ' "$tmp/out"
result "--splits 0: the count, no splits"

printf 'name = bare\nmatmul_fp32 = 10T\nvector_fp32 = 1T\nmemory_bandwidth = 1TB/s\nlink = 10GB/s\ndevice_memory = 40G\n' > "$tmp/bare.machine"
run --plan --model gpt-mini --simulate "$tmp/bare.machine" --json
[ $rc -eq 0 ] && python3 -c "import json, sys
s = json.loads(open(sys.argv[1]).read().splitlines()[-2])['splits']
assert s['max_devices'] == 1 and all(x['devices'] == 1 for x in s['best']), s" "$tmp/out"
result "a machine without peer, devices_per_node and network: one device only"

run --plan --model mlp --data generated --splits 3
[ $rc -eq 2 ] && grep -q 'GPT' "$tmp/err"
result "--splits for mlp: a usage error naming GPT models"

run --plan --model gpt-mini --splits many
[ $rc -eq 2 ] && grep -q -- '--splits' "$tmp/err"
result "--splits many: a usage error"

run --model gpt-mini --max-devices 8
[ $rc -eq 2 ] && grep -q -- '--max-devices' "$tmp/err"
result "--max-devices without --plan: a usage error"
