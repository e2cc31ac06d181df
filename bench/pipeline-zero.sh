#!/bin/sh
# pipeline-zero.sh — the bars of ZeRO over a pipeline's data-parallel ranks
# (issue 22): gpt-mini on R MPI ranks (mpirun -np R --pipeline A,B,...) for
# --steps (50) with an evaluation after each, --zero 1, 2 and 3 against the
# same run without ZeRO (and with --extra options on all); prints per stage
# whether the train and validation losses are the same floats (else the
# worst relative difference and the first step that differs) and, from the
# trainer's figures (--json's "zero" object: the tensor bytes a rank's
# stages hold between steps), the parameter, gradient and optimizer bytes
# per rank against the run without ZeRO. With --tensor-parallel N (ranks N
# x R) every stage is split over N ranks too and each stage's shard is
# sharded over its R replicas (the bytes: rank 0's stages). Run it from the
# build folder (needs a dltrain built with MPI, and mpirun).
#   --ranks R (2) --pipeline A,B,... (cpu,cpu) --steps N (50)
#   --batch B (4, per rank) --context T (64) --data FILE (gpt-mini's own)
#   --extra "OPTIONS" ("") --tensor-parallel N (none)
set -eu
DLTRAIN=${DLTRAIN:-./tools/dltrain}
ranks=2 pipeline=cpu,cpu steps=50 batch=4 context=64 data="" extra="" tp=""
while [ $# -gt 0 ]; do
  case $1 in
  --ranks) ranks=$2; shift 2 ;;
  --pipeline) pipeline=$2; shift 2 ;;
  --steps) steps=$2; shift 2 ;;
  --batch) batch=$2; shift 2 ;;
  --context) context=$2; shift 2 ;;
  --data) data=$2; shift 2 ;;
  --extra) extra=$2; shift 2 ;;
  --tensor-parallel) tp=$2; shift 2 ;;
  -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
  *) echo "pipeline-zero.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
root=""
[ "$(id -u)" = 0 ] && root="--allow-run-as-root"
run() { # STAGE: the run's JSON in $tmp/zSTAGE
  zero=""
  [ "$1" -gt 0 ] && zero="--zero $1"
  # shellcheck disable=SC2086
  mpirun $root --oversubscribe -np "$ranks" "$DLTRAIN" --model gpt-mini ${data:+--data "$data"} \
    --context "$context" --steps "$steps" --eval-every 1 --eval-batches 1 --threads 1 --json \
    --quiet --batch "$batch" --pipeline "$pipeline" ${tp:+--tensor-parallel "$tp"} $extra \
    $zero </dev/null 2>/dev/null |
    tail -1 >"$tmp/z$1"
}
for z in 0 1 2 3; do run $z; done
echo "gpt-mini, mpirun -np $ranks --pipeline $pipeline${tp:+ --tensor-parallel $tp}," \
  "$steps steps, context $context, batch $batch per rank${extra:+, $extra}"
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
    same = "bit for bit"
    if x != y:
        steps = len(base["round_losses"])
        first = min(i % steps for i, (p, q) in enumerate(zip(x, y)) if p != q) + 1
        worst = max(abs(p - q) / abs(p) for p, q in zip(x, y))
        same = "%.2g (from step %d)" % (worst, first)
    if "skipped_steps" in r and r["skipped_steps"]:
        same += ", %d updates skipped (no ZeRO: %d)" % (r["skipped_steps"], base["skipped_steps"])
    held = [r["zero"][p] for p in parts]
    full = [base["zero"][p] for p in parts]
    cells = ["%d (%.3fx)" % (h, h / f) for h, f in zip(held, full)]
    print("| %s | %s | %s | %.3fx |" % ("--zero %d" % z if z else "no ZeRO",
          "-" if z == 0 else same, " | ".join(cells), sum(held) / sum(full)))
PY
