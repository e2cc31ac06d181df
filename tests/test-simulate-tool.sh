#!/bin/sh
# shellcheck disable=SC2086
# test-simulate-tool.sh — TAP checks of dltrain --plan --simulate: the table and
# its JSON keys for a preset, a file and this machine; gpt3-175b with the
# optimizer on the host in under a second without allocating (its planned
# peak is far past this machine); a budget's copies from a dry run;
# streaming with the optimizer state past --host-limit on disk, the disk's
# time from a file's disk_read and disk_write; and
# each bad --simulate (an unknown preset, a missing file, a bad line, no
# --plan) a usage error (exit 2) naming the problem.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=14
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 13); do skip "test $i" "python3 not found"; done
  exit 0
fi

keys='step_s compute_s forward_s backward_s update_s transfer_s exposed_transfer_s
host_update_s exposed_host_s host_hidden_fraction samples_per_s tokens_per_s flops mfu
h2d_bytes d2h_bytes copies nodes launches copies_from machine planned_peak_bytes
fits_device_memory figures'

# has_keys FILE: the simulate object has every key, and its parts add up.
has_keys() {
  python3 -c "import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])['simulate']
missing = [k for k in sys.argv[2].split() if k not in d]
assert not missing, missing
parts = d['forward_s'] + d['backward_s'] + d['update_s']
assert abs(d['compute_s'] - parts) <= 1e-6 * d['compute_s'], d
assert d['step_s'] >= d['compute_s'] * (1 - 1e-9) or d['host_update_s'] > 0, d
assert d['exposed_transfer_s'] <= d['step_s'], d
assert abs(d['samples_per_s'] * d['step_s'] - d['batch']) <= 1e-6 * d['batch'], d" "$1" "$keys"
}

run --plan --model mlp --data generated --simulate h200-pcie5
grep -q '^  step ' "$tmp/out" && grep -q 'exposed transfer' "$tmp/out" &&
  grep -q 'samples per second' "$tmp/out" && grep -q 'h200-pcie5' "$tmp/out"
result "mlp on h200-pcie5: the table (step, exposed transfer, samples per second)"

run --plan --model mlp --data generated --simulate h200-pcie5 --json
[ $rc -eq 0 ] && has_keys "$tmp/out"
result "--json: the simulate object's keys, its parts adding up"

run --plan --model gpt-mini --simulate a100-pcie4 --json
[ $rc -eq 0 ] && has_keys "$tmp/out" &&
  last_json "$tmp/out" "s = d['simulate']
assert abs(s['tokens_per_s'] - s['samples_per_s'] * 128) <= 1e-6 * s['tokens_per_s'], s"
result "gpt-mini on a100-pcie4: tokens per second are samples x the context"

# Nothing is built on a device: a replay of its schedule, some seconds at most
# (8.8 s seen under ASan on a loaded 2-core machine; a model of 175B
# parameters built anywhere would take far longer, or fail).
start=$(date +%s%N)
run --plan --model gpt3-175b --batch 1 --context 2048 --precision bf16 --simulate h200-pcie5 \
  --offload optimizer --json
end=$(date +%s%N)
ms=$(((end - start) / 1000000))
[ $rc -eq 0 ] && has_keys "$tmp/out" && [ $ms -lt 30000 ] &&
  last_json "$tmp/out" "s = d['simulate']
assert s['params'] > 1.7e11 and s['host_update_s'] > 0, s
assert s['copies_from'] == 'the optimizer on the host', s
assert s['fits_device_memory'] is False and s['d2h_bytes'] > 4 * 1.7e11, s"
result "gpt3-175b, optimizer on the host: predicted in $ms ms, nothing allocated"

printf 'base = h100-pcie5\nname = slow-h100\nlink = 1GB/s\n' >"$tmp/slow"
run --plan --model mlp --data generated --simulate h100-pcie5 --offload optimizer --json
cp "$tmp/out" "$tmp/fast.json"
run --plan --model mlp --data generated --simulate "$tmp/slow" --offload optimizer --json
[ $rc -eq 0 ] && python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1])['simulate'] for p in sys.argv[1:3])
assert b['machine'] == 'slow-h100' and b['h2d_bytes'] == a['h2d_bytes'], (a, b)
assert abs(b['transfer_s'] - (b['h2d_bytes'] + b['d2h_bytes']) / 1e9) <= 1e-6 * b['transfer_s'], b
assert b['step_s'] >= a['step_s'], (a, b)" "$tmp/fast.json" "$tmp/out"
result "a file based on a preset: the same copies, each at its 1 GB/s without latency"

run --plan --model mlp --data generated --limit 640 --simulate this --device cpu --json
[ $rc -eq 0 ] && has_keys "$tmp/out" && last_json "$tmp/out" "s = d['simulate']
assert s['machine'] == 'this' and s['figures']['matmul_fp32'] > 0 and s['step_s'] > 0, s"
result "this machine, measured on the cpu device"

run --plan --model mlp --data generated --limit 640 --simulate h200-pcie5 --device cpu \
  --mem-limit 5M --offload optimizer --json
[ $rc -eq 0 ] && has_keys "$tmp/out" && last_json "$tmp/out" "s = d['simulate']
assert s['copies_from'].startswith('a dry run of the executor on cpu'), s
assert s['h2d_bytes'] > 0 and s['d2h_bytes'] > 0 and s['host_update_s'] > 0, s"
result "--mem-limit: the copies of a dry run on the device, the host's updates"

printf 'base = h200-pcie5\nname = slow-disk\ndisk_read = 2GB/s\ndisk_write = 1GB/s\n' >"$tmp/disk"
# 8G holds gpt2-xl's 6.2 GB of masters and some of the state beside them.
run --plan --model gpt2-xl --batch 8 --precision bf16 --offload params --host-limit 8G \
  --simulate "$tmp/disk" --json
[ $rc -eq 0 ] && has_keys "$tmp/out" && last_json "$tmp/out" "s = d['simulate']
assert s['figures']['disk_read'] == 2e9 and s['figures']['disk_write'] == 1e9, s['figures']
assert s['params_on_disk'] > 0 and s['state_disk_bytes'] > 0, s
assert s['disk_written_bytes'] == s['state_disk_bytes'] >= s['disk_read_bytes'] > 0, s
want = s['disk_read_bytes'] / 2e9 + s['disk_written_bytes'] / 1e9
assert abs(s['disk_s'] - want) <= 1e-6 * want, (s['disk_s'], want)
assert 0 <= s['exposed_disk_s'] <= s['step_s'] and 'state on disk' in s['copies_from'], s"
result "--offload params --host-limit 8G: the state on disk at the file's 2 and 1 GB/s"

# 4G is below the masters: they go to disk with their state, each written
# once a step with it, and read again by the fp32 fetches (the layer norms,
# the tied head), so more is read than written.
state8=$(last_json "$tmp/out" "print(d['simulate']['state_disk_bytes'])")
run --plan --model gpt2-xl --batch 8 --precision bf16 --offload params --host-limit 4G \
  --simulate "$tmp/disk" --json
[ $rc -eq 0 ] && last_json "$tmp/out" "s = d['simulate']
assert s['state_disk_bytes'] > $state8, (s['state_disk_bytes'], $state8)
assert s['disk_written_bytes'] == s['state_disk_bytes'] < s['disk_read_bytes'], s
want = s['disk_read_bytes'] / 2e9 + s['disk_written_bytes'] / 1e9
assert abs(s['disk_s'] - want) <= 1e-6 * want, (s['disk_s'], want)"
result "--offload params --host-limit 4G, below the masters: masters and state on disk, the fp32 fetches read there too"

run --plan --model mlp --data generated --simulate h900-pcie9
[ $rc -eq 2 ] && grep -q 'h900-pcie9' "$tmp/err" && grep -q 'h200-pcie5' "$tmp/err"
result "an unknown preset: a usage error naming it and the presets"

run --plan --model mlp --data generated --simulate "$tmp/absent.machine"
[ $rc -eq 2 ] && grep -q 'absent.machine' "$tmp/err"
result "a missing file: a usage error naming it"

printf 'base = h200-pcie5\nmemory_bandwidth = quick\n' >"$tmp/bad.machine"
run --plan --model mlp --data generated --simulate "$tmp/bad.machine"
[ $rc -eq 2 ] && grep -q 'bad.machine, line 2: memory_bandwidth' "$tmp/err"
result "a bad line: a usage error naming the file, the line and the key"

printf 'base = h200-pcie5\nbandwidth = 4TB/s\n' >"$tmp/typo.machine"
run --plan --model mlp --data generated --simulate "$tmp/typo.machine"
[ $rc -eq 2 ] && grep -q 'unknown key "bandwidth"' "$tmp/err" &&
  grep -q 'memory_bandwidth' "$tmp/err"
result "an unknown key: a usage error listing the keys"

run --model mlp --data generated --simulate h200-pcie5
[ $rc -eq 2 ] && grep -q 'simulate goes with --plan' "$tmp/err"
result "--simulate without --plan: a usage error"
