#!/bin/sh
# shellcheck disable=SC2086
# test-input-tools.sh — TAP checks that the tools give a clear error at once
# for input that cannot work: FIFOs with no writer as a model, data, record
# or checkpoint file (each run under timeout, so a hang fails the point);
# training and test splits that disagree, found before training; model
# files with long lines and huge numbers (FILE:LINE and the value); a
# DLRT_BACKEND that names no backend; and DLRT_MEM_LIMIT, which reaches the
# same spilling decisions as --mem-limit, with the --checkpoint sqrt hint
# the planner backs. DLTRAIN, DLRECORD and DLINFO may name other binaries.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
DLRECORD=${DLRECORD:-./tools/dlrecord}
DLINFO=${DLINFO:-./tools/dlinfo}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=22
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

quick="--data generated --limit 640 --device cpu --threads 1 --quiet"
t="timeout 60"
command -v timeout >/dev/null 2>&1 || t=""

# refused TOOL ARGS...: runs under timeout; passes when it ended by itself
# (not 124) with status 1 and a message naming $fifo as a FIFO.
refused() {
  $t "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 1 ] && grep -q "$fifo.*FIFO" "$tmp/err"
}

# 1-5: FIFOs with no writer.
fifo="$tmp/fifo"
mkfifo "$fifo"
mkdir "$tmp/fifo-data"
mkfifo "$tmp/fifo-data/train.dlrec"
refused "$DLTRAIN" --model "$fifo" $quick
result "dltrain --model FIFO exits 1 at once, naming the FIFO"
fifo="$tmp/fifo-data/train.dlrec"
refused "$DLTRAIN" --data "$tmp/fifo-data" --limit 640 --device cpu --quiet
result "dltrain --data DIR whose train.dlrec is a FIFO exits 1 at once"
fifo="$tmp/fifo"
refused "$DLTRAIN" --resume "$fifo" $quick
result "dltrain --resume FIFO exits 1 at once"
refused "$DLRECORD" info "$fifo"
result "dlrecord info FIFO exits 1 at once"
refused "$DLRECORD" idx "$fifo" "$fifo" "$tmp/out.dlrec"
result "dlrecord idx FIFO ... exits 1 at once"

# 6-8: splits that disagree are found before anything trains.
if [ $have_python = yes ]; then
  mkdir "$tmp/splits"
  python3 - "$tmp/splits" <<'PY'
import struct, sys
def write(path, count, side, classes):
    header = struct.pack("<8sIIQIIIII", b"DLRTREC1", 64, 1, count, 1, side, side, 1, classes)
    with open(path, "wb") as f:
        f.write(header.ljust(64, b"\0"))
        f.write(bytes(count * side * side))
        f.write(bytes(i % classes for i in range(count)))
write(sys.argv[1] + "/train.dlrec", 640, 28, 10)
write(sys.argv[1] + "/test.dlrec", 100, 14, 10)
PY
  run --data "$tmp/splits" --limit 640 --device cpu --threads 1
  [ $rc -eq 1 ] && grep -q "disagree: height 28 vs 14, width 28 vs 14" "$tmp/err" &&
    grep -q "splits/train.dlrec" "$tmp/err" && grep -q "splits/test.dlrec" "$tmp/err" &&
    ! grep -q "^epoch" "$tmp/out"
  result "dltrain refuses 28 x 28 / 14 x 14 splits before training, naming both files"
  "$DLRECORD" convert "$tmp/splits" "$tmp/converted" >"$tmp/out" 2>"$tmp/err"
  [ $? -eq 1 ] && grep -q "disagree" "$tmp/err" && [ ! -e "$tmp/converted/train.dlrec" ]
  result "dlrecord convert refuses them too, writing nothing"
  "$DLRECORD" convert generated "$tmp/agree" >/dev/null 2>"$tmp/err" &&
    run --data "$tmp/agree" $quick --limit 640 && [ $rc -eq 0 ]
  result "splits that agree still train"
else
  for i in 6 7 8; do skip "test $i" "python3 not found"; done
fi

# 9-11: model files.
python3 -c "print('# ' + 'x' * 5000 + ' linear 7'); print('relu')" >"$tmp/long.model" 2>/dev/null ||
  { printf '# '; i=0; while [ $i -lt 600 ]; do printf 'xxxxxxxxxx'; i=$((i + 1)); done;
    printf ' linear 7\nrelu\n'; } >"$tmp/long.model"
run --model "$tmp/long.model" $quick
[ $rc -eq 0 ]
result "a model file with a 6000-character comment trains (no part of it becomes a layer)"
printf 'relu\nconv2d 16 1073741824\n' >"$tmp/huge.model"
run --model "$tmp/huge.model" $quick
[ $rc -eq 1 ] && grep -q "huge.model:2: conv2d 16 1073741824: .*1073741824 x 1073741824" "$tmp/err"
result "conv2d 16 1073741824 exits 1 naming FILE:LINE and the sizes"
printf 'conv2d 16 3 pad=1073741824\n' >"$tmp/pad.model"
run --model "$tmp/pad.model" $quick
[ $rc -eq 1 ] && grep -q "pad.model:1: .*padding 1073741824" "$tmp/err" &&
  ! grep -q "larger than the image" "$tmp/err"
result "pad=1073741824 exits 1 naming FILE:LINE and the padding"

# 12-16: DLRT_BACKEND.
DLRT_BACKEND=bogus "$DLINFO" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q '"bogus" is not a backend' "$tmp/err" && grep -q "cpu" "$tmp/err"
result "DLRT_BACKEND=bogus: dlinfo exits 1 naming it and the compiled backends"
DLRT_BACKEND=CPU "$DLINFO" >"$tmp/out" 2>"$tmp/err" && grep -q "^cpu:0 " "$tmp/out"
result "DLRT_BACKEND=CPU starts the cpu backend (names are case-insensitive)"
DLRT_BACKEND=bogus "$DLTRAIN" $quick >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "DLRT_BACKEND" "$tmp/err" && ! grep -q "driver" "$tmp/err"
result "DLRT_BACKEND=bogus: dltrain exits 1 blaming DLRT_BACKEND, not a driver"
if "$DLINFO" --json 2>/dev/null | grep -q '"opencl"'; then
  DLRT_BACKEND=cpu "$DLTRAIN" --data generated --limit 640 --device opencl:0 --quiet \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] && grep -q "left out by DLRT_BACKEND" "$tmp/err"
  result "DLRT_BACKEND=cpu --device opencl:0 says opencl was left out"
else
  skip "DLRT_BACKEND=cpu --device opencl:0" "opencl not compiled in"
fi
DLRT_BACKEND="cpu, bogus" "$DLINFO" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q '"bogus"' "$tmp/err"
result "DLRT_BACKEND=\"cpu, bogus\" is refused too"

# 17-22: DLRT_MEM_LIMIT takes --mem-limit's route.
DLRT_MEM_LIMIT=8M "$DLTRAIN" $quick --offload optimizer >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ]
result "DLRT_MEM_LIMIT=8M trains the mlp with --offload optimizer (as --mem-limit 2.7M does)"
DLRT_MEM_LIMIT=8M "$DLTRAIN" --data generated --limit 640 --device cpu --threads 1 \
  --offload optimizer >"$tmp/out" 2>"$tmp/err"
grep -q "^spill    budget 6.8 MiB (85% of DLRT_MEM_LIMIT)" "$tmp/out"
result "... spilling within 85% of it, and says so"
DLRT_MEM_LIMIT=8M "$DLTRAIN" $quick >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "cannot build the model: a device budget of 6.0 MiB" "$tmp/err" &&
  grep -q "offload the optimizer" "$tmp/err" && grep -q "DLRT_MEM_LIMIT" "$tmp/err"
result "DLRT_MEM_LIMIT=8M without offloading: refused at once, pointing at the optimizer"
DLRT_MEM_LIMIT=8M "$DLTRAIN" $quick --model cnn >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q -- "--checkpoint sqrt would fit" "$tmp/err"
result "DLRT_MEM_LIMIT=8M: the cnn is refused, saying --checkpoint sqrt would fit"
run $quick --model cnn --mem-limit 6M
[ $rc -eq 1 ] && grep -q -- "--checkpoint sqrt would fit" "$tmp/err"
result "--mem-limit 6M: the cnn is refused, saying --checkpoint sqrt would fit"
run $quick --model cnn --mem-limit 6M --checkpoint sqrt
[ $rc -eq 0 ]
result "... and with --checkpoint sqrt it trains (the hint holds)"
