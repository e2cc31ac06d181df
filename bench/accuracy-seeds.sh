#!/usr/bin/env bash
# accuracy-seeds.sh — test accuracy of the issue's recipe (Adam, lr 1e-3,
# batch 64, no augmentation, EPOCHS epochs) over several seeds, for dltrain
# and, with --pytorch, for PyTorch on the same data: one seed moves a 3-epoch
# result by about half a point, so a single run says little about a recipe.
#
#   bench/accuracy-seeds.sh [--model mlp] [--device cpu] [--seeds 8]
#                           [--epochs 3] [--threads 2] [--pytorch]
# Run from the build folder (or set DLTRAIN). Prints one line per run, then
# "mean|min|max test_accuracy FRAMEWORK MODEL DEVICE = X.XXXX" lines.
set -euo pipefail
model=mlp device=cpu seeds=8 epochs=3 threads=2 pytorch=0
while (($#)); do
  case $1 in
    --model) model=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --pytorch) pytorch=1; shift ;;
    *) echo "usage: $0 [--model M] [--device SPEC] [--seeds N] [--epochs N] [--threads N] [--pytorch]" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dltrain=${DLTRAIN:-./tools/dltrain}
python=${PYTHON:-/usr/bin/python3}
[[ -x $dltrain ]] || { echo "$0: no dltrain at $dltrain (run from the build folder or set DLTRAIN)" >&2; exit 1; }
if ((pytorch)); then
  "$python" -c 'import torch, numpy' 2>/dev/null ||
    { echo "$0: $python cannot import torch and numpy (apt-get install python3-torch python3-numpy)" >&2; exit 1; }
fi

field() { "$python" -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])[sys.argv[1]])' "$1"; }
summary() { # framework, then the accuracies
  local who=$1; shift
  printf '%s\n' "$@" | awk -v w="$who $model $device" '
    {s += $1; if (NR == 1 || $1 < lo) lo = $1; if (NR == 1 || $1 > hi) hi = $1}
    END {printf "mean test_accuracy %s = %.4f\nmin test_accuracy %s = %.4f\nmax test_accuracy %s = %.4f\n", w, s / NR, w, lo, w, hi}'
}

echo "recipe: $model, Adam lr 1e-3, batch 64, $epochs epochs, $threads threads, seeds 1-$seeds"
ours=() theirs=()
for ((s = 1; s <= seeds; s++)); do
  out=$("$dltrain" --model "$model" --device "$device" --threads "$threads" --epochs "$epochs" \
        --batch 64 --optimizer adam --lr 1e-3 --seed "$s" --json --quiet 2>/dev/null)
  ours+=("$(field test_accuracy <<<"$out")")
  echo "seed $s dltrain $(field test_accuracy <<<"$out")"
  if ((pytorch)); then
    out=$("$python" "$here/pytorch_train.py" --model "$model" --threads "$threads" \
          --epochs "$epochs" --batch 64 --lr 1e-3 --seed "$s")
    theirs+=("$(field test_accuracy <<<"$out")")
    echo "seed $s pytorch $(field test_accuracy <<<"$out")"
  fi
done
summary dltrain "${ours[@]}"
((pytorch)) && summary pytorch "${theirs[@]}"
exit 0
