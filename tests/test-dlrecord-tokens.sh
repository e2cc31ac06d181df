#!/bin/sh
# test-dlrecord-tokens.sh — TAP checks of `dlrecord tokens`: a text file and
# a folder of text files become llm.c token files (checked byte for byte
# with python3 when present: 256 int32 header 20240520, 1, count; uint16
# byte tokens), `dlrecord info` reads them back, and bad input (a FIFO, an
# empty folder, a truncated token file) or a target that is not a regular
# file is refused with exit 1, leaving the target as it was. DLRECORD may
# name another binary.

DLRECORD=${DLRECORD:-./tools/dlrecord}
TOOL=$DLRECORD PLAN=9
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"
t="timeout 30"
command -v timeout >/dev/null 2>&1 || t=""

printf 'hello, tokens\n' >"$tmp/a.txt"
run tokens "$tmp/a.txt" "$tmp/a.bin"
[ $rc -eq 0 ] && grep -q "14 tokens, vocabulary 256" "$tmp/out" &&
  [ "$(stat -c %s "$tmp/a.bin")" -eq $((1024 + 2 * 14)) ]
result "a text file becomes a token file of 14 byte tokens (1024 + 28 bytes)"

if [ "$have_python" = yes ]; then
  python3 -c "import struct, sys
b = open(sys.argv[1], 'rb').read()
h = struct.unpack('<256i', b[:1024])
assert h[:3] == (20240520, 1, 14) and not any(h[3:]), h[:4]
toks = struct.unpack('<14H', b[1024:])
assert bytes(toks) == b'hello, tokens\n', toks" "$tmp/a.bin"
  result "its bytes are llm.c's: header 20240520, 1, 14, zeros; uint16 tokens of the text"
else
  skip "its bytes are llm.c's" "no python3"
fi

run info "$tmp/a.bin"
[ $rc -eq 0 ] && grep -q "14 tokens (llm.c token file), vocabulary" "$tmp/out"
result "dlrecord info reads a token file back"

mkdir "$tmp/corpus"
printf 'one\n' >"$tmp/corpus/1"
printf 'two\n' >"$tmp/corpus/2"
printf 'x\000y' >"$tmp/corpus/2.dat"
run tokens "$tmp/corpus" "$tmp/c.bin"
[ $rc -eq 0 ] && grep -q "8 tokens, vocabulary 256 (from 2 files" "$tmp/out"
result "a folder's text files become one token file (a binary file skipped)"

mkfifo "$tmp/fifo"
rc=0
$t "$DLRECORD" tokens "$tmp/fifo" "$tmp/f.bin" >"$tmp/out" 2>"$tmp/err" || rc=$?
[ $rc -eq 1 ] && grep -q "FIFO" "$tmp/err" && [ ! -e "$tmp/f.bin" ]
result "a FIFO as text is refused at once, exit 1, nothing written"

mkdir "$tmp/empty"
run tokens "$tmp/empty" "$tmp/e.bin"
[ $rc -eq 1 ] && grep -q "no text file" "$tmp/err" && [ ! -e "$tmp/e.bin" ]
result "a folder without text is refused, exit 1"

head -c 1030 "$tmp/a.bin" >"$tmp/cut.bin"
run info "$tmp/cut.bin"
[ $rc -eq 1 ] && grep -q "truncated" "$tmp/err"
result "a truncated token file is refused, naming it"

cp "$tmp/a.bin" "$tmp/keep.bin"
mkdir "$tmp/dir.bin"
run tokens "$tmp/a.txt" "$tmp/dir.bin"
[ $rc -eq 1 ] && grep -q "folder" "$tmp/err" && [ -d "$tmp/dir.bin" ]
result "a folder as the target is refused and left as it was"

run tokens "$tmp/a.txt"
[ $rc -eq 2 ] && grep -q "tokens needs TEXT FILE.bin" "$tmp/err"
result "tokens with one operand is a usage error"
