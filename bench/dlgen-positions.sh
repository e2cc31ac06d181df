#!/bin/sh
# dlgen-positions.sh — issue 19's sampling bar: with its key/value cache,
# dlgen's time per token at position 1000 of a gpt2-sized model must be
# less than twice that at position 50 (without a cache, each token would
# recompute every earlier position: 20x the work at 1000).
#
# Makes a gpt2 checkpoint (random-initialised and trained one step: the
# time per token does not depend on the values) unless --checkpoint names
# one, then runs dlgen --runs times, greedy, far enough to reach the last
# position, and reports for each run:
#   - the --bench figures: after sampling, the steps at the two positions run
#     again in alternation, 21 rounds each, median time of each and their
#     ratio (alternating makes the load of a shared machine fall on both);
#   - the sequential figures: the median time of positions P-10 .. P+10 as
#     the sample went (--timing), and their ratio;
#   - the tokens per second of the whole sample;
# and the median of the runs' --bench ratios against the bar.
#
# Usage: bench/dlgen-positions.sh [--runs N] [--model gpt2] [--positions 50,1000]
#          [--checkpoint FILE] [--device SPEC] [--threads N]
# From the build folder (tools/dltrain, tools/dlgen), or with DLTRAIN and
# DLGEN naming them. gpt-mini's tokens/s: --model gpt-mini --positions 50,120.
# The gpt2 checkpoint is 1.5 GB (parameters and Adam's state) in $TMPDIR.
set -e
DLTRAIN=${DLTRAIN:-./tools/dltrain}
DLGEN=${DLGEN:-./tools/dlgen}
runs=3 model=gpt2 positions=50,1000 checkpoint= device=cpu threads=2
while [ $# -gt 0 ]; do
  case $1 in
  --runs) runs=$2; shift 2 ;;
  --model) model=$2; shift 2 ;;
  --positions) positions=$2; shift 2 ;;
  --checkpoint) checkpoint=$2; shift 2 ;;
  --device) device=$2; shift 2 ;;
  --threads) threads=$2; shift 2 ;;
  *) echo "usage: $0 [--runs N] [--model M] [--positions P,Q] [--checkpoint FILE]" \
       "[--device SPEC] [--threads N]" >&2; exit 2 ;;
  esac
done
for tool in "$DLTRAIN" "$DLGEN"; do
  [ -x "$tool" ] || { echo "$0: no $tool (run from the build folder)" >&2; exit 1; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlgen-positions.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ -z "$checkpoint" ]; then
  checkpoint=$tmp/$model.safetensors
  echo "making a $model checkpoint of its initial parameters" \
       "(dltrain --model $model --steps 0 --save) ..."
  "$DLTRAIN" --model "$model" --steps 0 --eval-every 1 --eval-batches 1 --batch 1 \
    --threads "$threads" --device "$device" --quiet --save "$checkpoint" >"$tmp/train.log" 2>&1 ||
    { cat "$tmp/train.log" >&2; exit 1; }
fi
last=${positions##*,}
tokens=$((last + 1)) # a prompt of one token: positions 0 .. last
echo "dlgen $checkpoint --tokens $tokens --temperature 0 --timing --bench $positions" \
  "--device $device --threads $threads, $runs runs (load: $(cut -d' ' -f1-3 /proc/loadavg))"
for r in $(seq "$runs"); do
  "$DLGEN" "$checkpoint" --tokens "$tokens" --temperature 0 --timing --bench "$positions" \
    --device "$device" --threads "$threads" >"$tmp/out.$r" 2>"$tmp/err.$r" ||
    { cat "$tmp/err.$r" >&2; exit 1; }
done
python3 - "$tmp" "$runs" "$positions" <<'EOF'
import re, statistics, sys
tmp, runs, positions = sys.argv[1], int(sys.argv[2]), [int(p) for p in sys.argv[3].split(',')]
first, last = positions[0], positions[-1]
bench_ratios = []
print(f"{'run':>3}  {'bench P':>9} {'bench Q':>9} {'ratio':>6}  {'seq P':>9} {'seq Q':>9} "
      f"{'ratio':>6}  {'tokens/s':>8}   (P = {first}, Q = {last}; ms per token)")
for r in range(1, runs + 1):
    err = open(f"{tmp}/err.{r}").read()
    bench = {int(p): float(ms) for p, ms in
             re.findall(r"bench: position (\d+): median ([\d.]+) ms", err)}
    seq = {int(p): float(ms) for p, ms in re.findall(r"position (\d+): ([\d.]+) ms\n", err)}
    def window(c):
        return statistics.median(seq[p] for p in range(c - 10, c + 11) if p in seq)
    rate = float(re.search(r"tokens sampled in [\d.]+ s: ([\d.]+) tokens/s", err).group(1))
    ratio = bench[last] / bench[first]
    bench_ratios.append(ratio)
    sp, sq = window(first), window(last)
    print(f"{r:>3}  {bench[first]:9.2f} {bench[last]:9.2f} {ratio:6.3f}  {sp:9.2f} {sq:9.2f} "
          f"{sq / sp:6.3f}  {rate:8.1f}")
m = statistics.median(bench_ratios)
print(f"median --bench ratio, position {last} / position {first}: {m:.3f} "
      f"(bar: under 2: {'met' if m < 2 else 'NOT met'})")
EOF
