#!/bin/sh
# shellcheck disable=SC2086
# test-placement.sh — TAP checks of the placement (dlrt_plan_placement) through
# dltrain --plan and --offload auto:
#  - a model that fits is placed all on the device, with no flags;
#  - gpt2-xl on a device of 8G with 64G of host: parameters streamed, the host
#    holding the fp32 master, its bf16 copy, the gradients and Adam's two
#    moments, 18 B a parameter, nothing on disk; with 32G of host the Adam
#    state beyond --host-limit goes to disk (rung 4); with 16G the masters
#    do not fit beside the copies and gradients, and most go to disk with
#    their state (rung 5, replayed); with 8G the copies and gradients alone
#    exceed the host, and it spills through the pool (rung 6) with the
#    host's share on disk;
#  - gpt3-175b on one H200 with 1T of host: masters on NVMe (rung 5);
#  - gpt3-175b on 8G fits nothing, and says why for every rung; on one H200
#    (141G) with 2T of host it streams with masters and gradients on the
#    host and Adam on NVMe, and --simulate h200-pcie5 replays the disk at
#    the preset's figures;
#  - with --simulate the placed step is predicted;
#  - a small GPT on devices of 4M, 3M and 2M: the flags each plan prints
#    train within them, and --offload auto under --mem-limit 4M picks the
#    same placement and trains to the same losses as those flags;
#  - the same GPT on 4M with a host of 7500K: rung 4; its flags train within
#    the device, the runtime puts on disk exactly the state the plan put
#    there (the shared rule), its host state within --host-limit, and the
#    losses are those of the host-only streamed run and of --offload auto;
#  - with a host of 4000K: rung 5; its flags train, masters and state on disk
#    as the plan put them, the same losses.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT DLRT_PLAN_STRATEGY

TOOL=$DLTRAIN PLAN=17
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 17); do skip "test $i" "python3 not found"; done
  exit 0
fi

# placed FILE PYTHON: asserts on the placement object p of --plan --json.
placed() {
  python3 -c "import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
p = d['placement']
parts = p['parts']
tiers = ('device', 'pinned_host', 'pageable_host', 'disk')
host = sum(v['pinned_host'] + v['pageable_host'] for v in parts.values())
disk = sum(v['disk'] for v in parts.values())
assert host == p['host_need'] and disk == p['disk_need'], (host, disk, p)
$2" "$1"
}

run --plan --model mlp --data generated --device-memory 8G --json
[ $rc -eq 0 ] && placed "$tmp/out" "
assert p['fits'] and p['rung'] == 0 and p['flags'] == '', p
assert p['host_need'] == 0 and p['disk_need'] == 0, p
assert parts['master_params']['device'] == 4 * p['params'], p"
result "mlp on 8G: all on the device, no flags"

xl="--plan --model gpt2-xl --batch 8 --precision bf16 --device-memory 8G"
run $xl --host-memory 64G --json
[ $rc -eq 0 ] && placed "$tmp/out" "
n = p['params']
assert p['fits'] and p['rung'] == 3, p
for f in ('--offload params', '--checkpoint blocks', '--mem-limit 8192M', '--spill-prefetch'):
    assert f in p['flags'], (f, p['flags'])
# The state in the allocator's blocks: 8 B a parameter, rounded up per tensor;
# beside it the master, its bf16 copy and the gradient: 18 B.
assert 18 * n <= p['host_need'] <= 1.05 * 18 * n and p['disk_need'] == 0, (p['host_need'], n)
assert parts['master_params']['pinned_host'] == 4 * n and parts['gradients']['pinned_host'] == 4 * n
assert parts['compute_copies']['pinned_host'] == 2 * n, parts['compute_copies']
state = parts['optimizer_state']
assert state['pinned_host'] + state['pageable_host'] == d['plan']['optimizer_state_bytes']
assert parts['optimizer_state']['device'] == 0
assert 0 < parts['master_params']['device'] < 4 * n / 10, parts['master_params']
assert p['device_need'] <= p['device_usable'] <= 8 << 30
assert 'optimizer state on the host' in p['why_not_cheaper'], p['why_not_cheaper']"
result "gpt2-xl on 8G, 64G host: parameters streamed, 16 B a parameter on the host, none on disk"

run $xl --host-memory 64G
[ $rc -eq 0 ] && grep -q '^placement on a device of 8.0 GiB and a host of 64.0 GiB' "$tmp/out" &&
  grep -q '^  fp32 parameters ' "$tmp/out" && grep -q '^  flags: --offload params' "$tmp/out" &&
  grep -q 'pinned host' "$tmp/out"
result "the same as a table: the parts, the tiers, the flags"

run $xl --host-memory 32G --json
[ $rc -eq 0 ] && placed "$tmp/out" "
n = p['params']
assert p['fits'] and p['rung'] == 4, p
for f in ('--offload params', '--host-limit', '--checkpoint blocks', '--spill-prefetch'):
    assert f in p['flags'], (f, p['flags'])
state = parts['optimizer_state']
assert state['disk'] > 0 and state['disk'] == p['disk_need'], p
assert state['pinned_host'] + state['pageable_host'] + state['disk'] >= 8 * n, state
assert parts['master_params']['pinned_host'] + parts['master_params']['pageable_host'] == 4 * n
assert parts['master_params']['disk'] == parts['gradients']['disk'] == 0, parts
# The budget (masters and state: --host-limit holds both) is what the host
# has beside the copies and gradients.
assert p['host_need'] <= p['host_usable'], p
assert p['host_limit'] <= p['host_usable'] - 6 * n, (p['host_limit'], n)
assert p['host_limit'] >= 4 * n, (p['host_limit'], n)
assert 'parameters streamed, all on the host' in p['why_not_cheaper'], p['why_not_cheaper']"
result "gpt2-xl with 32G of host: streamed, Adam state beyond --host-limit on disk (rung 4)"

# 16G: the masters do not fit beside the copies and gradients: most go to
# disk with their state (rung 5), and the replay reads them there.
run $xl --host-memory 16G --simulate h200-pcie5 --json
[ $rc -eq 0 ] && placed "$tmp/out" "
n = p['params']
assert p['fits'] and p['rung'] == 5, p
for f in ('--offload params', '--host-limit', '--spill-prefetch'):
    assert f in p['flags'], (f, p['flags'])
m, st = parts['master_params'], parts['optimizer_state']
assert m['disk'] > 0 and m['pinned_host'] + m['pageable_host'] + m['disk'] == 4 * n, m
assert st['disk'] > 0 and parts['gradients']['disk'] == parts['compute_copies']['disk'] == 0, parts
assert p['disk_need'] == m['disk'] + st['disk'] and p['host_need'] <= p['host_usable'], p
assert 'parameters streamed, masters on the host' in p['why_not_cheaper'], p['why_not_cheaper']
s = p['simulate']
# Each state on disk with its master is written once a step; fp32 readers
# (the layer norms, the tied head) fetch their masters from disk besides.
assert s['state_disk_bytes'] == p['disk_need'], (s, p['disk_need'])
assert s['disk_written_bytes'] == s['state_disk_bytes'] and s['disk_read_bytes'] >= s['disk_written_bytes'], s
assert s['step_s'] >= s['compute_s'] > 0, s"
result "gpt2-xl with 16G of host: masters on disk with their state (rung 5), the replay reads them there"

run $xl --host-memory 8G --json
[ $rc -eq 0 ] && placed "$tmp/out" "
n = p['params']
assert p['fits'] and p['rung'] == 6, p
assert '--offload all' in p['flags'] and '--host-limit' in p['flags'], p['flags']
assert p['host_need'] <= p['host_usable'] < 8 << 30 and p['disk_need'] > 0, p
assert p['host_need'] + p['disk_need'] >= 16 * n, p
assert parts['optimizer_state']['disk'] > 0, parts
assert 'copies and gradients on the host' in p['why_not_cheaper'], p['why_not_cheaper']"
result "gpt2-xl with 8G of host: spilled through the pool, the rest on disk (--host-limit)"

run --plan --model gpt3-175b --device-memory 8G --host-memory 2T --json
[ $rc -eq 0 ] && placed "$tmp/out" "
assert not p['fits'] and p['rung'] == -1 and p['flags'] == '', p
for w in ('all on the device', 'optimizer state on the host', 'parameters streamed',
          'everything spilled'):
    assert w in p['why_not_cheaper'], (w, p['why_not_cheaper'])"
result "gpt3-175b on 8G: nothing fits, and why for every rung"

run --plan --model gpt3-175b --batch 1 --device-memory 141G --host-memory 2T \
  --simulate h200-pcie5 --json
[ $rc -eq 0 ] && python3 -c "import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
p, f = d['placement'], d['simulate']['figures']
n, parts, s = p['params'], p['parts'], p['simulate']
assert p['fits'] and p['rung'] == 4 and '--host-limit' in p['flags'], p
assert parts['master_params']['disk'] == parts['gradients']['disk'] == 0, parts
assert parts['optimizer_state']['disk'] > 0.5 * 8 * n, parts['optimizer_state']
assert p['device_need'] <= p['device_usable'] and p['host_need'] <= p['host_usable'], p
# The disk's time from the preset's figures: each state on disk written once
# a step at disk_write, read (at most once) at disk_read.
assert s['state_disk_bytes'] == parts['optimizer_state']['disk'], s
assert s['disk_written_bytes'] == s['state_disk_bytes'] >= s['disk_read_bytes'] > 0, s
want = s['disk_read_bytes'] / f['disk_read'] + s['disk_written_bytes'] / f['disk_write']
assert abs(s['disk_s'] - want) <= 1e-6 * want, (s['disk_s'], want)
assert 0 <= s['exposed_disk_s'] <= s['exposed_host_s'] < s['step_s'], s
assert s['step_s'] >= s['compute_s'] > 0, s" "$tmp/out"
result "gpt3-175b on one H200, 2T of host: Adam on NVMe (rung 4), the disk replayed"

# 1T of host: the 650 GiB of masters do not fit beside the gradients, and go
# to NVMe with their state; the replay reads each master there for its
# update and again for each fp32 fetch.
run --plan --model gpt3-175b --batch 1 --device-memory 141G --host-memory 1T \
  --simulate h200-pcie5 --json
[ $rc -eq 0 ] && python3 -c "import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
p = d['placement']
n, parts, s = p['params'], p['parts'], p['simulate']
assert p['fits'] and p['rung'] == 5 and '--host-limit' in p['flags'], p
m = parts['master_params']
assert m['disk'] > 0.5 * 4 * n and m['pinned_host'] + m['pageable_host'] + m['disk'] == 4 * n, m
assert parts['gradients']['disk'] == 0 and p['host_need'] <= p['host_usable'], p
assert s['state_disk_bytes'] == p['disk_need'] == m['disk'] + parts['optimizer_state']['disk'], s
assert s['disk_written_bytes'] == s['state_disk_bytes'] < s['disk_read_bytes'], s
assert s['step_s'] >= s['compute_s'] > 0 and s['exposed_disk_s'] > 0, s" "$tmp/out"
result "gpt3-175b on one H200, 1T of host: masters on NVMe with their state (rung 5), the disk replayed"

run $xl --simulate h200-pcie5 --json
[ $rc -eq 0 ] && python3 -c "import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
p = d['placement']
assert p['rung'] == 3 and p['host_memory'] == d['simulate']['figures']['host_memory'], p
s = p['simulate']
assert s['machine'] == 'h200-pcie5' and s['step_s'] >= s['compute_s'] > 0, s
assert 0 < s['host_hidden_fraction'] <= 1 and s['host_update_s'] > 0, s" "$tmp/out"
result "--simulate h200-pcie5: the placed step predicted, the host update partly hidden"

python3 "$(dirname "$0")/english_corpus.py" "$tmp/corpus.txt" 60000 20
small="--model gpt-mini --layers 2 --heads 4 --embd 128 --context 32 --batch 4 --threads 2
  --data $tmp/corpus.txt --steps 4 --eval-every 2 --eval-batches 2"
for mem in 4M 3M 2M; do
  run --plan $small --device-memory $mem --json
  flags=$(python3 -c "import json, sys
print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['placement']['flags'])" "$tmp/out")
  run $small $flags --json
  cp "$tmp/err" "$tmp/flags-$mem.err"
  cp "$tmp/out" "$tmp/flags-$mem"
  [ $rc -eq 0 ] && [ -n "$flags" ]
  result "a device of $mem: the placement's flags ($flags) train"
done

run $small --offload auto --mem-limit 4M --json
cp "$tmp/out" "$tmp/auto"
cp "$tmp/err" "$tmp/auto.err"
[ $rc -eq 0 ] && grep -q '^offload auto: parameters.*streamed.*--offload params' "$tmp/auto.err" &&
  grep '^step ' "$tmp/auto.err" | grep -o 'loss [0-9.]*' >"$tmp/a.losses" &&
  grep '^step ' "$tmp/flags-4M.err" | grep -o 'loss [0-9.]*' >"$tmp/b.losses" &&
  [ -s "$tmp/a.losses" ] && cmp -s "$tmp/a.losses" "$tmp/b.losses"
result "--offload auto --mem-limit 4M: streams the parameters, the same losses as the flags"

# The disk rung trained: a host of 7500K (6000K usable) holds the masters and
# gradients but not all of Adam's state beside them.
run --plan $small --device-memory 4M --host-memory 7500K --json
cp "$tmp/out" "$tmp/plan-disk"
flags=$(python3 -c "import json, sys
p = json.loads(open(sys.argv[1]).read().splitlines()[-1])['placement']
assert p['rung'] == 4 and p['parts']['optimizer_state']['disk'] > 0, p
print(p['flags'])" "$tmp/plan-disk")
run $small $flags --json
cp "$tmp/err" "$tmp/disk.err"
[ $rc -eq 0 ] && python3 -c "import json, sys
p = json.loads(open(sys.argv[1]).read().splitlines()[-1])['placement']
r = json.loads(open(sys.argv[2]).read().splitlines()[-1])
st = r['stream']
assert st and st['params_streamed'] > 0 and st['ahead'] == p['ahead'], st
# The runtime split the state as the plan did (state_split.c, one rule).
assert st['state_disk_bytes'] == p['parts']['optimizer_state']['disk'] > 0, (st, p['parts'])
assert st['state_host_bytes'] <= p['host_limit'], (st, p['host_limit'])
assert st['disk_written_bytes'] > 0, st
assert r['peak_device_bytes'] <= p['mem_limit'] == 4 << 20, (r['peak_device_bytes'], p)
rest = sum(v['pinned_host'] + v['pageable_host'] for k, v in p['parts'].items()
           if k != 'optimizer_state')
assert rest + st['state_host_bytes'] <= p['host_usable'], (rest, st, p['host_usable'])" \
  "$tmp/plan-disk" "$tmp/out" &&
  grep -q '^stream   .*on disk' "$tmp/disk.err" && ! grep -q '^spill ' "$tmp/disk.err" &&
  grep '^step ' "$tmp/disk.err" | grep -o 'loss [0-9.]*' >"$tmp/d.losses" &&
  [ -s "$tmp/d.losses" ] && cmp -s "$tmp/d.losses" "$tmp/b.losses"
result "a host of 7500K: the disk rung's flags ($flags) train within 4M, the state on disk as planned, the losses of the host-only run"

run $small --offload auto --mem-limit 4M --host-memory 7500K --json
cp "$tmp/err" "$tmp/auto-disk.err"
[ $rc -eq 0 ] && grep -q '^offload auto: .*on disk.*--host-limit' "$tmp/auto-disk.err" &&
  grep '^step ' "$tmp/auto-disk.err" | grep -o 'loss [0-9.]*' >"$tmp/ad.losses" &&
  [ -s "$tmp/ad.losses" ] && cmp -s "$tmp/ad.losses" "$tmp/d.losses"
result "--offload auto --mem-limit 4M --host-memory 7500K: the disk rung, the same losses"

# The masters' rung trained: a host of 4000K (3200K usable) cannot hold the
# masters beside the gradients and the state's slots; most masters go to
# disk with their state, as planned, and the losses stay the host-only run's.
run --plan $small --device-memory 4M --host-memory 4000K --json
cp "$tmp/out" "$tmp/plan-masters"
flags=$(python3 -c "import json, sys
p = json.loads(open(sys.argv[1]).read().splitlines()[-1])['placement']
assert p['rung'] == 5 and p['parts']['master_params']['disk'] > 0, p
print(p['flags'])" "$tmp/plan-masters")
run $small $flags --json
cp "$tmp/err" "$tmp/masters.err"
[ $rc -eq 0 ] && python3 -c "import json, sys
p = json.loads(open(sys.argv[1]).read().splitlines()[-1])['placement']
r = json.loads(open(sys.argv[2]).read().splitlines()[-1])
st, parts = r['stream'], p['parts']
# The runtime put on disk the masters and state the plan put there.
assert st['state_disk_bytes'] == parts['master_params']['disk'] + parts['optimizer_state']['disk'], (st, parts)
assert r['peak_device_bytes'] <= p['mem_limit'] == 4 << 20, (r['peak_device_bytes'], p)" \
  "$tmp/plan-masters" "$tmp/out" &&
  grep '^step ' "$tmp/masters.err" | grep -o 'loss [0-9.]*' >"$tmp/m.losses" &&
  [ -s "$tmp/m.losses" ] && cmp -s "$tmp/m.losses" "$tmp/b.losses"
result "a host of 4000K: the masters' rung's flags ($flags) train within 4M, masters and state on disk as planned, the host-only losses"
