#!/bin/sh
# shellcheck disable=SC2086
# test-mixed-precision.sh — TAP checks of dltrain --precision and --loss-scale:
# the mlp trained 3 epochs (Adam 1e-3, batch 64) in fp16 and in bf16 reaches
# a test accuracy no more than 0.5 points below fp32's, on Fashion-MNIST when
# the package is installed (generated data otherwise, said so); the JSON
# reports the precision, the loss scale and the skipped steps; fp16 runs
# repeat bit for bit on one CPU thread; a checkpoint saved in fp16 resumes;
# data parallelism keeps the loss scale across the rebalancing of its
# replicas; bad options are usage errors.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=11
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 11); do skip "test $i" "python3 not found"; done
  exit 0
fi

data=fashion-mnist
if [ ! -d /usr/share/datasets/fashion-mnist ]; then
  data=generated
  echo "# dataset-fashion-mnist is not installed: the accuracy checks use generated data"
fi

# 1-3: accuracy after 3 epochs, the recipe of the training-engine bars.
recipe="--data $data --model mlp --epochs 3 --batch 64 --optimizer adam --lr 1e-3"
recipe="$recipe --device cpu --json --quiet"
for p in fp32 fp16 bf16; do
  run $recipe --precision $p
  cp "$tmp/out" "$tmp/$p.json"
  [ $rc -eq 0 ]
  result "mlp, 3 epochs in $p: trains ($(last_json "$tmp/$p.json" "print(d['test_accuracy'])" 2>/dev/null))"
done
for p in fp16 bf16; do
  python3 -c "import json, sys
a, b = (json.loads(open(f).read().splitlines()[-1]) for f in sys.argv[1:])
print('# fp32 %.4f, %s %.4f' % (a['test_accuracy'], b['precision'], b['test_accuracy']))
assert b['test_accuracy'] >= a['test_accuracy'] - 0.005, (a['test_accuracy'], b['test_accuracy'])
" "$tmp/fp32.json" "$tmp/$p.json"
  result "$p test accuracy within 0.5 points of fp32"
done

# 6: the JSON of each precision.
python3 -c "import json, sys
f32, f16, b16 = (json.loads(open(f).read().splitlines()[-1]) for f in sys.argv[1:])
assert f32['precision'] == 'fp32' and f32['loss_scale'] == 1 and f32['skipped_steps'] == 0, f32
assert f16['precision'] == 'fp16' and f16['loss_scale'] >= 1, f16
assert f16['skipped_steps'] >= 0 and b16['precision'] == 'bf16' and b16['loss_scale'] == 1, b16
" "$tmp/fp32.json" "$tmp/fp16.json" "$tmp/bf16.json"
result "--json has precision, loss_scale (fp16: dynamic; fp32, bf16: 1) and skipped_steps"

# 7: fp16 repeats bit for bit on one thread.
small="--data generated --model cnn --batch 32 --limit 640 --device cpu --threads 1"
small="$small --deterministic --json --quiet --precision fp16"
run $small
cp "$tmp/out" "$tmp/a.json"
run $small
python3 -c "import json, sys
a, b = (json.loads(open(f).read().splitlines()[-1]) for f in sys.argv[1:])
assert a['final_loss'] == b['final_loss'] and a['test_loss'] == b['test_loss'], (a, b)
" "$tmp/a.json" "$tmp/out"
result "cnn in fp16 repeats bit for bit (cpu, 1 thread)"

# 8: a planted overflow: a first scale whose gradients overflow fp16 skips
# steps and backs off until the updates go through.
# 2^24 x d logits (about 0.01 per element at batch 64) overflows fp16's
# 65504; a few halvings later the steps go through. 20 steps in all.
run --data generated --model mlp --limit 1280 --device cpu --json --precision fp16 \
  --loss-scale 16777216:2000:2:0.5
[ $rc -eq 0 ] && grep -q "skipped for inf/NaN gradients" "$tmp/err" &&
  last_json "$tmp/out" "assert 0 < d['skipped_steps'] < 10 and d['loss_scale'] < 16777216, d
assert d['final_loss'] < 2.0, d"
result "--loss-scale 2^24: $(last_json "$tmp/out" "print(d['skipped_steps'], 'steps skipped (logged), scale', d['loss_scale'])" 2>/dev/null); training goes on"

# 9: a checkpoint of an fp16 run resumes (fp32 master weights), and its
# loss scale with it: no steps skipped again to find it.
ck="$tmp/ck.safetensors"
fp16="--data generated --model mlp --limit 1280 --device cpu --json --quiet --precision fp16"
run $fp16 --loss-scale 16777216 --epochs 1 --save "$ck"
first=$rc
cp "$tmp/out" "$tmp/first.json"
run $fp16 --loss-scale 16777216 --epochs 2 --resume "$ck"
[ $first -eq 0 ] && [ $rc -eq 0 ] && python3 -c "import json, sys
a, b = (json.loads(open(f).read().splitlines()[-1]) for f in sys.argv[1:])
assert b['epochs_run'] == 1 and a['skipped_steps'] > 0 and b['skipped_steps'] == 0, (a, b)
assert b['loss_scale'] == a['loss_scale'], (a, b)" "$tmp/first.json" "$tmp/out"
result "an fp16 checkpoint resumes with its loss scale"

# 10: usage errors.
bad=0
for args in "--precision fp8" "--loss-scale -1" "--loss-scale 1024:0"; do
  run --data generated $args
  { [ $rc -eq 2 ] && [ -s "$tmp/err" ]; } || { bad=1; echo "# $args: exit $rc"; }
done
[ $bad -eq 0 ]
result "bad --precision / --loss-scale values are usage errors"

# 11: data parallel in fp16 over the CPU named twice: the replicas are
# rebuilt after 4 timed steps, and the loss scale goes on with them.
dp="--data generated --model cnn --batch 64 --limit 1280 --json --quiet --precision fp16"
run $dp --device cpu
cp "$tmp/out" "$tmp/one.json"
run $dp --devices cpu,cpu
[ $rc -eq 0 ] && python3 -c "import json, sys
a, b = (json.loads(open(f).read().splitlines()[-1]) for f in sys.argv[1:])
assert b['loss_scale'] == a['loss_scale'] and b['skipped_steps'] == a['skipped_steps'], (a, b)
assert abs(a['final_loss'] - b['final_loss']) <= 1e-2 * abs(a['final_loss']), (a, b)
" "$tmp/one.json" "$tmp/out"
result "--devices cpu,cpu in fp16: the loss scale survives rebalancing; loss within 1% of one device"
