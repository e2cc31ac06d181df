#!/bin/sh
# test-gpt-torch.sh — dlrt's GPT against a PyTorch GPT-2 written out in
# tests/gpt_reference.py, in the manner of llm.c's test_gpt2.c: from the
# same initial parameters and the same batch (tests/gpt-dump), the logits,
# every parameter's gradient and the losses of 10 AdamW steps agree, on the
# cpu backend and on the OpenCL device (PoCL here) in fp32, and loosely in
# fp16 and bf16 on the cpu against fp32 PyTorch. Needs Debian's
# python3-torch (.ci/install-deps installs it): without it the points fail.

GPT_DUMP=${GPT_DUMP:-./tests/gpt-dump}
PYTHON=${PYTHON:-/usr/bin/python3}
srcdir=$(dirname "$0")
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT
POINTS=8 # per run: gpt-dump's, then gpt_reference.py's 7

runs="cpu:fp32"
if "${DLINFO:-./tools/dlinfo}" --device opencl:0 >/dev/null 2>&1; then
  runs="$runs opencl:0:fp32"
fi
runs="$runs cpu:fp16 cpu:bf16"
count=0
for r in $runs; do count=$((count + 1)); done
echo "1..$((count * POINTS))"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-gpt-torch.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

have_torch=yes
"$PYTHON" -c "import torch" 2>"$tmp/torch.err" || have_torch=no

for r in $runs; do
  precision=${r##*:}
  device=${r%:*}
  label="$device $precision"
  dump="$tmp/$(echo "$r" | tr : _).safetensors"
  if "$GPT_DUMP" "$device" "$dump" "$precision" >"$tmp/dump.out" 2>&1; then
    echo "ok - $label: gpt-dump ran the model, its gradients and 10 AdamW steps"
  else
    echo "not ok - $label: gpt-dump failed"
    sed 's/^/# /' "$tmp/dump.out"
  fi
  if [ $have_torch = no ]; then
    i=1
    while [ $i -lt $POINTS ]; do
      echo "not ok - $label: PyTorch is needed (apt-get install python3-torch): $(cat "$tmp/torch.err" | tail -n 1)"
      i=$((i + 1))
    done
    continue
  fi
  loose=
  [ "$precision" = fp32 ] || loose=--loose
  "$PYTHON" "$srcdir/gpt_reference.py" "$dump" "$label" $loose 2>"$tmp/py.err" ||
    sed 's/^/# /' "$tmp/py.err"
done
