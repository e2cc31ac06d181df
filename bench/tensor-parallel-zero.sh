#!/bin/sh
# tensor-parallel-zero.sh — the bars of ZeRO over the replicas of a
# tensor-parallel model (issue 22): gpt-mini on 2 x 2 MPI ranks
# (mpirun -np 4 --tensor-parallel 2) for --steps (50) with an evaluation
# after each, --zero 1, 2 and 3 against the same run without ZeRO (and with
# --extra options on both); prints per stage whether the 50 train and 50
# validation losses are the same floats (else the worst relative
# difference) and, from the trainer's figures (--json's "zero" object: the
# tensor bytes a rank holds between steps), the parameter, gradient and
# optimizer bytes per rank against the run without ZeRO. Run it from the
# build folder (needs a dltrain built with MPI, and mpirun).
#   --steps N (50) --batch B (8, per replica) --extra "OPTIONS" ("")
set -eu
DLTRAIN=${DLTRAIN:-./tools/dltrain}
steps=50 batch=8 extra=""
while [ $# -gt 0 ]; do
  case $1 in
  --steps) steps=$2; shift 2 ;;
  --batch) batch=$2; shift 2 ;;
  --extra) extra=$2; shift 2 ;;
  -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
  *) echo "tensor-parallel-zero.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
root=""
[ "$(id -u)" = 0 ] && root="--allow-run-as-root"
run() { # STAGE: the 2 x 2 run's JSON in $tmp/zSTAGE
  zero=""
  [ "$1" -gt 0 ] && zero="--zero $1"
  mpirun $root --oversubscribe -np 4 "$DLTRAIN" --model gpt-mini --steps "$steps" \
    --eval-every 1 --eval-batches 1 --threads 1 --json --quiet --batch "$batch" --device cpu \
    --tensor-parallel 2 $extra $zero </dev/null 2>/dev/null | tail -1 >"$tmp/z$1"
}
for z in 0 1 2 3; do run $z; done
echo "gpt-mini, mpirun -np 4 --tensor-parallel 2 (2 replicas x 2 shards), $steps steps," \
  "batch $batch per replica${extra:+, $extra}"
python3 - "$tmp" <<'PY'
import json, sys
runs = [json.loads(open("%s/z%d" % (sys.argv[1], z)).read()) for z in range(4)]
base = runs[0]
x = base["round_losses"] + base["round_val_losses"]
parts = ("param_bytes", "grad_bytes", "optimizer_bytes")
print("| run | losses against no ZeRO | parameters | gradients | optimizer | all three |")
print("|---|---|---|---|---|---|")
for z, r in enumerate(runs):
    y = r["round_losses"] + r["round_val_losses"]
    assert len(x) == len(y), (len(x), len(y))
    same = "bit for bit" if x == y else "%.2g" % max(abs(p - q) / abs(p) for p, q in zip(x, y))
    held = [r["zero"][p] for p in parts]
    full = [base["zero"][p] for p in parts]
    cells = ["%d (%.3fx)" % (h, h / f) for h, f in zip(held, full)]
    print("| %s | %s | %s | %.3fx |" % ("--zero %d" % z if z else "no ZeRO",
          "-" if z == 0 else same, " | ".join(cells), sum(held) / sum(full)))
PY
