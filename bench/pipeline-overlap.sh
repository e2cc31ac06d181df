#!/bin/sh
# pipeline-overlap.sh — a GPT's --pipeline step, two dltrain builds side by
# side (say main's, whose stages ran one after another, and one whose
# stages run in waves), alternated round by round; medians of tokens/s and
# their ratio per stage list.
#
#   sh bench/pipeline-overlap.sh --a OLD/tools/dltrain --b NEW/tools/dltrain \
#      [--stages "cpu,cpu cpu,opencl:0"] [--rounds 5] [--steps 8]
#
# Run it from a build directory on a quiet machine. The model is a 4-block
# gpt-mini (embd 128, context 64, batch 16, 4 micro-batches), --threads 1.
set -eu
a="" b="" stages="cpu,cpu cpu,opencl:0" rounds=5 steps=8
while [ $# -gt 0 ]; do
  case "$1" in
  --a) a=$2; shift 2 ;;
  --b) b=$2; shift 2 ;;
  --stages) stages=$2; shift 2 ;;
  --rounds) rounds=$2; shift 2 ;;
  --steps) steps=$2; shift 2 ;;
  *) echo "pipeline-overlap.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$a" ] && [ -x "$b" ] || { echo "pipeline-overlap.sh: give --a and --b, two dltrain binaries" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$(dirname "$0")/../tests/english_corpus.py" "$tmp/corpus.txt" 200000 96
gpt="--model gpt-mini --layers 4 --heads 4 --embd 128 --context 64 --batch 16 --threads 1"
gpt="$gpt --data $tmp/corpus.txt --steps $steps --eval-every $steps --eval-batches 1 --json --quiet"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for st in $stages; do
  : >"$tmp/a" && : >"$tmp/b"
  for r in $(seq 1 "$rounds"); do
    for side in a b; do
      bin=$a && [ $side = b ] && bin=$b
      # shellcheck disable=SC2086
      "$bin" $gpt --pipeline "$st" 2>/dev/null | tail -1 |
        python3 -c "import json, sys; print(json.loads(sys.stdin.read())['tokens_per_s'])" >>"$tmp/$side"
    done
  done
  python3 - "$st" "$tmp/a" "$tmp/b" <<'EOF'
import statistics, sys
a = [float(x) for x in open(sys.argv[2])]
b = [float(x) for x in open(sys.argv[3])]
ma, mb = statistics.median(a), statistics.median(b)
print("%-16s a %8.0f tokens/s  b %8.0f tokens/s  b/a %.3f  (%d rounds)" % (sys.argv[1], ma, mb, mb / ma, len(a)))
EOF
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
