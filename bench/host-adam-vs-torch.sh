#!/usr/bin/env bash
# host-adam-vs-torch.sh — the host optimizer (dlrt_host_optimizer_update, what
# --offload optimizer runs) against torch.optim.Adam on the CPU, on the same
# GPT-2-shaped tensors (bench/host-adam.c), the same threads, runs alternated
# (dlrt, torch, torch foreach, dlrt, ...): each side's median updates per
# second over the runs and their ratio (issue bar: at least 3x).
#
# Usage: bench/host-adam-vs-torch.sh [--runs N] [--threads T] [--layers L]
# Needs a build (HOST_ADAM: default ./bench/host-adam, made by
# `make bench/host-adam`) and Debian's python3-torch.
set -euo pipefail
runs=3 threads=2 layers=4
while (($#)); do
  case $1 in
  --runs) runs=$2; shift 2 ;;
  --threads) threads=$2; shift 2 ;;
  --layers) layers=$2; shift 2 ;;
  *) echo "usage: $0 [--runs N] [--threads T] [--layers L]" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
HOST_ADAM=${HOST_ADAM:-./bench/host-adam}
PYTHON=${PYTHON:-/usr/bin/python3}
field() { "$PYTHON" -c "import json, sys; print(json.loads(sys.argv[1])['$1'])" "$2"; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
d=() t=() f=()
for ((i = 1; i <= runs; i++)); do
  a=$("$HOST_ADAM" --threads "$threads" --layers "$layers")
  b=$("$PYTHON" "$here/host_adam_torch.py" --threads "$threads" --layers "$layers" --foreach 0)
  c=$("$PYTHON" "$here/host_adam_torch.py" --threads "$threads" --layers "$layers" --foreach 1)
  d+=("$(field updates_per_s "$a")") t+=("$(field updates_per_s "$b")") f+=("$(field updates_per_s "$c")")
  echo "run $i: dlrt $(field median_ms "$a") ms, torch $(field median_ms "$b") ms," \
       "torch foreach $(field median_ms "$c") ms per step of $(field params "$a") parameters"
done
md=$(median "${d[@]}") mt=$(median "${t[@]}") mf=$(median "${f[@]}")
echo "Adam over $(field params "$a") parameters in $(field tensors "$a") tensors, $threads threads, $runs runs alternated:"
echo "  dlrt host optimizer      $(printf '%.4g' "$md") updates/s"
echo "  torch.optim.Adam         $(printf '%.4g' "$mt") updates/s ($(field torch "$b"))"
echo "  torch.optim.Adam foreach $(printf '%.4g' "$mf") updates/s"
awk -v a="$md" -v b="$mt" -v c="$mf" 'BEGIN {best = b > c ? b : c; printf "  ratio to the faster torch: %.2fx\n", a / best}'
