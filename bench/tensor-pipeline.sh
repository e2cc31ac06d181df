#!/bin/sh
# tensor-pipeline.sh — the bars of tensor x pipeline parallelism (issue 22):
# gpt-mini for --steps (50) with an evaluation after each, each run of
# mpirun -np N dltrain --pipeline A,B,... --tensor-parallel T against its
# one-device reference (the same options; with N = T x R ranks, R data-
# parallel replicas, against one device on the replicas' whole batch);
# prints, per run, the worst relative difference of the train and
# validation losses and rank 0's parameter bytes per stage against the
# whole model's. Run it from the build folder (dltrain built with MPI).
#   --steps N (50) --batch B (8)
set -eu
DLTRAIN=${DLTRAIN:-./tools/dltrain}
steps=50 batch=8
while [ $# -gt 0 ]; do
  case $1 in
  --steps) steps=$2; shift 2 ;;
  --batch) batch=$2; shift 2 ;;
  -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
  *) echo "tensor-pipeline.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common="--model gpt-mini --steps $steps --eval-every 1 --eval-batches 1 --threads 1 --json --quiet"
root=""
[ "$(id -u)" = 0 ] && root="--allow-run-as-root"
mpi="mpirun $root --oversubscribe -np"
wide=$((batch * 2))
opts="--accum 2 --clip-norm 0.1 --checkpoint blocks"
fp16="--precision fp16 --loss-scale 1024"
# name | reference options | ranks | the composition's options
cat >"$tmp/cases" <<EOF
-np 2 --pipeline cpu,cpu --tensor-parallel 2|--batch $batch|2|--batch $batch --pipeline cpu,cpu --tensor-parallel 2
-np 2 --pipeline cpu,cpu,cpu --tensor-parallel 2|--batch $batch|2|--batch $batch --pipeline cpu,cpu,cpu --tensor-parallel 2
-np 4 --pipeline cpu,cpu --tensor-parallel 2 (2 replicas)|--batch $wide|4|--batch $batch --pipeline cpu,cpu --tensor-parallel 2
-np 4 --pipeline cpu,cpu --tensor-parallel 4|--batch $batch|4|--batch $batch --pipeline cpu,cpu --tensor-parallel 4
-np 2 ... $opts|--batch $batch $opts|2|--batch $batch --pipeline cpu,cpu --tensor-parallel 2 $opts
-np 2 ... $fp16|--batch $batch $fp16|2|--batch $batch --pipeline cpu,cpu --tensor-parallel 2 $fp16
EOF
echo "gpt-mini, $steps steps, batch $batch per replica"
echo "| run | worst relative difference ($steps train + $steps validation losses) | parameter bytes per stage of a rank (of the whole) |"
echo "|---|---|---|"
while IFS='|' read -r name ref np split; do
  "$DLTRAIN" $common --device cpu $ref </dev/null 2>/dev/null | tail -1 >"$tmp/ref"
  $mpi "$np" "$DLTRAIN" $common $split </dev/null 2>/dev/null | tail -1 >"$tmp/split"
  python3 - "$tmp/ref" "$tmp/split" "$name" <<'PY'
import json, sys
a, b = (json.loads(open(p).read()) for p in sys.argv[1:3])
x = a["round_losses"] + a["round_val_losses"]
y = b["round_losses"] + b["round_val_losses"]
assert len(x) == len(y), (len(x), len(y))
worst = max(abs(p - q) / abs(p) for p, q in zip(x, y))
stages = [s["param_bytes"] for s in b["stages"]]
print("| %s | %.2g (last val %.7f vs %.7f) | %s of %d (%.3fx) |" % (
    sys.argv[3], worst, y[-1], x[-1], ", ".join(map(str, stages)), b["param_bytes"],
    max(stages) / b["param_bytes"]))
PY
done <"$tmp/cases"
