#!/bin/sh
# shellcheck disable=SC2086
# test-profile-this.sh — TAP checks of the profiling pass behind
# dltrain --plan --simulate this (lib/exec/op_costs.c), through the trace
# that DLRT_SIMULATE_TRACE=1 prints: a short step (the mlp, about 4 ms) is
# timed over more passes than the minimum of three, and at most 25; each
# node is timed between events on the compute stream, so the stream's
# hand-offs (which a training run pipelines) are left out and counted
# apart, never negative; the step queued whole, as training runs it, is
# timed beside each pass, and its excess over the pass's nodes is charged
# to every node as dispatch, and the trainer's exchange around it (inputs
# in, loss and logits read back) is timed apart and ends the step; the
# cache file is version 5 (a version 4 file, without the exchange, is
# measured again) and a later process predicts the same step from it; an offloaded optimizer's updates are
# profiled on the host, under a key of their own, and the replay's host
# time is exactly their measured time (not their bytes at host memory
# speed); under a budget each copy of the dry run takes its measured time.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT DLRT_LINK DLRT_LINK_FLOPS DLRT_PROFILE_FRESH
unset XDG_CACHE_HOME

TOOL=$DLTRAIN PLAN=10
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 $PLAN); do skip "test $i" "python3 not found"; done
  exit 0
fi

cache="$tmp/cache"
mkdir "$cache"
export DLRT_PROFILE_CACHE="$cache" DLRT_SIMULATE_TRACE=1
mlp="--model mlp --data generated --limit 640 --device cpu"
offload="--mem-limit 5M --offload optimizer"

# predict ARGS...: the simulate object's step into $tmp/step, the profile's
# trace line into $tmp/profile
predict() {
  run --plan --simulate this $mlp "$@" --json
  [ $rc -eq 0 ] && tail -n 1 "$tmp/out" | python3 -c "import json, sys
print(repr(json.load(sys.stdin)['simulate']['step_s']))" >"$tmp/step" &&
    grep '^profile ' "$tmp/err" >"$tmp/profile"
}

# 1-2: passes and hand-offs
predict && python3 -c "import re, sys
line = open(sys.argv[1]).read()
m = re.search(r'measured now: (\d+) passes', line)
assert m and 3 < int(m.group(1)) <= 25, line" "$tmp/profile"
result "a 4 ms step is profiled over more than 3 passes, at most 25"
python3 -c "import re, sys
line = open(sys.argv[1]).read()
m = re.search(r'([-0-9.]+) ms of stream hand-offs left out', line)
assert m and float(m.group(1)) > 0, line" "$tmp/profile"
result "nodes are timed on the stream: the waited-for time's excess is left out, and positive"

# 3-4: the dispatch, measured and charged; the exchange, timed apart
python3 -c "import json, re, sys
line = open(sys.argv[1]).read()
m = re.search(r'queued whole ([0-9.]+) ms over its nodes. ([0-9.]+) ms, ([0-9.]+) us of dispatch', line)
assert m, line
whole, nodes, dispatch = (float(x) for x in m.groups())
us = [float(l.split()[-2]) for l in open(sys.argv[2]) if l.startswith('measured')]
assert whole > 0 and nodes > 0 and dispatch >= 0, line
assert abs(dispatch * len(us) / 1e3 - max(0, whole - nodes)) < 2e-3 + 1e-3 * whole, (line, len(us))
d = json.loads(open(sys.argv[3]).read().strip().splitlines()[-1])['simulate']
assert abs(d['compute_s'] * 1e6 - sum(us)) < 1e-3 * sum(us), (d['compute_s'], sum(us))
" "$tmp/profile" "$tmp/err" "$tmp/out"
result "the queued step's excess over its nodes is the dispatch, charged to each node"
python3 -c "import json, re, sys
line = open(sys.argv[1]).read()
m = re.search(r'the trainer.s exchange around it ([0-9.]+) ms', line)
assert m and float(m.group(1)) > 0, line
d = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])['simulate']
assert abs(d['exchange_s'] * 1e3 - float(m.group(1))) < 1e-3, (d['exchange_s'], line)
# nothing else is exposed without a budget: the nodes, then the exchange
assert abs(d['step_s'] - d['compute_s'] - d['exchange_s']) < 1e-9 + 1e-6 * d['step_s'], d
" "$tmp/profile" "$tmp/out"
result "the trainer's exchange (inputs in, loss and logits read) is timed apart and ends the step"

# 5-6: the cache file
cp "$tmp/step" "$tmp/first"
f=$(ls "$cache"/profile-*.txt | head -n 1)
head -n 1 "$f" | grep -q '^dlrt-profile-5 ' && predict && grep -q '^profile cached' "$tmp/profile" &&
  python3 -c "import sys
a, b = (float(open(p).read()) for p in sys.argv[1:3])
assert abs(a - b) <= 1e-6 * a, (a, b)  # the file keeps each node to the nanosecond
" "$tmp/step" "$tmp/first"
result "the profile is kept as version 5, and the next process predicts the same step from it"
sed '1s/^dlrt-profile-5 \(\([^ ]* \)\{8\}[^ ]*\).*/dlrt-profile-4 \1/' "$f" >"$f.new" && mv "$f.new" "$f" &&
  head -n 1 "$f" | grep -q '^dlrt-profile-4 ' && predict &&
  grep -q '^profile measured now' "$tmp/profile" && head -n 1 "$f" | grep -q '^dlrt-profile-5 '
result "a version 4 file (no exchange around the steps) is measured again"

# 7-10: the optimizer offloaded (under a budget: a dry run's copies)
predict $offload && grep -q 'updates timed on the host' "$tmp/profile"
result "--offload optimizer: the profile runs the updates on the host"
grep -q '^profile measured now' "$tmp/profile" && [ "$(ls "$cache"/profile-*.txt | wc -l)" -ge 2 ]
result "the offloaded profile has a key of its own (the device updates' is not reused)"
python3 -c "import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])['simulate']
us = [float(l.split()[-2]) for l in open(sys.argv[2]) if l.startswith('measured')
      and l.split()[2] in ('adam', 'sgd')]
assert len(us) == 6, us
assert abs(d['host_update_s'] - sum(us) / 1e6) < 1e-6 + 1e-4 * d['host_update_s'], (d, us)
assert d['copies_from'].startswith('a dry run'), d" "$tmp/out" "$tmp/err"
result "the replay's host update time is the updates' measured host time"
python3 -c "import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])['simulate']
us = [float(l.split(' us (')[0].split()[-1]) for l in open(sys.argv[2]) if l.startswith('copy ')]
assert len(us) > 0 and min(us) > 0 and d['copies'] == len(us) + 1, (d['copies'], len(us))
# the copies' time: each dry-run copy as measured, and the loader's batch on the link
extra = d['transfer_s'] - sum(us) / 1e6
assert 0 <= extra < 1e-3, (d['transfer_s'], sum(us))" "$tmp/out" "$tmp/err"
result "under a budget, this machine's copies take the time the dry run measured for each"
