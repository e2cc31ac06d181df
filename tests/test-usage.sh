#!/bin/sh
# shellcheck disable=SC2086
# test-usage.sh — TAP checks of the command lines of every tool (dltrain,
# dlbench, dlinfo, dlrecord): a usage error exits 2 with the error, a "did
# you mean --batch?" for a near miss, and one line pointing to --help (not
# the whole help), nothing on stdout; a number is checked as the value the
# tool uses (the float it becomes: 1e39 is inf, 1e-50 is 0), so each of
# those is a usage error and never a run. automake's tap-driver runs it from
# the top of the build tree; DLTRAIN, DLBENCH, DLINFO and DLRECORD may name
# other binaries.

DLTRAIN=${DLTRAIN:-./tools/dltrain}
DLBENCH=${DLBENCH:-./tools/dlbench}
DLINFO=${DLINFO:-./tools/dlinfo}
DLRECORD=${DLRECORD:-./tools/dlrecord}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLTRAIN PLAN=42
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

# Bounds a run that should have been refused at once (--watch 1e-300 spun
# forever before its value was checked).
bound=
command -v timeout >/dev/null 2>&1 && bound="timeout 120"

# usage_error BINARY WORD ARGS...: exit 2, nothing on stdout, WORD in the
# message, which is at most three lines and ends with the pointer to --help.
usage_error() {
  bin=$1 word=$2
  shift 2
  $bound "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  name=$(basename "$bin")
  [ $rc -eq 2 ] && [ ! -s "$tmp/out" ] && grep -q -- "$word" "$tmp/err" &&
    [ "$(wc -l <"$tmp/err")" -le 3 ] && ! grep -q "^Usage:" "$tmp/err" &&
    [ "$(tail -n 1 "$tmp/err")" = "Try '$name --help' for more information." ]
  result "$name $*: exit 2, '$word', a pointer to --help"
}

# 1-7: near misses of long options and of words, in every tool.
usage_error "$DLTRAIN" "did you mean --batch?" --bach 32
usage_error "$DLTRAIN" "did you mean --optimizer?" --optimiser sgd
usage_error "$DLTRAIN" "did you mean adam?" --optimizer adma
usage_error "$DLBENCH" "did you mean --reps?" --repz 3 gemm
usage_error "$DLBENCH" "did you mean gemm?" gem
usage_error "$DLINFO" "did you mean --json?" --jsno
usage_error "$DLRECORD" "did you mean convert?" conver generated "$tmp/rec"

# 8-11: the other kinds of getopt complaints, in words.
usage_error "$DLRECORD" "did you mean --help?" --hlep
usage_error "$DLTRAIN" "option '--de' is ambiguous: --device, --deterministic" --de cpu
usage_error "$DLTRAIN" "option '--batch' needs a value" --batch
usage_error "$DLINFO" "option '--json' takes no value" --json=yes

# 12-36: numbers checked as the value used.
for args in "--lr 1e39" "--lr 1e-50" "--lr 1e-40" "--lr nan" "--weight-decay 1e39" \
  "--clip-norm 1e39" "--label-smoothing 0.99999999999" "--erase 0.99999999999" \
  "--schedule step:1:1e39" "--schedule step:99999999999999999999" "--schedule step:0" \
  "--loss-scale 1e-45" "--loss-scale 1e39" "--loss-scale 65536:2000:1e39" \
  "--loss-scale 65536:2000:2:1e-50" "--loss-scale 65536:99999999999" "--normalize 0.5,1e-50" \
  "--normalize 1e39,1" "--checkpoint every:99999999999999999999" "--epochs 99999999999999999999" \
  "--seed -1" "--warmup -1"; do
  usage_error "$DLTRAIN" "${args%% *}" --data generated --limit 100 --device cpu $args
done
usage_error "$DLTRAIN" "--momentum" --data generated --limit 100 --optimizer sgd \
  --momentum 0.999999999
usage_error "$DLTRAIN" "--what-if" --plan --data generated --what-if 1e300
usage_error "$DLINFO" "--watch" --watch 1e-300

# 37-40: bounds that were right stay accepted.
"$DLTRAIN" --data generated --limit 64 --batch 32 --device cpu --quiet --lr 1.2e-38 \
  --momentum 0.9999 --optimizer sgd >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ]
result "dltrain --lr 1.2e-38 --momentum 0.9999 (normal floats) trains"
"$DLTRAIN" --data generated --limit 64 --batch 32 --device cpu --quiet --precision bf16 \
  --loss-scale 5.421010862427522e-20:10:2:0.5 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ]
result "dltrain --loss-scale 2^-64 (the smallest scale) trains in bf16"
"$DLRECORD" --version >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && grep -q "[0-9]\.[0-9]" "$tmp/out"
result "dlrecord --version prints the version"
"$DLRECORD" --help >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && grep -q "Exit status" "$tmp/out" && [ ! -s "$tmp/err" ]
result "dlrecord --help exits 0 and gives the exit statuses"

# 41, 42: every tool's help is still there on request, and only then.
for bin in "$DLBENCH" "$DLINFO"; do
  "$bin" --help >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 0 ] && grep -q "^Usage:" "$tmp/out" && [ ! -s "$tmp/err" ]
  result "$(basename "$bin") --help prints the help on stdout"
done
