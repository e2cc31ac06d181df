#!/usr/bin/env bash
# gpt-vs-transformers.sh — a GPT trained by dltrain, loaded into Hugging
# Face's transformers.GPT2LMHeadModel from its checkpoint (same names and
# layouts, load_state_dict), gives the same validation loss there within
# 1e-4 (bench/gpt_transformers.py). Trains gpt-mini on Debian's fortunes
# for --steps (default 200) first.
#
# Usage: bench/gpt-vs-transformers.sh [--steps N]
# Needs a build (DLTRAIN, DLRECORD), python3-torch and pip's transformers
# (PYTHON: an interpreter that imports both, e.g. a venv made with
# --system-site-packages and `pip install "transformers<4.40"`, the last
# series for torch 1.13).
set -euo pipefail
steps=200
[[ ${1:-} == --steps ]] && steps=$2
here=$(cd "$(dirname "$0")" && pwd)
DLTRAIN=${DLTRAIN:-./tools/dltrain}
DLRECORD=${DLRECORD:-./tools/dlrecord}
PYTHON=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpt-vs-transformers.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$DLRECORD" tokens /usr/share/games/fortunes "$tmp/corpus.bin" >&2
sizes=(--layers 4 --heads 4 --embd 128 --context 128 --vocab 256)
"$DLTRAIN" --model gpt-mini "${sizes[@]}" --data "$tmp/corpus.bin" --steps "$steps" \
  --eval-every "$steps" --eval-batches 20 --batch 32 --threads 2 --device cpu --quiet \
  --save "$tmp/gpt.safetensors" --json >"$tmp/dl.json"
val=$("$PYTHON" -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['val_loss'])" "$tmp/dl.json")
"$PYTHON" "$here/gpt_transformers.py" "$tmp/gpt.safetensors" "$tmp/corpus.bin" "$val" \
  "${sizes[@]}" --batch 32 --eval-batches 20
