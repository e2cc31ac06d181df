#!/bin/sh
# tensor-parallel-compose.sh — the bars of tensor parallelism composed with
# the rest (issue 22): gpt-mini for --steps (50) with an evaluation after
# each, every combination against its one-device reference (the same
# options; data x tensor parallel against one device on the replicas'
# whole batch); prints, per combination, the worst relative difference of
# the train and validation losses and the parameter bytes per peer against
# the whole model's. Run it from the build folder (mpirun cases need a
# dltrain built with MPI).
#   --steps N (50) --batch B (8) --devices A,B (cpu,opencl:0)
set -eu
DLTRAIN=${DLTRAIN:-./tools/dltrain}
steps=50 batch=8 devices=cpu,opencl:0
while [ $# -gt 0 ]; do
  case $1 in
  --steps) steps=$2; shift 2 ;;
  --batch) batch=$2; shift 2 ;;
  --devices) devices=$2; shift 2 ;;
  -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
  *) echo "tensor-parallel-compose.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common="--model gpt-mini --steps $steps --eval-every 1 --eval-batches 1 --threads 1 --json --quiet"
root=""
[ "$(id -u)" = 0 ] && root="--allow-run-as-root"
mpi="mpirun $root --oversubscribe -np"
wide=$((batch * 2))
# name | reference options | split command (a prefix before dltrain, then its options)
cat >"$tmp/cases" <<EOF
tp $devices|--batch $batch|--batch $batch --tensor-parallel $devices
tp $devices --accum 2|--batch $batch --accum 2|--batch $batch --accum 2 --tensor-parallel $devices
tp $devices --clip-norm 0.1|--batch $batch --clip-norm 0.1|--batch $batch --clip-norm 0.1 --tensor-parallel $devices
tp $devices --checkpoint blocks|--batch $batch|--batch $batch --checkpoint blocks --tensor-parallel $devices
tp $devices fp16 (scale 1024)|--batch $batch --precision fp16 --loss-scale 1024|--batch $batch --precision fp16 --loss-scale 1024 --tensor-parallel $devices
mpirun -np 4 --tensor-parallel 2 (2 x 2)|--batch $wide|MPI4 --batch $batch --device cpu --tensor-parallel 2
mpirun -np 2 --tensor-parallel $devices|--batch $wide|MPI2 --batch $batch --tensor-parallel $devices
mpirun -np 4 --tensor-parallel 2 --accum 2 --clip-norm 0.1 --checkpoint blocks|--batch $wide --accum 2 --clip-norm 0.1|MPI4 --batch $batch --accum 2 --clip-norm 0.1 --checkpoint blocks --device cpu --tensor-parallel 2
EOF
echo "gpt-mini, $steps steps, batch $batch per replica"
echo "| combination | worst relative difference ($steps train + $steps validation losses) | parameter bytes per peer (of the whole) |"
echo "|---|---|---|"
while IFS='|' read -r name ref split; do
  "$DLTRAIN" $common --device cpu $ref </dev/null 2>/dev/null | tail -1 >"$tmp/ref"
  case $split in
  MPI4*) $mpi 4 "$DLTRAIN" $common ${split#MPI4} </dev/null 2>/dev/null | tail -1 >"$tmp/split" ;;
  MPI2*) $mpi 2 "$DLTRAIN" $common ${split#MPI2} </dev/null 2>/dev/null | tail -1 >"$tmp/split" ;;
  *) "$DLTRAIN" $common $split </dev/null 2>/dev/null | tail -1 >"$tmp/split" ;;
  esac
  python3 - "$tmp/ref" "$tmp/split" "$name" <<'PY'
import json, sys
a, b = (json.loads(open(p).read()) for p in sys.argv[1:3])
x = a["round_losses"] + a["round_val_losses"]
y = b["round_losses"] + b["round_val_losses"]
assert len(x) == len(y), (len(x), len(y))
worst = max(abs(p - q) / abs(p) for p, q in zip(x, y))
peers = [p["param_bytes"] for p in b["tensor_parallel"]]
print("| %s | %.2g (last val %.7f vs %.7f) | %s of %d (%.3fx) |" % (
    sys.argv[3], worst, y[-1], x[-1], ", ".join(map(str, peers)), b["param_bytes"],
    max(peers) / b["param_bytes"]))
PY
done <"$tmp/cases"
