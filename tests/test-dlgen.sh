#!/bin/sh
# shellcheck disable=SC2086
# test-dlgen.sh — TAP checks of dlgen end to end: a small GPT trained by
# dltrain --save (with sizes of its own, which its checkpoint records)
# samples from a prompt; a fixed seed gives the same text twice and another
# seed another text; --temperature 0 is greedy (the same whatever the seed),
# as are --top-k 1 and a tiny --top-p; sampling stops at the model's context
# and says so; --timing reports each position and the tokens per second; a
# vocabulary other than bytes takes and prints token ids; it runs on OpenCL;
# a missing, corrupt or non-GPT checkpoint, an unknown device, bad option
# values and a prompt longer than the context are errors with messages and
# non-zero exits; --help and --version work.

DLGEN=${DLGEN:-./tools/dlgen}
DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLGEN PLAN=26
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

# A few KB of English-like text, the same on every machine.
python3 -c "
import random
r = random.Random(7)
words = 'the of and to in is that it was for on are as with his they at be this from have or by one had not but what all were when we there can an your which their said if do will each about how up out them then she many some so these would other into'.split()
lines = [' '.join(r.choice(words) for _ in range(r.randint(4, 12))).capitalize() + '.' for _ in range(800)]
open('$tmp/corpus.txt', 'w').write('\n'.join(lines) + '\n')
"
small="--model gpt-mini --layers 2 --heads 2 --embd 32 --context 48 --batch 8 --threads 2 --quiet"
gen="--threads 2 --device cpu"

# 1, 2: a checkpoint with sizes other than its preset's, recorded in its metadata.
"$DLTRAIN" $small --data "$tmp/corpus.txt" --steps 30 --eval-every 30 --eval-batches 2 \
  --lr 3e-3 --save "$tmp/mini.st" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && [ -s "$tmp/mini.st" ]
result "dltrain --save makes a GPT checkpoint of 2 layers, 2 heads, width 32, context 48"
python3 -c "
import json, struct, sys
f = open(sys.argv[1], 'rb')
n = struct.unpack('<Q', f.read(8))[0]
m = json.loads(f.read(n))['__metadata__']
want = {'gpt_layers': '2', 'gpt_heads': '2', 'gpt_embd': '32', 'gpt_context': '48', 'gpt_vocab': '256'}
assert all(m.get(k) == v for k, v in want.items()), m
" "$tmp/mini.st" 2>"$tmp/err"
result "its metadata records the sizes: gpt_layers, gpt_heads, gpt_embd, gpt_context, gpt_vocab"

# 3-5: the same seed twice, another seed.
run "$tmp/mini.st" $gen --prompt "The " --tokens 40 --seed 5
cp "$tmp/out" "$tmp/seed5"
[ $rc -eq 0 ] && python3 -c "
import sys
b = open(sys.argv[1], 'rb').read()
assert b.startswith(b'The ') and len(b) in (44, 45), (len(b), b)
" "$tmp/out" 2>"$tmp/err"
result "--prompt 'The ' --tokens 40: the prompt and then 40 bytes"
run "$tmp/mini.st" $gen --prompt "The " --tokens 40 --seed 5
[ $rc -eq 0 ] && cmp -s "$tmp/out" "$tmp/seed5"
result "the same --seed gives the same text"
run "$tmp/mini.st" $gen --prompt "The " --tokens 40 --seed 6
[ $rc -eq 0 ] && ! cmp -s "$tmp/out" "$tmp/seed5"
result "another --seed gives another text"

# 6-8: greedy, and the filters that leave only the likeliest token.
run "$tmp/mini.st" $gen --prompt "The " --tokens 40 --temperature 0 --seed 1
cp "$tmp/out" "$tmp/greedy"
run "$tmp/mini.st" $gen --prompt "The " --tokens 40 --temperature 0 --seed 2
[ $rc -eq 0 ] && cmp -s "$tmp/out" "$tmp/greedy" && [ "$(wc -c <"$tmp/greedy")" -ge 44 ]
result "--temperature 0 is greedy: the same text whatever the seed"
run "$tmp/mini.st" $gen --prompt "The " --tokens 40 --top-k 1 --seed 9
[ $rc -eq 0 ] && cmp -s "$tmp/out" "$tmp/greedy"
result "--top-k 1 draws the likeliest token: the greedy text"
run "$tmp/mini.st" $gen --prompt "The " --tokens 40 --top-p 1e-6 --seed 9
[ $rc -eq 0 ] && cmp -s "$tmp/out" "$tmp/greedy"
result "--top-p 1e-6 keeps the likeliest token only: the greedy text"

# 9: the context (48): a prompt of 4 leaves room for 45 tokens.
run "$tmp/mini.st" $gen --prompt "The " --tokens 100 --top-k 20 --top-p 0.9 --temperature 0.8
[ $rc -eq 0 ] && grep -q "reached the model's context of 48 positions after 45 of 100 tokens" \
  "$tmp/err" && python3 -c "
import sys
b = open(sys.argv[1], 'rb').read()
assert len(b) == 49 or (len(b) == 50 and b.endswith(b'\\n')), (len(b), b)
" "$tmp/out" 2>"$tmp/py.err"
result "sampling stops at the context (48 positions: 45 tokens after a prompt of 4) and says so"

# 10: --timing.
run "$tmp/mini.st" $gen --tokens 20 --timing
[ $rc -eq 0 ] && [ "$(grep -c "^dlgen: position [0-9]*: [0-9.]* ms$" "$tmp/err")" -eq 20 ] &&
  grep -q "20 tokens sampled in .* tokens/s" "$tmp/err"
result "--timing prints each position's time and the tokens per second"
grep "tokens/s" "$tmp/err" | sed 's/^/# /'

# 11, 12: a vocabulary other than bytes: token ids in, token ids out.
"$DLTRAIN" $small --vocab 300 --data "$tmp/corpus.txt" --steps 2 --eval-every 2 \
  --eval-batches 1 --save "$tmp/ids.st" >/dev/null 2>&1
run "$tmp/ids.st" $gen --prompt "72 101,108" --tokens 5 --seed 3
[ $rc -eq 0 ] && grep -Eq "^72 101 108( [0-9]+){5}$" "$tmp/out"
result "vocabulary 300: the prompt's token ids, then 5 sampled ids, on one line"
run "$tmp/ids.st" $gen --prompt "72 abc"
[ $rc -eq 2 ] && grep -q "'abc' is not a token id of this model (0 to 299)" "$tmp/err"
result "vocabulary 300: a prompt that is not token ids is a usage error"

# 13: OpenCL.
if has_opencl; then
  run "$tmp/mini.st" --device opencl:0 --prompt "The " --tokens 20 --temperature 0
  [ $rc -eq 0 ] && [ "$(head -c 4 "$tmp/out")" = "The " ] && [ "$(wc -c <"$tmp/out")" -ge 24 ]
  result "it samples on opencl:0"
else
  skip "it samples on opencl:0" "no OpenCL device"
fi

# 14-17: checkpoints that cannot serve.
run "$tmp/missing.st"
[ $rc -eq 1 ] && grep -q "missing.st" "$tmp/err"
result "a missing checkpoint exits 1 naming it"
head -c 3000 "$tmp/mini.st" >"$tmp/cut.st"
run "$tmp/cut.st"
[ $rc -eq 1 ] && grep -q "cut.st" "$tmp/err"
result "a truncated checkpoint exits 1 naming it"
"$DLTRAIN" --model mlp --data generated --limit 256 --batch 64 --device cpu --quiet \
  --save "$tmp/mlp.st" >/dev/null 2>&1
run "$tmp/mlp.st"
[ $rc -eq 1 ] && grep -q "not of a GPT" "$tmp/err"
result "an image classifier's checkpoint exits 1: not of a GPT"
printf 'not a safetensors file at all\n' >"$tmp/text.st"
run "$tmp/text.st"
[ $rc -eq 1 ] && grep -q "text.st" "$tmp/err"
result "a file that is not safetensors exits 1 naming it"

# 18-20: usage errors.
run "$tmp/mini.st" --device bogus:3
[ $rc -eq 2 ] && grep -q "bogus" "$tmp/err"
result "an unknown device exits 2 naming it"
fails=
for bad in "--top-p 0" "--top-p 1.5" "--temperature -1" "--tokens x" "--top-k -2" "--seed -1" \
  "--threads 5000" "--tempreature 1"; do
  run "$tmp/mini.st" $bad
  { [ $rc -eq 2 ] && grep -q "dlgen: " "$tmp/err"; } || fails="$fails [$bad]"
done
run
{ [ $rc -eq 2 ] && grep -q "give a checkpoint" "$tmp/err"; } || fails="$fails [no checkpoint]"
[ -z "$fails" ]
result "bad option values, an unknown option and no checkpoint exit 2 with a message${fails:+:$fails}"
run "$tmp/mini.st" --prompt "$(printf '%060d' 0)"
[ $rc -eq 2 ] && grep -q "the prompt is 60 tokens; the model's context is 48" "$tmp/err"
result "a prompt longer than the context exits 2 saying both"

# 21-24: the sizes in the metadata. strip FILE OUT [KEY=VALUE]: the
# checkpoint without its gpt_* keys (as dlrt wrote them before) or with one
# changed, and without its CRC-32s (files without them load unchecked).
strip() {
  python3 -c "
import json, struct, sys
data = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', data[:8])[0]
h = json.loads(data[8:8 + n])
m = h['__metadata__']
for k in [k for k in m if k.startswith('gpt_') or k.startswith('dlrt.')]:
    del m[k]
for kv in sys.argv[3:]:
    k, v = kv.split('=')
    m[k] = v
out = json.dumps(h).encode()
out += b' ' * (-len(out) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(out)) + out + data[8 + n:])
" "$@"
}
strip "$tmp/mini.st" "$tmp/old.st"
run "$tmp/old.st" $gen --tokens 5
[ $rc -eq 1 ] && grep -q "whose heads the checkpoint does not record" "$tmp/err"
result "a checkpoint of sizes of its own from before gpt_heads exits 1 saying so"
"$DLTRAIN" --model gpt-mini --batch 2 --threads 2 --quiet --data "$tmp/corpus.txt" --steps 1 \
  --eval-every 1 --eval-batches 1 --save "$tmp/preset.st" >/dev/null 2>&1
strip "$tmp/preset.st" "$tmp/old-preset.st"
run "$tmp/old-preset.st" $gen --tokens 5 --temperature 0
cp "$tmp/out" "$tmp/old-preset.out"
run "$tmp/preset.st" $gen --tokens 5 --temperature 0
[ $rc -eq 0 ] && [ -s "$tmp/out" ] && cmp -s "$tmp/out" "$tmp/old-preset.out"
result "one of gpt-mini's own sizes from before gpt_heads samples as gpt-mini (4 heads)"
strip "$tmp/mini.st" "$tmp/edited.st" gpt_heads=2 gpt_layers=3
run "$tmp/edited.st" $gen --tokens 5
[ $rc -eq 1 ] && grep -q "its metadata says gpt_layers 3, its tensors 2" "$tmp/err"
result "metadata that disagrees with the tensors exits 1 saying which"
"$DLTRAIN" $small --heads 4 --data "$tmp/corpus.txt" --steps 31 --eval-every 31 \
  --eval-batches 1 --resume "$tmp/mini.st" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "has 2 heads, the model 4: resume with --heads 2" "$tmp/err"
result "dltrain refuses to resume a checkpoint of 2 heads with --heads 4"

# 25, 26: --help and --version.
run --help
[ $rc -eq 0 ] && grep -q "^Usage: dlgen" "$tmp/out" && grep -q -- "--top-p" "$tmp/out" &&
  grep -q "Exit status" "$tmp/out"
result "--help exits 0 with the usage, the options and the exit statuses"
run --version
[ $rc -eq 0 ] && grep -q "^dlgen (dlrt) " "$tmp/out"
result "--version prints the version"
