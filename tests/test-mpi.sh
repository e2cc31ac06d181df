#!/bin/sh
# shellcheck disable=SC2086
# test-mpi.sh — TAP checks of dltrain under mpirun (when built with MPI and
# mpirun is installed): two ranks with --batch 32 train as one process with
# --batch 64 (to fp32 rounding); rank 0 alone saves, and the checkpoint
# resumes in one process; a rank that fails stops the job with its message;
# a rank that leaves makes the other stop after DLRT_MPI_TIMEOUT instead of
# hanging; ranks started with different options (a seed, a learning rate,
# a data limit) stop at once with a message naming the rank and the field;
# a GPT trains across two ranks as in one process with twice the batch.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=9
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

why=$(mpi_why)
[ -z "$why" ] && [ $have_python = no ] && why="python3 not found"
if [ -n "$why" ]; then
  for i in 1 2 3 4 5 6 7 8 9; do skip "test $i" "$why"; done
  exit 0
fi
# Under --enable-sanitizers: Open MPI's components leak at MPI_Finalize
# after they are unloaded (indirect leaks with no frames left to suppress
# by name), which LeakSanitizer turns into a failed exit. ASan and UBSan
# still check every access; only the leak report at exit is off.
LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}detect_leaks=0"
export LSAN_OPTIONS
mpi=$(mpi_np 2)
common="--data generated --limit 2560 --threads 1 --device cpu --optimizer sgd --momentum 0.9"
common="$common --json --quiet"


# 1
"$DLTRAIN" $common --epochs 2 --batch 64 >"$tmp/one.json" 2>"$tmp/err" &&
  $mpi "$DLTRAIN" $common --epochs 2 --batch 32 --save "$tmp/ckpt.safetensors" \
    >"$tmp/two.json" 2>"$tmp/err" &&
  losses_close "$tmp/one.json" "$tmp/two.json" 1e-5 && [ "$(wc -l <"$tmp/two.json")" -eq 1 ]
result "mpirun -np 2 with --batch 32 trains as one process with --batch 64; one JSON line"

# 2: the checkpoint (rank 0's) resumes in a single process.
"$DLTRAIN" $common --epochs 3 --batch 64 >"$tmp/three.json" 2>"$tmp/err" &&
  "$DLTRAIN" $common --epochs 3 --batch 64 --resume "$tmp/ckpt.safetensors" \
    >"$tmp/resumed.json" 2>"$tmp/err" &&
  python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:])
assert abs(a['epoch_losses'][2] - b['epoch_losses'][0]) <= 1e-5 * abs(a['epoch_losses'][2]), (a, b)" \
    "$tmp/three.json" "$tmp/resumed.json"
result "the two-rank checkpoint resumes in one process: its third epoch matches"

# 3: a rank that fails takes the job down with its message.
cat >"$tmp/bad.sh" <<'SH'
#!/bin/sh
if [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then exec "$@" --data /nonexistent; fi
exec "$@" --data generated
SH
chmod +x "$tmp/bad.sh"
timeout 120 $mpi "$tmp/bad.sh" "$DLTRAIN" --limit 640 --threads 1 --device cpu --quiet \
  >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "/nonexistent" "$tmp/err"
result "a rank with missing data stops the job (exit $rc) with its message"

# 4: a rank that leaves early: the other stops after the timeout, no hang.
cat >"$tmp/short.sh" <<'SH'
#!/bin/sh
if [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then exec "$@" --epochs 1; fi
exec "$@" --epochs 2
SH
chmod +x "$tmp/short.sh"
DLRT_MPI_TIMEOUT=3 timeout 120 $mpi -x DLRT_MPI_TIMEOUT "$tmp/short.sh" "$DLTRAIN" \
  --data generated --limit 1280 --threads 1 --device cpu --quiet >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "did not join the gradient all-reduce within 3 s" "$tmp/err"
result "a rank that left: the other stops after DLRT_MPI_TIMEOUT=3 (exit $rc), no hang"

# 5
$mpi "$DLTRAIN" --data generated --devices cpu,cpu --zero 1 --limit 640 >/dev/null 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "devices under mpirun goes without --zero" "$tmp/err"
result "--devices with --zero under mpirun is refused (ZeRO over one or the other)"

# 6-8: ranks that would train apart stop before training, all of them.
cat >"$tmp/differ.sh" <<'SH'
#!/bin/sh
if [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then exec "$@" $RANK1_EXTRA; fi
exec "$@"
SH
chmod +x "$tmp/differ.sh"
differ() {
  RANK1_EXTRA="$1" timeout 120 $mpi -x RANK1_EXTRA "$tmp/differ.sh" "$DLTRAIN" \
    --data generated --limit 1280 --threads 1 --device cpu --optimizer sgd --quiet \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && ! grep -q "^epoch" "$tmp/out" &&
    grep -q "rank 1 does not train what rank 0 trains: its $2" "$tmp/err"
}
differ "--seed 2" "seed (--seed) is 2, rank 0's 1"
result "a rank with another --seed stops the job at once (exit $rc), naming rank and field"
differ "--lr 0.5" "learning rate (--lr) is 0.5, rank 0's 0.01"
result "a rank with another --lr stops the job at once (exit $rc)"
differ "--limit 640" "training samples (--data, --limit) is 640, rank 0's 1280"
result "a rank with other data (--limit) stops the job at once (exit $rc)"

# 9: a GPT across two ranks: rank r takes windows r, r + 2, ... of each
# step, so two ranks of --batch 4 see the windows of one process's --batch 8.
awk 'BEGIN { for (i = 0; i < 4000; i++) printf "%d bottles of beer on the wall\n", i % 97 }' \
  >"$tmp/corpus.txt"
gpt="--model gpt-mini --layers 1 --heads 2 --embd 32 --context 16 --data $tmp/corpus.txt"
gpt="$gpt --steps 6 --eval-every 6 --eval-batches 2 --threads 1 --device cpu --json --quiet"
"$DLTRAIN" $gpt --batch 8 >"$tmp/gpt-one.json" 2>"$tmp/err" &&
  $mpi "$DLTRAIN" $gpt --batch 4 >"$tmp/gpt-two.json" 2>>"$tmp/err" &&
  python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:])
assert a['steps_run'] == b['steps_run'] == 6, (a['steps_run'], b['steps_run'])
assert abs(a['val_loss'] - b['val_loss']) <= 1e-5 * abs(a['val_loss']), (a['val_loss'], b['val_loss'])" \
    "$tmp/gpt-one.json" "$tmp/gpt-two.json"
result "a GPT on two ranks of --batch 4 trains as one process of --batch 8 (val loss within 1e-5)"
