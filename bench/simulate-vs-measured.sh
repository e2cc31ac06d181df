#!/usr/bin/env bash
# simulate-vs-measured.sh — dltrain --plan --simulate this (the step
# replayed on this machine's measured figures) against the step a short
# dltrain run measures, side by side, runs alternated (prediction, run,
# prediction, run, ...), for mlp, cnn and gpt-mini, without and with a
# device budget. The measured step is the batch over the run's steady-state
# throughput (train_images_per_s, or tokens_per_s for a GPT); each side's
# figure is the median over the runs, and "paired" the median of each
# run's prediction over its own measured run; the bar (issue 20) is within
# 10%.
# Each prediction profiles the device afresh (DLRT_PROFILE_FRESH=1), so
# that it sees the machine its neighbouring run sees, not a cached profile
# taken under another load.
#
# Usage: bench/simulate-vs-measured.sh [--runs N] [--device D] [--only NAME]
# Needs a build (DLTRAIN: default ./tools/dltrain; run from the build folder).
set -euo pipefail
runs=3 device=cpu only=
while (($#)); do
  case $1 in
  --runs) runs=$2; shift 2 ;;
  --device) device=$2; shift 2 ;;
  --only) only=$2; shift 2 ;;
  *) echo "usage: $0 [--runs N] [--device D] [--only NAME]" >&2; exit 2 ;;
  esac
done
DLTRAIN=${DLTRAIN:-./tools/dltrain}
# name | batch samples per step (tokens for a GPT) | dltrain arguments
# Each measured run takes about a second or more of steady steps (mlp 200
# steps, cnn 40, gpt-mini 16): a run of a tenth of a second moved 20-40%
# between runs on a shared 2-core machine, one time slice lost to another
# process being a large part of it.
cases=(
  "mlp|64|--model mlp --data generated --limit 12800"
  "mlp 5M offload|64|--model mlp --data generated --limit 12800 --mem-limit 5M --offload optimizer"
  "cnn|64|--model cnn --data generated --limit 2560"
  "cnn 8M|64|--model cnn --data generated --limit 2560 --mem-limit 8M"
  "gpt-mini|4096|--model gpt-mini --steps 16 --eval-every 16 --eval-batches 1"
  "gpt-mini 74M|4096|--model gpt-mini --steps 16 --eval-every 16 --eval-batches 1 --mem-limit 74M"
)
median() {
  sort -g | awk '{v[NR] = $1}
    END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
printf '%-18s %12s %12s %8s %8s   (%s, %d runs alternated, load %s)\n' case predicted measured \
  ratio paired \
  "$device" "$runs" "$(cut -d' ' -f1 /proc/loadavg)"
for c in "${cases[@]}"; do
  IFS='|' read -r name per args <<<"$c"
  [[ -n $only && $name != "$only"* ]] && continue
  pred=() meas=()
  for ((r = 0; r < runs; r++)); do
    # shellcheck disable=SC2086
    p=$(DLRT_PROFILE_FRESH=1 $DLTRAIN --plan --simulate this --device "$device" $args --json 2>/dev/null |
      python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["simulate"]["step_s"])')
    # shellcheck disable=SC2086
    m=$($DLTRAIN --device "$device" $args --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
rate = d.get("tokens_per_s") or d["train_images_per_s"]
print(float(sys.argv[1]) / rate)' "$per")
    pred+=("$p") meas+=("$m")
  done
  P=$(printf '%s\n' "${pred[@]}" | median) M=$(printf '%s\n' "${meas[@]}" | median)
  # Each run's prediction over the run beside it: the median of those too,
  # less moved by the machine drifting between rounds.
  R=$(for ((r = 0; r < runs; r++)); do echo "${pred[r]} / ${meas[r]}" | bc -l; done | median)
  printf '%-18s %9.2f ms %9.2f ms %8.3f %8.3f   predicted %s; measured %s (ms)\n' "$name" \
    "$(echo "$P * 1000" | bc -l)" "$(echo "$M * 1000" | bc -l)" "$(echo "$P / $M" | bc -l)" "$R" \
    "$(printf '%s\n' "${pred[@]}" | awk '{printf "%s%.2f", (NR > 1 ? " " : ""), $1 * 1000}')" \
    "$(printf '%s\n' "${meas[@]}" | awk '{printf "%s%.2f", (NR > 1 ? " " : ""), $1 * 1000}')"
done
