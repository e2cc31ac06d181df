#!/bin/sh
# test-fuzz-corpus.sh — every fuzz harness of tests/fuzz/ (fuzz-TARGET.c),
# built with replay.c as main() (tests/fuzz/replay-TARGET), run once on each
# input of its seed corpus (tests/fuzz/corpus/TARGET/: valid files, and the
# regression-* inputs that once found a bug). One point per harness; a
# harness without a replay program or a corpus fails. No fuzzing: that is
# make fuzz.
srcdir=${srcdir:-.}
harnesses=$(cd "$srcdir/tests/fuzz" && ls fuzz-*.c | sed 's/^fuzz-//; s/\.c$//')
echo "1..$(echo $harnesses | wc -w)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-fuzz-corpus.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
n=0
for t in $harnesses; do
  n=$((n + 1))
  replay=tests/fuzz/replay-$t
  corpus=$srcdir/tests/fuzz/corpus/$t
  if [ ! -x "$replay" ]; then
    echo "not ok $n - $t: no $replay (add it to fuzz_replay in Makefile.am)"
    continue
  fi
  "$replay" "$corpus" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  inputs=$(grep -c '^# ok ' "$tmp/out")
  if [ $rc -eq 0 ]; then
    echo "ok $n - $t: $inputs inputs of $corpus"
  else
    echo "not ok $n - $t: exit $rc after $inputs inputs of $corpus"
    tail -n 1 "$tmp/out" | sed 's/^# ok/# last passed:/'
    # The report, not the parser's messages (a usage text can be long).
    if grep -q -E 'fuzz: finding:|runtime error:|Sanitizer' "$tmp/err"; then
      grep -A 12 -E 'fuzz: finding:|runtime error:|ERROR: [A-Za-z]*Sanitizer' "$tmp/err" |
        head -n 30 | sed 's/^/# /'
    else
      tail -n 30 "$tmp/err" | sed 's/^/# /'
    fi
  fi
done
