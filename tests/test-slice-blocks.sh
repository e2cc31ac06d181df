#!/bin/sh
# shellcheck disable=SC2086
# test-slice-blocks.sh — TAP checks of slice blocks (lib/exec/chunk.c): a
# small GPT trains under a spilling budget below what its largest nodes
# hold whole (the MLP's GELU gradient: dy, x and dx of 512 x 256 floats,
# 1.5 MiB; the attention's gradient: qkv, o, dO, dqkv and their statistics,
# 1.0 MiB), because those nodes run over their rows or sequences a slice
# at a time. `--plan` counts it in the least budget; `--plan --mem-limit`
# plans it and predicts the step; each run stays within the budget
# (DLRT_SPILL_CHECK recounts it at every allocation) and ends with the
# unlimited run's parameters bit for bit (the checkpoints are the same
# bytes), on the CPU and on OpenCL device 0; a budget below the least
# fails with the smallest one that fits.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT DLRT_LINK DLRT_PLAN_STRATEGY DLRT_PROFILE_CACHE
DLRT_SPILL_CHECK=1
export DLRT_SPILL_CHECK

TOOL=$DLTRAIN PLAN=9
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 9); do skip "test $i" "python3 not found"; done
  exit 0
fi
DLRT_PROFILE_CACHE=$tmp/profiles
export DLRT_PROFILE_CACHE

gpt="--model gpt-mini --layers 2 --embd 64 --heads 2 --context 64 --batch 8 --steps 3
     --eval-every 3 --eval-batches 1 --threads 1 --quiet"
# The largest nodes' bytes whole (fp32): the GELU's gradient reads dy and x
# and writes dx, each batch x context x 4 embd; the attention's gradient
# reads dO, qkv, o and lse and writes dqkv and D.
gelu=$((3 * 8 * 64 * 256 * 4))
attention=$(((8 * 64 * 64 + 8 * 64 * 192 + 8 * 64 * 64 + 8 * 2 * 64 +
  8 * 64 * 192 + 8 * 2 * 64) * 4))
limit=996147 # 0.95 MiB: below both

# 1: the least budget counts the slices.
run $gpt --plan --json
[ $rc -eq 0 ] && last_json "$tmp/out" "
assert d['spill_least_bytes'] < $attention < $gelu, (d['spill_least_bytes'], $attention, $gelu)
assert d['spill_least_bytes'] <= $limit"
result "--plan: the least budget is below the attention's ($attention) and GELU's ($gelu) gradients"

# 2: the planner plans it and predicts a step.
run $gpt --plan --mem-limit $limit --link 16GB/s --json
[ $rc -eq 0 ] && last_json "$tmp/out" "
p = d['spill_plan']
assert p['predicted']['feasible'] and p['predicted']['step_ms'] > 0, p['predicted']
assert p['strategies']['auto']['feasible'], p['strategies']"
result "--plan --mem-limit $limit: a plan, with its predicted step"

# 3-6: cpu: unlimited, then belady, recompute (segments) and auto within the
# budget, the same bits.
run $gpt --device cpu --save "$tmp/free.st" --json
[ $rc -eq 0 ] && last_json "$tmp/out" "assert d['peak_device_bytes'] > 4 * $limit"
result "cpu: the unlimited run"
for s in belady recompute auto; do
  run $gpt --device cpu --mem-limit $limit --link 16GB/s --plan-strategy $s \
    --save "$tmp/$s.st" --json
  [ $rc -eq 0 ] && cmp -s "$tmp/free.st" "$tmp/$s.st" && last_json "$tmp/out" "
p = d['spill_plan']
assert d['peak_device_bytes'] <= $limit, (d['peak_device_bytes'], $limit)
assert p['measured_step_ms'] > 0 and p['predicted']['step_ms'] > 0, p"
  result "cpu: --plan-strategy $s trains within $limit bytes, the same bits as unlimited"
done

# 7-8: OpenCL, the same bits.
opencl_auto_same_bits $limit $gpt

# 9: below the least, a clear error naming the smallest budget that fits.
run $gpt --device cpu --steps 1 --mem-limit 300K
[ $rc -ne 0 ] && grep -q "the smallest budget that fits is" "$tmp/err"
result "a budget below the least fails with the smallest one that fits"
