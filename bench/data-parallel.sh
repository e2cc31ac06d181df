#!/bin/sh
# data-parallel.sh — data parallelism in one process, side by side in one
# run: MODEL trained on each device alone and on all of them together
# (dltrain --devices), alternately, --reps times each; prints the median
# images/s of each, the together/fastest-alone ratio, and how far the
# losses of the parallel run are from the first device's (relative). Run
# it from the build folder.
#   --devices A,B (cpu,opencl:0) --model M (mlp) --reps R (3) --limit N (6400)
set -eu
DLTRAIN=${DLTRAIN:-./tools/dltrain}
devices=cpu,opencl:0 model=mlp reps=3 limit=6400
while [ $# -gt 0 ]; do
  case $1 in
  --devices) devices=$2; shift 2 ;;
  --model) model=$2; shift 2 ;;
  --reps) reps=$2; shift 2 ;;
  --limit) limit=$2; shift 2 ;;
  -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
  *) echo "data-parallel.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common="--data generated --model $model --limit $limit --json --quiet"
i=0
while [ $i -lt "$reps" ]; do
  for d in $(echo "$devices" | tr ',' ' '); do
    "$DLTRAIN" $common --device "$d" 2>/dev/null | tail -1 >>"$tmp/alone-$d"
  done
  "$DLTRAIN" $common --devices "$devices" 2>>"$tmp/together.err" | tail -1 >>"$tmp/together"
  i=$((i + 1))
done
python3 - "$tmp" "$devices" "$model" <<'PY'
import json, os, statistics, sys
tmp, devices, model = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
load = lambda p: [json.loads(l) for l in open(p)]
alone = {d: load(os.path.join(tmp, "alone-" + d)) for d in devices}
together = load(os.path.join(tmp, "together"))
med = lambda runs: statistics.median(r["train_images_per_s"] for r in runs)
print(f"{model}, {len(together)} runs each, alternated")
for d in devices:
    print(f"  {d:24} {med(alone[d]):10.0f} images/s alone")
best = max(med(alone[d]) for d in devices)
print(f"  {'together':24} {med(together):10.0f} images/s  ({med(together) / best:.2f}x the fastest alone)")
ref = alone[devices[0]][0]
worst = max(abs(a - b) / abs(a) for a, b in zip(ref["epoch_losses"] + [ref["test_loss"]],
                                                together[0]["epoch_losses"] + [together[0]["test_loss"]]))
print(f"  losses against {devices[0]} alone: largest relative difference {worst:.2e}")
splits = [l for l in open(os.path.join(tmp, "together.err")) if l.startswith("devices")]
if splits:
    print("  split:", splits[-1].split(None, 1)[1].strip())
PY
