# tap.sh — the shared part of the shell TAP tests. A test sets TOOL (the
# binary under test, an executable path) and PLAN (its number of points),
# then sources this file, which prints the plan and defines:
#   run ARGS...   runs TOOL: output in $tmp/out and $tmp/err, status in $rc
#   result DESC   one point, passed if the previous command succeeded; on
#                 failure the end of the last run's output goes to the log
#   skip DESC WHY one skipped point
#   last_json, losses_close, has_opencl (below)
# and $tmp (removed at exit), $have_python.

echo "1..$PLAN"
if [ ! -x "$TOOL" ]; then
  echo "Bail out! no $(basename "$TOOL") at $TOOL (build it, or set the variable naming it)"
  exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-$(basename "$TOOL").XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
n=0

result() {
  status=$?
  n=$((n + 1))
  if [ $status -eq 0 ]; then
    echo "ok $n - $1"
  else
    echo "not ok $n - $1"
    echo "# $(basename "$TOOL") exited $rc"
    for f in out err; do
      [ -s "$tmp/$f" ] && tail -n 20 "$tmp/$f" | sed "s/^/# $f: /"
    done
  fi
  return 0
}

skip() {
  n=$((n + 1))
  echo "ok $n - $1 # SKIP $2"
}

run() {
  "$TOOL" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
}

have_python=yes
command -v python3 >/dev/null 2>&1 || have_python=no

# run_limited BYTES ARGS...: run ARGS under a file-size limit (RLIMIT_FSIZE)
# of BYTES, SIGXFSZ ignored, so a write or a reservation past it fails as on
# a full disk (shells differ in ulimit -f's unit); needs python3.
run_limited() {
  python3 -c "import os, resource, signal, sys
n = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
os.execv(sys.argv[2], sys.argv[2:])" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
}

# last_json FILE CODE: runs python CODE with d = the JSON object on FILE's
# last line.
last_json() {
  python3 -c "import json, sys; d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
$2" "$1"
}

# losses_close A B TOL: the epoch losses and the test loss of two dltrain
# --json runs agree within TOL (relative).
losses_close() {
  python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
x = a['epoch_losses'] + [a['test_loss']]
y = b['epoch_losses'] + [b['test_loss']]
worst = max(abs(p - q) / max(abs(p), 1e-30) for p, q in zip(x, y))
assert len(x) == len(y) and worst <= float(sys.argv[3]), (x, y, worst)" "$1" "$2" "$3"
}

# round_losses_close A B TOL: every round's train and validation loss of two
# GPT dltrain --json runs agree within TOL (relative), and there are as many.
round_losses_close() {
  python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
x = a['round_losses'] + a['round_val_losses']
y = b['round_losses'] + b['round_val_losses']
worst = max(abs(p - q) / abs(p) for p, q in zip(x, y))
assert len(x) == len(y) and len(x) > 0 and worst <= float(sys.argv[3]), (x, y, worst)
print('# %d losses, worst relative difference %.2g' % (len(x), worst))" "$1" "$2" "$3"
}

# resumed_losses UNBROKEN RESUMED FROM COUNT [TOL]: a GPT run resumed from a
# checkpoint saved after FROM rounds (dltrain --json file RESUMED) trains
# COUNT more rounds with the unbroken run's losses (file UNBROKEN) from
# there on: the same floats, or within TOL (relative) where given.
resumed_losses() {
  python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
first, count = int(sys.argv[3]), int(sys.argv[4])
x, y = a['round_losses'][first:], b['round_losses']
assert len(x) == len(y) == count, (x, y)
if len(sys.argv) > 5:
    worst = max(abs(p - q) / abs(p) for p, q in zip(x, y))
    assert worst <= float(sys.argv[5]), (x, y, worst)
    print('# rounds %d-%d resumed: worst relative difference %.2g' % (first + 1, first + count,
                                                                      worst))
else:
    assert x == y, (x, y)
    print('# rounds %d-%d resumed: bit for bit' % (first + 1, first + count))" "$@"
}

# mpi_why: why the MPI tests cannot run here, or nothing when they can
# (dltrain, $DLTRAIN, built with MPI, and mpirun on PATH).
mpi_why() {
  if ! "${DLTRAIN:-./tools/dltrain}" --version | grep -q "with MPI"; then
    echo "dltrain was built without MPI"
  elif ! command -v mpirun >/dev/null 2>&1; then
    echo "no mpirun (openmpi-bin)"
  fi
}

# mpi_gpt_setup: for the scripts that train gpt-mini over MPI ranks: where
# python3 or MPI is missing, skips the whole plan ($PLAN points) and exits;
# else writes the corpus they train on ($tmp/corpus.txt) and sets $common,
# the options their runs share (context 64, batch 4, an evaluation after
# every step, --json).
mpi_gpt_setup() {
  why=""
  [ $have_python = no ] && why="python3 not found"
  [ -z "$why" ] && why=$(mpi_why)
  if [ -n "$why" ]; then
    for i in $(seq 1 $PLAN); do skip "test $i" "$why"; done
    exit 0
  fi
  python3 "$(dirname "$0")/english_corpus.py" "$tmp/corpus.txt" 100000 96
  common="--model gpt-mini --data $tmp/corpus.txt --context 64 --threads 1"
  common="$common --eval-every 1 --eval-batches 1 --json --quiet --batch 4"
}

# mpi_np [N]: the command that runs N ranks here (without N: give -np
# after it): oversubscribed (the machine may have fewer cores than ranks),
# as root where root runs the tests, and without LeakSanitizer's report at
# exit: under --enable-sanitizers Open MPI's components leak at
# MPI_Finalize after they are unloaded (no frames left to suppress by
# name); ASan and UBSan still check every access.
mpi_np() {
  root=""
  [ "$(id -u)" = 0 ] && root="--allow-run-as-root"
  echo "env LSAN_OPTIONS=${LSAN_OPTIONS:+$LSAN_OPTIONS:}detect_leaks=0 mpirun $root" \
    "--oversubscribe${1:+ -np $1}"
}

# mpi_ranks N NAME ARGS...: mpirun -np N TOOL $common ARGS ($common: the
# test's shared options), its output kept as $tmp/NAME.json and its log as
# $tmp/NAME.err (both also in $tmp/out and $tmp/err), the status in $rc.
mpi_ranks() {
  np=$1 name=$2
  shift 2
  # shellcheck disable=SC2086
  $(mpi_np "$np") "$TOOL" $common "$@" >"$tmp/$name.json" 2>"$tmp/$name.err"
  rc=$?
  cp "$tmp/$name.json" "$tmp/out"
  cp "$tmp/$name.err" "$tmp/err"
}

# same_round_losses A B [COUNT]: the two runs' (JSON files A, B) train and
# validation losses of a GPT's rounds are the same floats, as many of them
# (COUNT of them where given, else at least one).
same_round_losses() {
  python3 -c "import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
x = a['round_losses'] + a['round_val_losses']
y = b['round_losses'] + b['round_val_losses']
want = int(sys.argv[3]) if len(sys.argv) > 3 else None
assert len(x) == len(y) > 0 and (want is None or len(x) == want) and x == y, (x, y)
print('# %d losses, bit for bit' % len(x))" "$@"
}

# opencl_auto_same_bits LIMIT ARGS...: two points on OpenCL device 0 (or two
# skips without one): dltrain ARGS unlimited, then under --mem-limit LIMIT
# (--link 16GB/s --plan-strategy auto), which must save the same checkpoint
# bytes and peak within LIMIT.
opencl_auto_same_bits() {
  limit=$1
  shift
  if has_opencl; then
    run "$@" --device opencl:0 --save "$tmp/free-cl.st"
    [ $rc -eq 0 ]
    result "opencl:0: the unlimited run"
    run "$@" --device opencl:0 --mem-limit "$limit" --link 16GB/s --plan-strategy auto \
      --save "$tmp/auto-cl.st" --json
    [ $rc -eq 0 ] && cmp -s "$tmp/free-cl.st" "$tmp/auto-cl.st" &&
      last_json "$tmp/out" "assert d['peak_device_bytes'] <= $limit"
    result "opencl:0: auto within the budget, the same bits as unlimited"
  else
    skip "opencl:0: the unlimited run" "no OpenCL device"
    skip "opencl:0: auto within the budget" "no OpenCL device"
  fi
}

# has_opencl: whether dlinfo ($DLINFO) opens OpenCL device 0.
has_opencl() {
  [ -x "${DLINFO:-./tools/dlinfo}" ] && "${DLINFO:-./tools/dlinfo}" --device opencl:0 >/dev/null 2>&1
}
