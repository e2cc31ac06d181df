#!/usr/bin/env bash
# train-vs-pytorch.sh — training throughput of dltrain against PyTorch on the
# same model, data, batch, optimizer and thread count, in one run: the two
# alternate (dltrain, pytorch, dltrain, ...) REPS times and the medians are
# compared as a ratio. Needs Debian's python3-torch and Fashion-MNIST.
#
#   bench/train-vs-pytorch.sh [--models "mlp cnn"] [--threads 2] [--reps 3]
#                             [--limit 12800] [--device cpu]
# Run from the build folder (or set DLTRAIN). Prints a table and one line per
# model: "ratio dltrain/pytorch (median images/s) MODEL = X.XX".
set -euo pipefail
models="mlp cnn" threads=2 reps=3 limit=12800 device=cpu
while (($#)); do
  case $1 in
    --models) models=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    *) echo "usage: $0 [--models LIST] [--threads N] [--reps N] [--limit N] [--device SPEC]" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dltrain=${DLTRAIN:-./tools/dltrain}
python=${PYTHON:-/usr/bin/python3}
[[ -x $dltrain ]] || { echo "$0: no dltrain at $dltrain (run from the build folder or set DLTRAIN)" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null || { echo "$0: $python cannot import torch (apt-get install python3-torch)" >&2; exit 1; }

field() { "$python" -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])[sys.argv[1]])' "$1"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; threads $threads, batch 64, Adam lr 1e-3, $limit images/epoch, $reps runs each"
printf '%-6s %-10s %12s %12s %12s %10s\n' model framework median min max test_acc
for model in $models; do
  ours=() theirs=() ours_acc=() theirs_acc=()
  for ((r = 0; r < reps; r++)); do
    out=$("$dltrain" --model "$model" --device "$device" --threads "$threads" --limit "$limit" \
          --epochs 1 --batch 64 --optimizer adam --lr 1e-3 --seed $((r + 1)) --json --quiet 2>/dev/null)
    ours+=("$(field train_images_per_s <<<"$out")"); ours_acc+=("$(field test_accuracy <<<"$out")")
    out=$("$python" "$here/pytorch_train.py" --model "$model" --threads "$threads" --limit "$limit" \
          --epochs 1 --batch 64 --lr 1e-3 --seed $((r + 1)))
    theirs+=("$(field train_images_per_s <<<"$out")"); theirs_acc+=("$(field test_accuracy <<<"$out")")
  done
  mo=$(median "${ours[@]}") mt=$(median "${theirs[@]}")
  printf '%-6s %-10s %12.0f %12.0f %12.0f %10.4f\n' "$model" dltrain "$mo" \
    "$(printf '%s\n' "${ours[@]}" | sort -g | head -1)" "$(printf '%s\n' "${ours[@]}" | sort -g | tail -1)" \
    "$(median "${ours_acc[@]}")"
  printf '%-6s %-10s %12.0f %12.0f %12.0f %10.4f\n' "$model" pytorch "$mt" \
    "$(printf '%s\n' "${theirs[@]}" | sort -g | head -1)" "$(printf '%s\n' "${theirs[@]}" | sort -g | tail -1)" \
    "$(median "${theirs_acc[@]}")"
  awk -v a="$mo" -v b="$mt" -v m="$model" 'BEGIN {printf "ratio dltrain/pytorch (median images/s) %s = %.2f\n", m, a / b}'
done
