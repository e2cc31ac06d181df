#!/bin/sh
# memory-techniques.sh — peak device memory and speed of the memory
# techniques side by side in one run: cnn at batch 256 without
# checkpointing, with --checkpoint sqrt, in mixed precision (--precision
# fp16 and bf16), and batch 64 x --accum 4 (the same 256 images per update). Runs alternate, --reps times each; prints the
# median images/s, the measured peak, and each against the plain run as a
# ratio. Run it from the build folder.
#   --model M (cnn) --batch N (256) --device SPEC (cpu) --reps R (3)
#   --limit N (2560 training images per run) --threads N (2)
set -eu
DLTRAIN=${DLTRAIN:-./tools/dltrain}
model=cnn batch=256 device=cpu reps=3 limit=2560 threads=2
while [ $# -gt 0 ]; do
  case $1 in
  --model) model=$2; shift 2 ;;
  --batch) batch=$2; shift 2 ;;
  --device) device=$2; shift 2 ;;
  --reps) reps=$2; shift 2 ;;
  --limit) limit=$2; shift 2 ;;
  --threads) threads=$2; shift 2 ;;
  -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
  *) echo "memory-techniques.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
common="--data generated --model $model --device $device --limit $limit --threads $threads --json --quiet"
micro=$((batch / 4))
i=0
while [ $i -lt "$reps" ]; do
  "$DLTRAIN" $common --batch "$batch" --checkpoint none 2>/dev/null | tail -1 >>"$tmp/plain"
  "$DLTRAIN" $common --batch "$batch" --checkpoint sqrt 2>/dev/null | tail -1 >>"$tmp/sqrt"
  "$DLTRAIN" $common --batch "$batch" --precision fp16 2>/dev/null | tail -1 >>"$tmp/fp16"
  "$DLTRAIN" $common --batch "$batch" --precision bf16 2>/dev/null | tail -1 >>"$tmp/bf16"
  "$DLTRAIN" $common --batch "$micro" --accum 4 2>/dev/null | tail -1 >>"$tmp/accum"
  i=$((i + 1))
done
python3 - "$tmp" "$model" "$batch" "$device" <<'PY'
import json, statistics, sys
tmp, model, batch, device = sys.argv[1:]
rows = {}
for name in ("plain", "sqrt", "fp16", "bf16", "accum"):
    runs = [json.loads(l) for l in open(f"{tmp}/{name}")]
    rows[name] = (statistics.median(r["train_images_per_s"] for r in runs),
                  max(r["peak_device_bytes"] for r in runs),
                  max(r["planned_peak_bytes"] for r in runs))
p_speed, p_peak, _ = rows["plain"]
labels = {"plain": f"batch {batch}", "sqrt": f"batch {batch}, --checkpoint sqrt",
          "fp16": f"batch {batch}, --precision fp16", "bf16": f"batch {batch}, --precision bf16",
          "accum": f"batch {int(batch) // 4} x --accum 4"}
print(f"{model} on {device}, {len(runs)} runs each, alternated")
print(f"{'':34} {'images/s':>10} {'peak MiB':>9} {'planned':>9} {'step time':>10} {'peak':>6}")
for name, (speed, peak, planned) in rows.items():
    print(f"{labels[name]:34} {speed:10.0f} {peak / 2**20:9.1f} {planned / 2**20:9.1f} "
          f"{p_speed / speed:9.2f}x {peak / p_peak:6.2f}")
PY
