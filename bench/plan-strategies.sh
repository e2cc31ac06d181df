#!/bin/sh
# plan-strategies.sh — issue 20's planner bars, measured side by side in one
# run: for each model (gpt-mini, cnn; or mlp), link (h200-pcie5, 16GB/s) and budget
# (50%, 25%, 10% of the unlimited run's measured peak), dltrain
# --plan-strategy auto against each pure strategy (belady, swap,
# recompute) and the unlimited run, in alternating rounds; prints the
# median measured step, the planner's predicted step and their ratio, each
# against the best pure strategy and the unlimited step, the megabytes
# that crossed the link a step (both ways, the spill pool's count: the
# first step's fetch of the state spread over the steps), and whether the
# saved parameters are the same bytes as the unlimited run's. Strategies the
# planner's model says do not fit are not run; nor those it predicts to
# take over --max-run seconds (said so in the table, with the prediction).
# The mlp's and cnn's budgeted runs offload the optimizer. A fraction over
# 100 prices and runs a budget above the peak (nothing needs to spill).
# The node profile is shared between runs (a DLRT_PROFILE_CACHE folder of
# its own). Run it from the build folder.
#   --models LIST (gpt-mini,cnn) --links LIST (h200-pcie5,16GB/s)
#   --fractions LIST (50,25,10) --rounds R (2) --threads N (1)
#   --steps N (GPT steps per run, 10) --limit N (mlp, cnn images per run, 640)
#   --device SPEC (cpu) --max-run S (150) --out FILE (JSON lines of every run)
set -eu
DLTRAIN=${DLTRAIN:-./tools/dltrain}
models=gpt-mini,cnn links=h200-pcie5,16GB/s fractions=50,25,10 rounds=2 threads=1
steps=10 limit=640 device=cpu max_run=150 out=
while [ $# -gt 0 ]; do
  case $1 in
  --models) models=$2; shift 2 ;;
  --links) links=$2; shift 2 ;;
  --fractions) fractions=$2; shift 2 ;;
  --rounds) rounds=$2; shift 2 ;;
  --threads) threads=$2; shift 2 ;;
  --steps) steps=$2; shift 2 ;;
  --limit) limit=$2; shift 2 ;;
  --device) device=$2; shift 2 ;;
  --max-run) max_run=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
  *) echo "plan-strategies.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
DLTRAIN=$DLTRAIN python3 - "$tmp" "$models" "$links" "$fractions" "$rounds" "$threads" \
  "$steps" "$limit" "$device" "$max_run" "$out" <<'PY'
import json, os, statistics, subprocess, sys
(tmp, models, links, fractions, rounds, threads, steps, limit, device, max_run,
 out) = sys.argv[1:]
rounds, steps, max_run = int(rounds), int(steps), float(max_run)
dltrain = os.environ["DLTRAIN"]
env = dict(os.environ, DLRT_PROFILE_CACHE=os.path.join(tmp, "profiles"))
for k in ("DLRT_LINK", "DLRT_PLAN_STRATEGY", "DLRT_MEM_LIMIT"):
    env.pop(k, None)
os.makedirs(env["DLRT_PROFILE_CACHE"])
log = open(out, "w") if out else None
pure = ["belady", "swap", "recompute"]

def args_of(model):
    common = ["--device", device, "--threads", threads, "--json", "--quiet"]
    if model.startswith("gpt"):
        return ["--model", model, "--steps", str(steps), "--eval-every", str(steps),
                "--eval-batches", "1"] + common
    # mlp, cnn: generated images, an epoch of `limit`
    return ["--model", model, "--data", "generated", "--limit", limit, "--epochs", "1"] + common

def run(args, save):
    p = subprocess.run([dltrain] + args + ["--save", save], env=env, capture_output=True,
                       text=True)
    line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "{}"
    try:
        d = json.loads(line)
    except ValueError:
        d = {}
    d["_rc"], d["_err"] = p.returncode, p.stderr.strip().splitlines()[-1:] or [""]
    if log:
        log.write(json.dumps({"args": args, "result": d}) + "\n")
    return d

def step_ms(d, model, batch):
    if model.startswith("gpt"):
        tps = d.get("tokens_per_s")
        return 1e3 * batch * d.get("context", 0) / tps if tps else None
    ips = d.get("train_images_per_s")
    return 1e3 * batch / ips if ips else None

def same(a, b):
    try:
        return open(a, "rb").read() == open(b, "rb").read()
    except OSError:
        return False

rows = []
print("rounds %d, threads %s, load %.1f at the start" % (rounds, threads, os.getloadavg()[0]))
for model in models.split(","):
    base = args_of(model)
    # The unlimited peak, once.
    free = run(base, os.path.join(tmp, "probe.st"))
    peak = free.get("peak_device_bytes")
    batch = free.get("batch")
    if not peak:
        print("%s: the unlimited run failed: %s" % (model, free["_err"][0]))
        continue
    for link in links.split(","):
        for frac in fractions.split(","):
            limit_b = int(peak * int(frac) / 100)
            # the mlp's and cnn's Adam state (2 x their parameters) is what a half
            # of their peak cannot also hold: the updates on the host
            extra = [] if model.startswith("gpt") else ["--offload", "optimizer"]
            budget = ["--mem-limit", str(limit_b), "--link", link] + extra
            plan = run(base + budget + ["--plan", "--plan-strategy", "auto"],
                       os.path.join(tmp, "plan.st"))
            sp = plan.get("spill_plan") or {}
            preds = sp.get("strategies", {})
            todo, notes = ["unlimited"], {}
            if not sp:
                notes["all"] = "no plan: " + plan["_err"][0][:160]
            for s in pure + ["auto"]:
                pr = sp.get("predicted", {}) if s == "auto" else preds.get(s, {})
                if not sp:
                    continue
                if not pr.get("feasible"):
                    notes[s] = "does not fit"
                elif pr["step_ms"] / 1e3 * (steps if model.startswith("gpt") else
                                             int(limit) // batch) > max_run:
                    notes[s] = "not run: predicted %.0f ms a step" % pr["step_ms"]
                else:
                    todo.append(s)
            meas = {s: [] for s in todo}
            predicted, bits, moved = {}, {}, {}
            for r in range(rounds):
                for s in todo:  # alternating: every strategy once per round
                    save = os.path.join(tmp, "%s.st" % s)
                    if s == "unlimited":
                        d = run(base + ["--link", link], save)
                    else:
                        d = run(base + budget + ["--plan-strategy", s], save)
                    if d["_rc"] != 0:
                        notes[s] = "failed: " + d["_err"][0][:160]
                        continue
                    m = step_ms(d, model, batch)
                    if m:
                        meas[s].append(m)
                    # What crossed the link a step, both ways (the spill pool's count over
                    # the epoch's steps; the batch's own copies are not in it).
                    n_steps = steps if model.startswith("gpt") else int(limit) // batch
                    if "fetched_bytes" in d:
                        moved.setdefault(s, []).append(
                            (d["fetched_bytes"] + d.get("spilled_bytes", 0)) / n_steps / 1e6)
                    if s != "unlimited":
                        p = d.get("spill_plan") or {}
                        predicted.setdefault(s, []).append(p.get("predicted", {}).get("step_ms"))
                        bits[s] = bits.get(s, True) and same(save, os.path.join(tmp, "unlimited.st"))
                        if s == "auto":
                            notes.setdefault("auto_chose", p.get("chosen"))
            med = {s: statistics.median(v) for s, v in meas.items() if v}
            pure_run = [med[s] for s in pure if s in med]
            best_pure = min(pure_run) if pure_run else None
            for s in ["unlimited"] + pure + ["auto"]:
                row = {"model": model, "link": link, "fraction": int(frac), "budget": limit_b,
                       "strategy": s, "measured_ms": med.get(s),
                       "predicted_ms": statistics.median([x for x in predicted.get(s, []) if x])
                       if predicted.get(s) else ((sp.get("predicted") if s == "auto" else
                                                  preds.get(s, {})) or {}).get("step_ms"),
                       "same_bits": bits.get(s), "note": notes.get(s, ""),
                       "moved_mb_per_step": statistics.median(moved[s]) if moved.get(s) else None}
                if s == "auto":
                    row["chose"] = notes.get("auto_chose")
                rows.append(row)
            u = med.get("unlimited")
            print("\n%s, --link %s, budget %d%% of %.1f MiB (%.2f MiB)%s" %
                  (model, link, int(frac), peak / 1048576, limit_b / 1048576,
                   "  " + notes["all"] if "all" in notes else ""))
            if sp:
                print("  the model: link %.4g MB/s + %.3g us a copy (%.3g us of it the "
                      "stream's own), copies no faster than %.4g MB/s; nodes alone %.1f ms" %
                      (sp["link_bytes_per_s"] / 1e6,
                       1e6 * (sp["link_latency_s"] + sp.get("copy_overhead_s", 0)),
                       1e6 * sp.get("copy_overhead_s", 0), sp["copy_floor_bytes_per_s"] / 1e6,
                       sp["unlimited_ms"]))
            # wide enough for "auto(recompute)": the chosen strategy rides on auto's name
            print("  %-16s %11s %11s %7s %8s %8s %9s %5s  %s" %
                  ("strategy", "measured", "predicted", "p/m", "/best", "/unlim", "MB/step",
                   "bits", ""))
            for row in rows[-5:]:
                m, p = row["measured_ms"], row["predicted_ms"]
                fmt = lambda x: "%8.1f ms" % x if x else "%11s" % "-"  # 11 wide, as its header
                ratio = lambda a, b: "%.3f" % (a / b) if a and b else "-"
                print("  %-16s %11s %11s %7s %8s %8s %9s %5s  %s" % (
                    row["strategy"] + ("(%s)" % row["chose"] if row.get("chose") else ""),
                    fmt(m), fmt(p), ratio(p, m) if row["strategy"] != "unlimited" else "",
                    ratio(m, best_pure) if row["strategy"] == "auto" else "",
                    ratio(m, u) if row["strategy"] != "unlimited" else "",
                    "%.3f" % row["moved_mb_per_step"] if row["moved_mb_per_step"] is not None
                    else "",
                    {True: "same", False: "DIFF", None: ""}[row["same_bits"]], row["note"]))
            sys.stdout.flush()
PY
