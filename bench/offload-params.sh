#!/usr/bin/env bash
# offload-params.sh — a GPT larger than the device budget on cpu: the
# unlimited run against --offload params and --offload optimizer under
# --mem-limit with a link model, runs alternated (free, params, optimizer,
# free, ...): each side's median tokens/s over the runs, its ratio to the
# unlimited run (issue 21's bar: at least 0.7x), whether its losses (step
# lines and val loss) equal the unlimited run's, the device peak, the
# traffic, and the process's CPU time against its wall time (how the device
# threads and the host update thread shared the cores). Sides ending in -bf16
# run --precision bf16 and compare with free-bf16 (the unlimited bf16 run);
# params-disk streams with --host-limit at a quarter of the Adam state (8
# bytes a parameter), 2 bytes a parameter: below the fp32 masters' 4, so
# the masters go to the disk tier ($TMPDIR) with the state (--host-limit
# holds both); params-disk-host at the masters and a quarter of the state
# (6 bytes a parameter): the masters stay on the host, the state beyond
# goes to disk; params-disk8 at an eighth (below gpt2-medium's embedding's
# state alone: it passes through the slots in chunks). The disk sides
# compare their losses with the host-only streamed run (params, or
# params-bf16) when it ran, else with the unlimited one.
#
# Usage: bench/offload-params.sh [--model M] [--limit SIZE] [--runs N] [--steps S]
#        [--link SPEC] [--context T] [--batch B] [--threads N] [--sides "free params ..."]
# (sides: free params optimizer free-bf16 params-bf16 params-disk
# params-disk-host params-disk-bf16 params-disk8; default free params
# optimizer free-bf16 params-bf16 params-disk)
# From the build folder (DLTRAIN: default ./tools/dltrain); the tokens are
# generated text (a fixed seed), the same for every run.
set -euo pipefail
model=gpt2-medium limit=1G runs=3 steps=4 link=16GB/s context=64 batch=4 threads=2
sides="free params optimizer free-bf16 params-bf16 params-disk"
while (($#)); do
  case $1 in
  --model) model=$2; shift 2 ;;
  --limit) limit=$2; shift 2 ;;
  --runs) runs=$2; shift 2 ;;
  --steps) steps=$2; shift 2 ;;
  --link) link=$2; shift 2 ;;
  --context) context=$2; shift 2 ;;
  --batch) batch=$2; shift 2 ;;
  --threads) threads=$2; shift 2 ;;
  --sides) sides=$2; shift 2 ;;
  *) echo "usage: $0 [--model M] [--limit SIZE] [--runs N] [--steps S] [--link SPEC]" \
          "[--context T] [--batch B] [--threads N] [--sides LIST]" >&2; exit 2 ;;
  esac
done
DLTRAIN=${DLTRAIN:-./tools/dltrain}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/offload-params.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
python3 -c "
import random
r = random.Random(5)
words = 'the of and to in is that it was for on are as with his they at be this from'.split()
lines = []
while sum(map(len, lines)) < 200000:
    lines.append(' '.join(r.choice(words) for _ in range(r.randint(4, 14))).capitalize() + '.')
open('$tmp/corpus.txt', 'w').write('\n'.join(lines) + '\n')
"
common=(--model "$model" --context "$context" --batch "$batch" --steps "$steps"
        --eval-every "$steps" --eval-batches 1 --device cpu --threads "$threads"
        --data "$tmp/corpus.txt" --json)
read -r -a sides <<<"$sides"
# A quarter of the Adam state: the parameter count from --plan.
params=$("$DLTRAIN" "${common[@]}" --plan | python3 -c "import json, sys
print(json.loads(sys.stdin.read().splitlines()[-1])['plan']['params'])")
quarter=$((params * 8 / 4))
args_free=()
args_params=(--mem-limit "$limit" --offload params --link "$link")
args_optimizer=(--mem-limit "$limit" --offload optimizer --link "$link")
args_free_bf16=(--precision bf16)
args_params_bf16=(--precision bf16 --mem-limit "$limit" --offload params --link "$link")
args_params_disk=(--mem-limit "$limit" --offload params --link "$link" --host-limit "$quarter")
args_params_disk8=(--mem-limit "$limit" --offload params --link "$link"
                   --host-limit "$((quarter / 2))")
args_params_disk_host=(--mem-limit "$limit" --offload params --link "$link"
                       --host-limit "$((params * 4 + quarter))")
args_params_disk_bf16=(--precision bf16 "${args_params_disk[@]}")
echo "$model: $params parameters; params-disk: --host-limit $quarter (a quarter of the Adam" \
     "state, below the masters' $((params * 4))); params-disk-host: --host-limit" \
     "$((params * 4 + quarter)) (the masters and a quarter); params-disk8: --host-limit" \
     "$((quarter / 2)) (an eighth)"
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
declare -A rates cpu
for ((i = 1; i <= runs; i++)); do
  for side in "${sides[@]}"; do
    declare -n extra="args_${side//-/_}"
    if ! /usr/bin/time -f '%e %U %S' -o "$tmp/$side.$i.time" \
      "$DLTRAIN" "${common[@]}" "${extra[@]}" >"$tmp/$side.$i.json" 2>"$tmp/$side.$i.err"; then
      echo "run $i $side failed: $(grep -v '^Command exited' "$tmp/$side.$i.err" | tail -n 1)" >&2
      exit 1
    fi
    rate=$(python3 -c "import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1]); print(d['tokens_per_s'])" \
      "$tmp/$side.$i.json")
    read -r wall user sys <"$tmp/$side.$i.time"
    rates[$side]="${rates[$side]:-} $rate"
    cpu[$side]="${cpu[$side]:-} $(awk -v w="$wall" -v u="$user" -v s="$sys" 'BEGIN {print (u + s) / w}')"
    echo "run $i $side: $rate tokens/s, wall $wall s, user $user s, sys $sys s"
  done
done
# Each side against the unlimited run of its precision (when it ran).
reference() {
  case $1 in
  params-disk*-bf16) [ -n "${rates[params-bf16]:-}" ] && echo params-bf16 || echo free-bf16 ;;
  params-disk*) [ -n "${rates[params]:-}" ] && echo params || echo free ;;
  *-bf16) echo free-bf16 ;;
  *) echo free ;;
  esac
}
echo "$model, context $context, batch $batch, $steps steps, $threads threads, $runs runs alternated:"
for side in "${sides[@]}"; do
  r=$(median ${rates[$side]})
  c=$(median ${cpu[$side]})
  ref=$(reference "$side")
  if [ -z "${rates[$ref]:-}" ]; then ref=$side; fi
  free_rate=$(median ${rates[$ref]})
  same=$(python3 -c "import json, re, sys
def losses(p):
    steps = [m for l in open(p + '.err') if l.startswith('step ') for m in re.findall(r'loss ([0-9.]+)', l)]
    return steps, json.loads(open(p + '.json').read().splitlines()[-1])['val_loss']
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print('same losses as %s' % sys.argv[3] if a == b and a[0] else 'LOSSES DIFFER %s %s' % (a, b))" \
    "$tmp/$ref.1" "$tmp/$side.1" "$ref")
  info=$(python3 -c "import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
s = d.get('stream') or {}
disk = ''
if s.get('disk_read_bytes'):
    disk = ', %.2f GiB read from disk in the run (%.2f by the fp32 fetches of masters)' % (
        s['disk_read_bytes'] / 2**30, s.get('disk_fetch_read_bytes', 0) / 2**30)
print(('peak %.0f MiB of %s planned %.0f MiB, %.2f GiB fetched, %.2f GiB off the device, '
       '%.2f GiB to disk (last stretch)%s') % (
    d['peak_device_bytes'] / 2**20, 'a budget of %.0f MiB,' % (d['mem_limit'] / 2**20) if d['mem_limit'] else 'no budget,',
    d['planned_peak_bytes'] / 2**20, d['fetched_bytes'] / 2**30, d['spilled_bytes'] / 2**30,
    d['disk_written_bytes'] / 2**30, disk))" "$tmp/$side.1.json")
  printf '  %-11s %8.2f tokens/s  %.2fx of %s  cpu %.2f cores  %s; %s\n' "$side" "$r" \
    "$(awk -v a="$r" -v b="$free_rate" 'BEGIN {print a / b}')" "$ref" "$c" "$same" "$info"
done
