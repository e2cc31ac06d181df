#!/bin/sh
# compare-builds.sh — two builds of dltrain side by side: whether their
# losses are the same bits, and their training throughput as a ratio.
#   compare-builds.sh OLD_DLTRAIN NEW_DLTRAIN [--reps R (5)] [--limit N (6400)]
#                     [--models "mlp cnn"] [--devices "cpu opencl:0"] [--seeds "1 7"]
# For each model and device: every seed runs once on each build with
# --deterministic --threads 2, and the epoch losses, test loss and accuracy
# of the --json lines must be equal as printed, and the checkpoints each
# saves (--save: every weight and optimizer moment) equal byte for byte. Then R runs of each build, alternated (old, new, new,
# old, ...) so that a shared machine's drift hits both sides alike; the
# median of train_images_per_s per side and new/old are printed.
# Exits 1 when any loss differs.
set -eu
[ $# -ge 2 ] || { sed -n '2,12p' "$0"; exit 2; }
old=$1 new=$2
shift 2
reps=5 limit=6400 models="mlp cnn" devices="cpu opencl:0" seeds="1 7"
while [ $# -gt 0 ]; do
  case $1 in
  --reps) reps=$2; shift 2 ;;
  --limit) limit=$2; shift 2 ;;
  --models) models=$2; shift 2 ;;
  --devices) devices=$2; shift 2 ;;
  --seeds) seeds=$2; shift 2 ;;
  *) echo "compare-builds.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/compare-builds.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
field() { # FILE KEYS: the values of those keys in the JSON line
  python3 -c "import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(' '.join(repr(d[k]) for k in sys.argv[2:]))" "$@"
}
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
status=0
printf '%-5s %-9s %-10s %12s %12s %7s\n' model device losses "old img/s" "new img/s" new/old
for model in $models; do
  for dev in $devices; do
    common="--model $model --device $dev --limit $limit --deterministic --threads 2 --json --quiet"
    same=yes
    for seed in $seeds; do
      "$old" $common --seed "$seed" --save "$tmp/o.st" >"$tmp/o" 2>"$tmp/oe" ||
        { cat "$tmp/oe" >&2; exit 1; }
      "$new" $common --seed "$seed" --save "$tmp/n.st" >"$tmp/n" 2>"$tmp/ne" ||
        { cat "$tmp/ne" >&2; exit 1; }
      if ! cmp -s "$tmp/o.st" "$tmp/n.st"; then
        same=DIFFER status=1
        echo "# seed $seed: the checkpoints differ" >&2
      fi
      keys="epoch_losses test_loss test_accuracy final_loss"
      if [ "$(field "$tmp/o" $keys)" != "$(field "$tmp/n" $keys)" ]; then
        same=DIFFER status=1
        echo "# seed $seed: old $(field "$tmp/o" $keys) / new $(field "$tmp/n" $keys)" >&2
      fi
    done
    : >"$tmp/old" ; : >"$tmp/new"
    i=0
    while [ $i -lt "$reps" ]; do
      if [ $((i % 2)) -eq 0 ]; then first=$old firstout=old second=$new secondout=new
      else first=$new firstout=new second=$old secondout=old; fi
      "$first" $common >"$tmp/r" 2>/dev/null && field "$tmp/r" train_images_per_s >>"$tmp/$firstout"
      "$second" $common >"$tmp/r" 2>/dev/null && field "$tmp/r" train_images_per_s >>"$tmp/$secondout"
      i=$((i + 1))
    done
    mo=$(median <"$tmp/old") mn=$(median <"$tmp/new")
    printf '%-5s %-9s %-10s %12.1f %12.1f %7.3f\n' "$model" "$dev" "$same" "$mo" "$mn" \
      "$(echo "$mn $mo" | awk '{print $1 / $2}')"
  done
done
exit $status
