#!/bin/sh
# run.sh — make fuzz: builds each harness of tests/fuzz/ (fuzz-TARGET.c) with
# clang's libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer against
# the library's parsing layers (lib/util, lib/graph, lib/data,
# lib/train/model.c, built here with the same flags), fuzzes each in turn for
# SECONDS, and prints the executions and findings of each. Exits 1 on any
# finding (a crash, a leak, undefined behaviour, a timeout, running out of
# memory, or a harness's own check), 2 on a build failure, and 0 with a
# "SKIPPED" line when no clang with libFuzzer is found.
#
# Usage: run.sh [--srcdir DIR] [--builddir DIR] [--seconds N] [TARGET...]
#   --srcdir    the source tree (default: two folders above this script)
#   --builddir  a configured build (its config.h; default: .); the harnesses,
#               logs, grown corpora and findings go to BUILDDIR/fuzz/
#   --seconds   fuzzing time per target (default $FUZZ_SECONDS, else 600);
#               0 runs the seed corpora once and fuzzes nothing
#   TARGET      idx, records, tokens, safetensors, model, dltrain-options,
#               dlbench-options, dlinfo-options, dlrecord-options (default:
#               every fuzz-*.c)
# Environment: FUZZ_CC (the clang to use), FUZZ_CFLAGS (more compiler flags,
# after the sanitizers': -O2, -fno-sanitize=...), FUZZ_TIMEOUT (seconds one
# input may take, default 10), FUZZ_RSS_MB (default 2048), FUZZ_FLAGS (more
# libFuzzer flags, such as -seed=1 or -only_ascii=1).
#
# A finding is saved as BUILDDIR/fuzz/findings/TARGET-crash-..., and
# replays with BUILDDIR/fuzz/bin/fuzz-TARGET FILE; once fixed, copy it to
# tests/fuzz/corpus/TARGET/regression-NAME so make check keeps replaying it.

srcdir=$(cd "$(dirname "$0")/../.." && pwd)
builddir=.
seconds=${FUZZ_SECONDS:-600}
targets=
while [ $# -gt 0 ]; do
  case $1 in
    --srcdir) srcdir=$2; shift 2 ;;
    --builddir) builddir=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    -h|--help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1 (see run.sh --help)" >&2; exit 2 ;;
    *) targets="$targets $1"; shift ;;
  esac
done
case $seconds in
  ''|*[!0-9]*) echo "run.sh: --seconds needs a whole number, not '$seconds'" >&2; exit 2 ;;
esac
srcdir=$(cd "$srcdir" && pwd) || exit 2
builddir=$(cd "$builddir" && pwd) || exit 2
if [ ! -f "$builddir/config.h" ]; then
  echo "run.sh: no config.h in $builddir: run configure there first (or give --builddir)" >&2
  exit 2
fi
fuzzdir=$srcdir/tests/fuzz
out=$builddir/fuzz
mkdir -p "$out/obj" "$out/bin" "$out/logs" "$out/corpus" "$out/findings" || exit 2

# ---------------------------------------------------------------- clang
probe=$out/probe.c
printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
  'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return (int)(n && d[0]); }' >"$probe"
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=all $FUZZ_CFLAGS"
cc=
clangs="clang clang-20 clang-19 clang-18 clang-17 clang-16 clang-15 clang-14 clang-13 clang-12"
for c in ${FUZZ_CC:-$clangs clang-11}; do
  command -v "$c" >/dev/null 2>&1 || continue
  if "$c" -fsanitize=fuzzer $sanitize "$probe" -o "$out/probe" >"$out/probe.log" 2>&1; then
    cc=$c
    break
  fi
done
rm -f "$out/probe" "$probe"
if [ -z "$cc" ]; then
  echo "make fuzz: SKIPPED: no clang with libFuzzer and the address and undefined sanitizers"
  echo "  (tried ${FUZZ_CC:-clang, clang-11 to clang-20}; install clang, or set FUZZ_CC=PATH)"
  [ -s "$out/probe.log" ] && sed 's/^/  /' "$out/probe.log" | head -n 5
  exit 0
fi
echo "make fuzz: $($cc --version | head -n 1), $seconds s per target"

# ---------------------------------------------------------------- build
cflags="-g -O1 -fno-omit-frame-pointer -std=c11 -D_GNU_SOURCE -DDLRT_BUILDING \
 -I$srcdir/lib -I$builddir -I$srcdir/kernels -I$srcdir/tools -I$fuzzdir"
# The library's parsing layers; a harness that needs more adds them here.
libsrc=$(cd "$srcdir" && ls lib/util/*.c lib/graph/*.c lib/data/*.c lib/train/model.c)
objs=
# Other flags than the last build's: everything again.
if [ "$(cat "$out/obj/flags" 2>/dev/null)" != "$cc $cflags $sanitize" ]; then
  rm -f "$out"/obj/*.o
  echo "$cc $cflags $sanitize" >"$out/obj/flags"
fi
for s in $libsrc; do
  o=$out/obj/$(echo "$s" | tr / _ | sed 's/\.c$/.o/')
  objs="$objs $o"
  # Rebuilt when the source, a header of lib/ or config.h is newer.
  if [ -f "$o" ] && [ ! "$srcdir/$s" -nt "$o" ] && [ ! "$builddir/config.h" -nt "$o" ] &&
     [ -z "$(find "$srcdir/lib" -name '*.h' -newer "$o" | head -n 1)" ]; then
    continue
  fi
  if ! $cc $cflags -fsanitize=fuzzer-no-link $sanitize -c "$srcdir/$s" -o "$o" \
       2>"$out/logs/build.log"; then
    cat "$out/logs/build.log" >&2
    echo "make fuzz: cannot compile $s" >&2
    exit 2
  fi
done
rm -f "$out/libdlrt-fuzz.a"
ar rcs "$out/libdlrt-fuzz.a" $objs || exit 2

all=$(cd "$fuzzdir" && ls fuzz-*.c | sed 's/^fuzz-//; s/\.c$//')
[ -n "$targets" ] || targets=$all
for t in $targets; do
  if [ ! -f "$fuzzdir/fuzz-$t.c" ]; then
    echo "make fuzz: no target '$t' (there are: $(echo $all))" >&2
    exit 2
  fi
  # The harness's own sources besides the library: its "fuzz-sources:" line.
  extra=$(sed -n 's/.*fuzz-sources:\(.*\)$/\1/p' "$fuzzdir/fuzz-$t.c" | sed 's/\*\/.*//')
  files=
  for e in $extra; do files="$files $srcdir/$e"; done
  if ! $cc $cflags -fsanitize=fuzzer $sanitize "$fuzzdir/fuzz-$t.c" "$fuzzdir/fuzz.c" $files \
       "$out/libdlrt-fuzz.a" -lz -lm -lpthread -o "$out/bin/fuzz-$t" 2>"$out/logs/build.log"; then
    cat "$out/logs/build.log" >&2
    echo "make fuzz: cannot build the harness fuzz-$t" >&2
    exit 2
  fi
done

# ---------------------------------------------------------------- fuzz
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
ASAN_OPTIONS="detect_leaks=1:abort_on_error=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS ASAN_OPTIONS
if [ "$seconds" -eq 0 ]; then how=-runs=0; else how=-max_total_time=$seconds; fi
summary=$out/summary.txt
printf '%-18s %8s %12s %9s %7s  %s\n' target seconds executions "exec/s" corpus result \
  >"$summary"
findings=0
for t in $targets; do
  mkdir -p "$out/corpus/$t"
  seeds=$fuzzdir/corpus/$t
  [ -d "$seeds" ] || seeds=
  dict=
  [ -f "$fuzzdir/$t.dict" ] && dict=-dict=$fuzzdir/$t.dict
  log=$out/logs/$t.log
  echo "make fuzz: $t for $seconds s (log: $log)"
  start=$(date +%s)
  # stdout and stderr of the harness are closed (parsers print messages);
  # libFuzzer and the sanitizers report on their own copy of stderr.
  "$out/bin/fuzz-$t" $how -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
    -close_fd_mask=3 -print_final_stats=1 -artifact_prefix="$out/findings/$t-" $dict \
    $FUZZ_FLAGS "$out/corpus/$t" $seeds >"$log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  units=$(ls "$out/corpus/$t" | wc -l)
  if [ $rc -eq 0 ]; then
    result="no finding"
  else
    findings=$((findings + 1))
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    report='ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|fuzz: finding:'
    what=$(grep -m 1 -E "$report" "$log" |
           sed 's/^==[0-9]*==//' | cut -c 1-120)
    result="FINDING (exit $rc): ${what:-see the log} ${artifact:+-> $artifact}"
  fi
  printf '%-18s %8s %12s %9s %7s  %s\n' "$t" "$took" "${execs:-?}" "${rate:-?}" "$units" \
    "$result" >>"$summary"
done
echo
cat "$summary"
if [ $findings -gt 0 ]; then
  echo "make fuzz: $findings target(s) with a finding; each log ends with the report" >&2
  exit 1
fi
