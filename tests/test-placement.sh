#!/bin/sh
# shellcheck disable=SC2086
# test-placement.sh — TAP checks of the placement (dlrt_plan_placement) through
# dltrain --plan and --offload auto:
#  - a model that fits is placed all on the device, with no flags;
#  - gpt2-xl on a device of 8G with 64G of host: parameters streamed, the host
#    holding the fp32 master, the gradients and Adam's two moments, 16 B a
#    parameter, nothing on disk; with 16G of host it spills through the pool
#    and the host's share goes to disk;
#  - gpt3-175b on 8G fits nothing, and says why for every rung;
#  - with --simulate the placed step is predicted;
#  - a small GPT on devices of 4M, 3M and 2M: the flags each plan prints
#    train within them, and --offload auto under --mem-limit 4M picks the
#    same placement and trains to the same losses as those flags.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT DLRT_PLAN_STRATEGY

TOOL=$DLTRAIN PLAN=10
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 10); do skip "test $i" "python3 not found"; done
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
# The state in the allocator's blocks: 8 B a parameter, rounded up per tensor.
assert 16 * n <= p['host_need'] <= 1.05 * 16 * n and p['disk_need'] == 0, (p['host_need'], n)
assert parts['master_params']['pinned_host'] == 4 * n and parts['gradients']['pinned_host'] == 4 * n
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

run $xl --host-memory 16G --json
[ $rc -eq 0 ] && placed "$tmp/out" "
n = p['params']
assert p['fits'] and p['rung'] == 4, p
assert '--offload all' in p['flags'] and '--host-limit' in p['flags'], p['flags']
assert p['host_need'] <= p['host_usable'] < 16 << 30 and p['disk_need'] > 0, p
assert p['host_need'] + p['disk_need'] >= 16 * n, p
assert parts['optimizer_state']['disk'] > 0, parts
assert 'no disk tier behind streamed parameters' in p['why_not_cheaper'], p['why_not_cheaper']"
result "gpt2-xl with 16G of host: spilled through the pool, the rest on disk (--host-limit)"

run --plan --model gpt3-175b --device-memory 8G --host-memory 2T --json
[ $rc -eq 0 ] && placed "$tmp/out" "
assert not p['fits'] and p['rung'] == -1 and p['flags'] == '', p
for w in ('all on the device', 'optimizer state on the host', 'parameters streamed',
          'everything spilled'):
    assert w in p['why_not_cheaper'], (w, p['why_not_cheaper'])"
result "gpt3-175b on 8G: nothing fits, and why for every rung"

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
