#!/bin/sh
# shellcheck disable=SC2086
# test-zero.sh — TAP checks of dltrain --zero 1|2|3 (ZeRO sharding of the
# data-parallel replicas' model states): in one process (--devices cpu,cpu,
# and cpu,opencl:0 when there is one) and across two MPI ranks, each stage
# trains as plain data parallel does (losses within 1e-5 relative: the same
# sums, the same update kernels over ranges), and each replica holds at most
# 0.55x of an unsharded replica's bytes of what its stage shards (stage 1
# the optimizer state, 2 with the gradients, 3 with the parameters: the
# whole); the checkpoints stay whole and resume on one device, without
# --zero and with another stage to the same next loss; an mlp, a cnn and a
# GPT (gpt-mini) alike; bad combinations are usage errors.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
DLINFO=${DLINFO:-./tools/dlinfo}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=23
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 23); do skip "test $i" "python3 not found"; done
  exit 0
fi

common="--data generated --limit 2560 --batch 64 --threads 1 --optimizer adam --lr 0.0005"
common="$common --json --quiet"

# same A B FROM: epoch losses of run B from its first equal those of run A
# from epoch FROM (0-based) on, within 1e-5 relative.
same() {
  python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
x, y = a['epoch_losses'][int(sys.argv[3]):], b['epoch_losses']
x = x[:len(y)]
assert len(x) == len(y) > 0, (x, y)
worst = max(abs(p - q) / abs(p) for p, q in zip(x, y))
assert worst <= 1e-5, (x, y, worst)" "$1" "$2" "$3"
}

# holds PLAIN SHARDED STAGE: the sharded run's replica holds at most 0.55x
# of the plain run's bytes of what STAGE shards, and the rest unchanged.
holds() {
  python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1])['zero'] for p in sys.argv[1:3])
stage = int(sys.argv[3])
assert a['stage'] == 0 and b['stage'] == stage and a['replicas'] == b['replicas'] == 2, (a, b)
parts = ['optimizer_bytes', 'grad_bytes', 'param_bytes'][:stage]
mine, theirs = sum(b[k] for k in parts), sum(a[k] for k in parts)
assert a['optimizer_bytes'] > 0 and mine <= 0.55 * theirs, (parts, mine, theirs)
for k in ['optimizer_bytes', 'grad_bytes', 'param_bytes'][stage:]:
    assert b[k] == a[k], (k, a, b)
assert all(a[k] == a['full_' + k] for k in ['param_bytes', 'grad_bytes', 'optimizer_bytes']), a" \
    "$1" "$2" "$3"
}

# 1: plain data parallel, the reference (its replica holds everything).
run $common --epochs 3 --devices cpu,cpu
cp "$tmp/out" "$tmp/dp.json"
[ $rc -eq 0 ] && holds "$tmp/dp.json" "$tmp/dp.json" 0
result "--devices cpu,cpu without --zero: each replica holds every model state"

# 2-4: each stage trains as plain data parallel and holds its share.
for z in 1 2 3; do
  run $common --epochs 2 --devices cpu,cpu --zero $z --save "$tmp/z$z.st"
  cp "$tmp/out" "$tmp/z$z.json"
  cp "$tmp/err" "$tmp/z$z.err"
  [ $rc -eq 0 ] && same "$tmp/dp.json" "$tmp/z$z.json" 0 && holds "$tmp/dp.json" "$tmp/z$z.json" $z
  result "--zero $z --devices cpu,cpu: losses as plain data parallel, <= 0.55x of its sharded bytes"
done

# 5: the summary says what a replica holds.
grep -q "^zero     stage 3, 2 replicas: each holds parameters .* (0.5[0-9]*x of unsharded" \
  "$tmp/z3.err"
result "the summary line gives a replica's bytes and their ratio to an unsharded one"

# 6-8: the checkpoints are whole: they resume on one device, without
# --zero and with another stage, to plain data parallel's third epoch.
run $common --epochs 3 --device cpu --resume "$tmp/z3.st"
[ $rc -eq 0 ] && same "$tmp/dp.json" "$tmp/out" 2
result "a --zero 3 checkpoint resumes on one device with the same next loss"
run $common --epochs 3 --devices cpu,cpu --resume "$tmp/z1.st"
[ $rc -eq 0 ] && same "$tmp/dp.json" "$tmp/out" 2
result "a --zero 1 checkpoint resumes without --zero with the same next loss"
run $common --epochs 3 --devices cpu,cpu --zero 2 --resume "$tmp/z3.st"
[ $rc -eq 0 ] && same "$tmp/dp.json" "$tmp/out" 2
result "a --zero 3 checkpoint resumes under --zero 2 with the same next loss"

# 9: a cnn (batch norm's statistics travel beside the shards).
cnn="--data generated --limit 640 --batch 32 --threads 1 --optimizer adam --model cnn --epochs 2"
cnn="$cnn --json --quiet"
run $cnn --devices cpu,cpu
cp "$tmp/out" "$tmp/cnn.json"
[ $rc -eq 0 ] && run $cnn --devices cpu,cpu --zero 3 && [ $rc -eq 0 ] &&
  same "$tmp/cnn.json" "$tmp/out" 0 && holds "$tmp/cnn.json" "$tmp/out" 3
result "a cnn under --zero 3: losses as plain data parallel, <= 0.55x of its bytes"

# 10: devices of two backends.
if has_opencl; then
  run $common --epochs 2 --devices cpu,opencl:0 --zero 3
  [ $rc -eq 0 ] && python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:])
x, y = a['epoch_losses'][:2], b['epoch_losses']
assert max(abs(p - q) / abs(p) for p, q in zip(x, y)) <= 1e-4, (x, y)
assert [d['device'] for d in b['devices']] == ['cpu:0', 'opencl:0'], b['devices']" \
    "$tmp/dp.json" "$tmp/out" && holds "$tmp/dp.json" "$tmp/out" 3
  result "--devices cpu,opencl:0 --zero 3: losses as cpu,cpu within 1e-4, <= 0.55x of the bytes"
else
  skip "--devices cpu,opencl:0 --zero 3" "no OpenCL device"
fi

# 11, 12: a GPT, with AdamW and clipping (the norm summed over the ranges).
awk 'BEGIN { for (i = 0; i < 4000; i++) printf "%d bottles of beer on the wall\n", i % 97 }' \
  >"$tmp/corpus.txt"
gpt="--model gpt-mini --layers 2 --heads 2 --embd 32 --context 16 --data $tmp/corpus.txt"
gpt="$gpt --eval-every 3 --eval-batches 2 --threads 1 --json --quiet --optimizer adamw"
gpt="$gpt --clip-norm 1.0 --steps 6"
# val A B: the GPT runs' validation losses within 1e-5 relative.
val() {
  python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:])
assert a['steps_run'] == b['steps_run'] == 6, (a['steps_run'], b['steps_run'])
assert abs(a['val_loss'] - b['val_loss']) <= 1e-5 * abs(a['val_loss']), (a['val_loss'], b['val_loss'])" \
    "$1" "$2"
}
run $gpt --batch 8 --devices cpu,cpu
cp "$tmp/out" "$tmp/gpt.json"
for z in 1 3; do
  run $gpt --batch 8 --devices cpu,cpu --zero $z
  [ $rc -eq 0 ] && val "$tmp/gpt.json" "$tmp/out" && holds "$tmp/gpt.json" "$tmp/out" $z
  result "gpt-mini under --zero $z: the validation loss of plain data parallel, its share held"
done

# 13-18: across two MPI ranks.
why=$(mpi_why)
if [ -n "$why" ]; then
  for i in 13 14 15 16 17 18; do skip "mpirun test $i" "$why"; done
else
  # Open MPI's components leak at MPI_Finalize (see test-mpi.sh).
  LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}detect_leaks=0"
  export LSAN_OPTIONS
  mpi=$(mpi_np 2)
  ranks="--data generated --limit 2560 --batch 32 --threads 1 --device cpu --optimizer adam"
  ranks="$ranks --lr 0.0005 --epochs 2 --json --quiet"
  timeout 300 $mpi "$DLTRAIN" $ranks >"$tmp/mpi.json" 2>"$tmp/err"
  for z in 1 2 3; do
    timeout 300 $mpi "$DLTRAIN" $ranks --zero $z --save "$tmp/m$z.st" >"$tmp/out" 2>"$tmp/err" &&
      [ "$(wc -l <"$tmp/out")" -eq 1 ] && same "$tmp/mpi.json" "$tmp/out" 0 &&
      holds "$tmp/mpi.json" "$tmp/out" $z
    result "mpirun -np 2 --zero $z: losses as two plain ranks, <= 0.55x of the sharded bytes"
  done
  run $common --epochs 3 --device cpu --resume "$tmp/m3.st"
  [ $rc -eq 0 ] && same "$tmp/dp.json" "$tmp/out" 2
  result "rank 0's --zero 3 checkpoint resumes in one process with the same next loss"
  timeout 300 $mpi "$DLTRAIN" $gpt --batch 4 --device cpu >"$tmp/gpt-mpi.json" 2>"$tmp/err" &&
    timeout 300 $mpi "$DLTRAIN" $gpt --batch 4 --device cpu --zero 3 >"$tmp/out" 2>"$tmp/err" &&
    val "$tmp/gpt-mpi.json" "$tmp/out" && val "$tmp/gpt.json" "$tmp/out" &&
    holds "$tmp/gpt-mpi.json" "$tmp/out" 3
  result "gpt-mini on two ranks under --zero 3: the validation loss of one process, its share held"
  # Ranks sharded differently would run different collectives: they stop.
  cat >"$tmp/differ.sh" <<'SH'
#!/bin/sh
if [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then exec "$@" --zero 2; fi
exec "$@"
SH
  chmod +x "$tmp/differ.sh"
  timeout 120 $mpi "$tmp/differ.sh" "$DLTRAIN" --data generated --limit 640 --threads 1 \
    --device cpu --quiet >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && ! grep -q "^epoch" "$tmp/out" &&
    grep -q "rank 1 does not train what rank 0 trains: its ZeRO stage (--zero) is 2, rank 0's 0" \
      "$tmp/err"
  result "a rank with another --zero stops the job at once (exit $rc), naming rank and field"
fi

# 19-23: bad combinations.
usage() {
  run "$@"
  [ $rc -eq 2 ] && grep -q -e "--zero" "$tmp/err"
}
usage --zero 2 --device cpu --data generated --limit 640
result "--zero without --devices or mpirun is a usage error"
usage --zero 4 --devices cpu,cpu --data generated --limit 640
result "--zero 4 is a usage error"
usage --zero 2 --pipeline cpu,cpu --data generated --limit 640
result "--zero 2 with --pipeline is a usage error (it takes --zero 1, under mpirun)"
usage --zero 1 --devices cpu,cpu --precision fp16 --data generated --limit 640
result "--zero with --precision fp16 (loss scaling) is a usage error"
usage --zero 1 --devices cpu --data generated --limit 640
result "--zero over one device is a usage error"
