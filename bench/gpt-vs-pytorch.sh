#!/usr/bin/env bash
# gpt-vs-pytorch.sh — dltrain's GPT against the same GPT-2 in PyTorch
# (bench/gpt_pytorch.py), side by side on the same token file, batch,
# context, recipe and threads: training tokens/s, runs alternated, medians
# and their ratio; with --quality, the validation loss after the same
# number of steps (mean over the same fixed validation windows). Both sides
# train on the same windows: gpt_pytorch.py draws dltrain's offsets for the
# same --seed (its --windows dlrt), so they differ only in their initial
# draws.
#
# Usage: bench/gpt-vs-pytorch.sh [--model gpt-mini|gpt2] [--runs N] [--steps S]
#        [--quality] [--seeds N] [--clip-norm X] [--same-init] [--threads T]
#   gpt-mini: batch 32, context 128 (the issue's speed bar: >= 2x);
#   gpt2:     124M parameters, batch 4, context 64 (bar: >= 1.5x).
#   --quality: gpt-mini, AdamW 1e-3, 1000 steps, evaluated on 20 batches
#   at the end (bar: within 0.02 nats of PyTorch's); --seeds N (default 1)
#   repeats it for seeds 1..N on both sides and compares the means;
#   --clip-norm X clips the gradients' global norm on both sides (GPT
#   recipes' 1.0; without it a late loss spike on either side can decide
#   the comparison); --same-init starts PyTorch from dltrain's initial
#   parameters (`dltrain --steps 0 --save`, read by gpt_pytorch.py --init),
#   so that the two differ in nothing but their arithmetic.
# Needs a build (DLTRAIN, DLRECORD: default ./tools/...), Debian's
# python3-torch and fortunes (the corpus, made into a token file here).
set -euo pipefail
model=gpt-mini runs=3 steps= quality=0 threads=2 seeds=1 clip=0 same_init=0
while (($#)); do
  case $1 in
  --model) model=$2; shift 2 ;;
  --runs) runs=$2; shift 2 ;;
  --steps) steps=$2; shift 2 ;;
  --threads) threads=$2; shift 2 ;;
  --quality) quality=1; shift ;;
  --seeds) seeds=$2; shift 2 ;;
  --clip-norm) clip=$2; shift 2 ;;
  --same-init) same_init=1; shift ;;
  *) echo "usage: $0 [--model gpt-mini|gpt2] [--runs N] [--steps S] [--quality] [--seeds N]" \
          "[--clip-norm X] [--same-init]" \
          "[--threads T]" >&2
     exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
DLTRAIN=${DLTRAIN:-./tools/dltrain}
DLRECORD=${DLRECORD:-./tools/dlrecord}
PYTHON=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpt-vs-pytorch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$DLRECORD" tokens /usr/share/games/fortunes "$tmp/corpus.bin" >&2

case $model in
gpt-mini) batch=32 context=128 sizes=(--layers 4 --heads 4 --embd 128 --context 128 --vocab 256)
          dl_sizes=() ;;
gpt2) batch=4 context=64 sizes=(--layers 12 --heads 12 --embd 768 --context 64 --vocab 50257)
      dl_sizes=(--context 64) ;;
*) echo "$0: --model gpt-mini or gpt2" >&2; exit 2 ;;
esac
if ((quality)); then
  runs=$seeds steps=${steps:-1000} eval_batches=20
else
  steps=${steps:-$([[ $model == gpt2 ]] && echo 12 || echo 40)} eval_batches=1
fi

dl() {
  "$DLTRAIN" --model "$model" "${dl_sizes[@]}" --data "$tmp/corpus.bin" \
    --batch "$batch" --steps "$steps" --eval-every "$steps" --eval-batches "$eval_batches" \
    --optimizer adamw --lr 1e-3 --threads "$threads" --device cpu --seed "$seed" --quiet --json \
    $([[ $clip != 0 ]] && echo --clip-norm "$clip") \
    2>"$tmp/dl.err" |
    tail -n 1
}
pt() {
  "$PYTHON" "$here/gpt_pytorch.py" --data "$tmp/corpus.bin" "${sizes[@]}" --batch "$batch" \
    --steps "$steps" --eval-batches "$eval_batches" --threads "$threads" --lr 1e-3 \
    --seed "$seed" --windows dlrt --clip-norm "$clip" \
    $( ((same_init)) && echo --init "$tmp/init-$seed.safetensors") | tail -n 1
}
field() { "$PYTHON" -c "import json, sys; print(json.loads(sys.argv[1])['$1'])" "$2"; }

dl_rates=() pt_rates=() dl_losses=() pt_losses=()
for ((i = 0; i < runs; i++)); do
  seed=$((quality ? i + 1 : 1)) # speed: the same run again; quality: seeds 1..N
  if ((same_init)); then # dltrain's initial parameters for this seed
    "$DLTRAIN" --model "$model" "${dl_sizes[@]}" --data "$tmp/corpus.bin" --batch "$batch" \
      --steps 0 --eval-batches 1 --seed "$seed" --device cpu --quiet \
      --save "$tmp/init-$seed.safetensors" >/dev/null 2>"$tmp/dl.err" ||
      { cat "$tmp/dl.err" >&2; exit 1; }
  fi
  a=$(dl) || { cat "$tmp/dl.err" >&2; exit 1; }
  b=$(pt)
  dl_rates+=("$(field tokens_per_s "$a")") pt_rates+=("$(field tokens_per_s "$b")")
  dl_losses+=("$(field val_loss "$a")") pt_losses+=("$(field val_loss "$b")")
  echo "run $((i + 1)): dlrt $(field tokens_per_s "$a") tokens/s, val loss $(field val_loss "$a");" \
       "pytorch $(field tokens_per_s "$b") tokens/s, val loss $(field val_loss "$b") (seed $seed)"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
m_dl=$(median "${dl_rates[@]}") m_pt=$(median "${pt_rates[@]}")
echo "$model batch $batch context $context, $steps steps, $threads threads, $runs runs alternated:"
echo "  dlrt    median $m_dl tokens/s"
echo "  pytorch median $m_pt tokens/s ($("$PYTHON" -c 'import torch; print(torch.__version__)'))"
awk -v a="$m_dl" -v b="$m_pt" 'BEGIN {printf "  ratio   %.2fx\n", a / b}'
if ((quality)); then
  mean() { printf '%s\n' "$@" | awk '{s += $1} END {printf "%.4f", s / NR}'; }
  m_a=$(mean "${dl_losses[@]}") m_b=$(mean "${pt_losses[@]}")
  echo "  val loss over seeds 1..$runs: dlrt mean $m_a, pytorch mean $m_b," \
       "difference $(awk -v a="$m_a" -v b="$m_b" 'BEGIN {printf "%.4f", a - b}') nats"
fi
