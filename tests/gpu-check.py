#!/usr/bin/env python3
"""gpu-check.py — the parts of tests/gpu-check.sh that read JSON: figures and
verdicts from dlinfo, dlbench, dltrain and bench/pytorch_train.py, the
Fashion-MNIST subset the check carries, and the summary table.

Each subcommand prints one line, the key figure of its row in the summary,
to stdout; what is wrong goes to stderr, one line each, and makes it exit 1.
Standard library only: it runs under whatever python3 a machine has (on the
GPU machine, the one that holds PyTorch).
"""
import argparse
import gzip
import json
import os
import shutil
import struct
import sys

# How far a device's training may be from the CPU's with the same seed (the
# same initial parameters and batches): only the rounding differs, fp32 in
# another summation order, fp16/bf16 in other kernels. Relative for the mean
# training loss of the epoch and the test loss, absolute for test accuracy.
CPU_LOSS_REL = {"fp32": 0.02, "fp16": 0.05, "bf16": 0.05}
CPU_ACC_ABS = {"fp32": 0.02, "fp16": 0.03, "bf16": 0.03}
# From PyTorch the initial parameters differ too (its own RNG and init), so
# only the outcome is compared: the test loss and accuracy after the epoch.
TORCH_LOSS_REL = 0.25
TORCH_ACC_ABS = 0.05
# A run under --mem-limit spills storages but runs the same kernels in the
# same order: its losses are the unlimited run's, up to this relative error.
SPILL_LOSS_REL = 1e-3
# A gpt preset's validation loss on the device against the cpu's after the
# same steps from the same seed.
GPT_VAL_LOSS_REL = 0.05


def fail(msg):
    print(msg, file=sys.stderr)


def load_last_json(path):
    """The last line of `path` that parses as a JSON object (tools end stdout
    with one), or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().strip().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def load_json_lines(path):
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def gib(n):
    return f"{n / 2**30:.1f} GiB"


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


# ---------------------------------------------------------------- data

def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = list(struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim]))
    return magic, dims, data[4 + 4 * ndim:]


def cmd_fmnist_subset(a):
    """The first N training images and labels of an MNIST-family folder, and
    its whole test split, as .gz IDX files in DST (what dltrain --data DIR and
    bench/pytorch_train.py --data DIR both read)."""
    os.makedirs(a.dst, exist_ok=True)
    for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
        src = next((os.path.join(a.src, f"train-{kind}{ext}") for ext in (".gz", "")
                    if os.path.exists(os.path.join(a.src, f"train-{kind}{ext}"))), None)
        if not src:
            fail(f"no train-{kind}[.gz] in {a.src}")
            return 1
        magic, dims, body = read_idx(src)
        if dims[0] < a.count:
            fail(f"{src} holds {dims[0]} items, fewer than {a.count}")
            return 1
        item = len(body) // dims[0]
        dims[0] = a.count
        with gzip.open(os.path.join(a.dst, f"train-{kind}.gz"), "wb", compresslevel=9) as f:
            f.write(struct.pack(">I", magic) + struct.pack(">" + "I" * len(dims), *dims))
            f.write(body[:a.count * item])
        test = os.path.join(a.src, f"t10k-{kind}.gz")
        if not os.path.exists(test):
            fail(f"no {test}")
            return 1
        shutil.copyfile(test, os.path.join(a.dst, f"t10k-{kind}.gz"))
    print(f"Fashion-MNIST: {a.count} training images and the test split in {a.dst}")
    return 0


# ---------------------------------------------------------------- dlinfo

def cmd_dlinfo(a):
    try:  # one object over several lines
        with open(a.json, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"dlinfo --json did not give JSON: {e}")
        return 1
    devs = {x["spec"]: x for x in d.get("devices", [])}
    parts = [f"{s} {x['name']} ({gib(x['total_memory'])})" for s, x in devs.items()]
    status = 0
    for want in filter(None, a.want.split(",")):
        if want not in devs:
            fail(f"dlinfo lists no {want}: backends "
                 + ", ".join(f"{b['name']} {'up' if b['available'] else 'down'}"
                             f" ({b['devices']} devices)" for b in d.get("backends", [])))
            status = 1
    for b in d.get("backends", []):
        if not b["available"]:
            parts.append(f"{b['name']}: not available")
    print("; ".join(parts))
    return status


# ---------------------------------------------------------------- dlbench

def square_nn(case):
    """(dtype, n) of a gemm case f32/NxNxN/NN, else None."""
    parts = case.split("/")
    if len(parts) != 3 or parts[2] != "NN":
        return None
    dims = parts[1].split("x")
    if len(dims) != 3 or len(set(dims)) != 1:
        return None
    return parts[0], int(dims[0])


def cmd_dlbench(a):
    try:
        with open(a.json, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"dlbench --json {a.json}: {e}")
        return 1
    status = 0
    figures = {}
    key = []
    for spec in a.device.split(","):
        rows = [r for r in d["results"] if r["device"] == spec]
        for suite in a.suites.split(","):
            if not any(r["suite"] == suite for r in rows):
                fail(f"{spec}: dlbench {suite} measured nothing")
                status = 1
        for s in d.get("skipped", []):
            if s.get("device") in (spec, None) and s["suite"] in a.suites.split(","):
                msg = f"{spec}: dlbench skipped {s['suite']}: {s['reason']}"
                if a.vendor:  # the device under test: nothing may be left out
                    fail(msg)
                    status = 1
                else:
                    print(msg, file=sys.stderr)
        gemm = [r for r in rows if r["suite"] == "gemm"]
        for r in gemm:
            if a.vendor and r["vendor"] != a.vendor:
                fail(f"{spec} gemm {r['case']}: no {a.vendor} figure beside dlrt's"
                     f" ({r['note'] or 'vendor ' + str(r['vendor'])})")
                status = 1
            if "disagree" in (r["note"] or ""):
                fail(f"{spec} gemm {r['case']}: {r['note']}")
                status = 1
        # The largest square NN GEMM of each dtype: dlrt's rate and the ratio.
        best = {}
        for r in gemm:
            sq = square_nn(r["case"])
            if sq and (sq[0] not in best or sq[1] > best[sq[0]][0]):
                best[sq[0]] = (sq[1], r)
        g = []
        for dtype in ("f32", "f16", "bf16"):
            if dtype in best:
                n, r = best[dtype]
                ratio = f" = {r['ratio']:.2f}x {r['vendor']}" if r["ratio"] is not None else ""
                rate = (f"{r['median'] / 1000:.1f} TFLOP/s" if r["median"] >= 1000
                        else f"{r['median']:.0f} GFLOP/s")
                g.append(f"{dtype} {rate}{ratio}")
                figures[f"{spec} gemm {dtype} {n}^3"] = {
                    "dlrt_gflops": r["median"], "vendor": r["vendor"],
                    "vendor_gflops": r["vendor_median"], "ratio": r["ratio"]}
        if g:
            key.append(f"{spec} gemm {max(v[0] for v in best.values())}^3: " + ", ".join(g))
        copies = {}
        for r in rows:
            if r["suite"] == "copy":
                direction, _, _size = r["case"].partition("/")
                if direction not in copies or r["work"] > copies[direction]["work"]:
                    copies[direction] = r
        c = []
        for direction in ("h2d-pageable", "h2d-pinned", "d2h-pageable", "d2h-pinned", "d2d"):
            if direction in copies:
                r = copies[direction]
                c.append(f"{direction} {r['median']:.1f}")
                figures[f"{spec} copy {r['case']}"] = {"gb_per_s": r["median"]}
        if c:
            size = copies[next(iter(copies))]["case"].partition("/")[2]
            key.append(f"copy {size} GB/s: " + ", ".join(c))
        for r in rows:
            if r["suite"] == "train":
                figures[f"{spec} train {r['case']}"] = {"steps_per_s": r["median"],
                                                        "images_per_s": r["images_per_s"]}
        t = [f"{r['case']} {r['images_per_s']:.0f} img/s" for r in rows
             if r["suite"] == "train" and r["images_per_s"]]
        if t:
            key.append("train " + ", ".join(t))
    if a.figures:
        old = {}
        if os.path.exists(a.figures):
            with open(a.figures, encoding="utf-8") as f:
                old = json.load(f)
        old.update(figures)
        with open(a.figures, "w", encoding="utf-8") as f:
            json.dump(old, f, indent=1, sort_keys=True)
    print("; ".join(key) if key else "no figures")
    return status


# ---------------------------------------------------------------- dltrain

def cmd_dltrain_compare(a):
    """One model and precision: the device under test against the CPU (same
    seed) and, when given, PyTorch on the same GPU."""
    dut = load_last_json(a.dut)
    cpu = load_last_json(a.cpu) if a.cpu else None
    if dut is None:
        fail(f"dltrain on the device gave no JSON ({a.dut})")
        return 1
    status = 0
    p = a.precision
    key = [f"{dut['device']} loss {dut['final_loss']:.4f} test {dut['test_loss']:.4f}"
           f" acc {dut['test_accuracy']:.3f} {dut['train_images_per_s']:.0f} img/s"]
    if a.cpu:
        if cpu is None:
            fail(f"dltrain on the cpu gave no JSON ({a.cpu})")
            return 1
        for field in ("final_loss", "test_loss"):
            if rel(dut[field], cpu[field]) > CPU_LOSS_REL[p]:
                fail(f"{field} {dut[field]:.5f} on {dut['device']} vs {cpu[field]:.5f} on the cpu:"
                     f" {100 * rel(dut[field], cpu[field]):.2f}% apart, over"
                     f" {100 * CPU_LOSS_REL[p]:.0f}% ({p})")
                status = 1
        if abs(dut["test_accuracy"] - cpu["test_accuracy"]) > CPU_ACC_ABS[p]:
            fail(f"test accuracy {dut['test_accuracy']:.4f} vs {cpu['test_accuracy']:.4f} on the"
                 f" cpu, over {CPU_ACC_ABS[p]} apart")
            status = 1
        key.append(f"cpu loss {cpu['final_loss']:.4f} ({100 * rel(dut['final_loss'], cpu['final_loss']):.2f}%)")
    if a.torch:
        runs = [r for r in load_json_lines(a.torch)
                if r.get("model") == a.model and r.get("precision") == p]
        if not runs:
            fail(f"no PyTorch run of {a.model} {p} in {a.torch}")
            status = 1
        else:
            t = runs[-1]
            if rel(dut["test_loss"], t["test_loss"]) > TORCH_LOSS_REL:
                fail(f"test loss {dut['test_loss']:.4f} vs PyTorch's {t['test_loss']:.4f}:"
                     f" over {100 * TORCH_LOSS_REL:.0f}% apart")
                status = 1
            if abs(dut["test_accuracy"] - t["test_accuracy"]) > TORCH_ACC_ABS:
                fail(f"test accuracy {dut['test_accuracy']:.4f} vs PyTorch's"
                     f" {t['test_accuracy']:.4f}: over {TORCH_ACC_ABS} apart")
                status = 1
            speed = dut["train_images_per_s"] / t["train_images_per_s"]
            key.append(f"torch {t['device']} test {t['test_loss']:.4f} acc {t['test_accuracy']:.3f}"
                       f" {t['train_images_per_s']:.0f} img/s: dlrt {speed:.2f}x")
            if a.figures:
                old = {}
                if os.path.exists(a.figures):
                    with open(a.figures, encoding="utf-8") as f:
                        old = json.load(f)
                old[f"dltrain {dut['device']} {a.model} {p}"] = {
                    "dlrt_images_per_s": dut["train_images_per_s"],
                    "torch_images_per_s": t["train_images_per_s"], "ratio": speed,
                    "dlrt_test_loss": dut["test_loss"], "torch_test_loss": t["test_loss"],
                    "cpu_final_loss": cpu["final_loss"] if cpu else None,
                    "dlrt_final_loss": dut["final_loss"]}
                with open(a.figures, "w", encoding="utf-8") as f:
                    json.dump(old, f, indent=1, sort_keys=True)
    print("; ".join(key))
    return status


def cmd_budget(a):
    """A device budget that makes a run spill: three quarters of its planned
    peak (dltrain --plan --json; half is below what Adam's update of the mlp
    holds at once, once the loader's buffers have their share), and at least
    1.25 x the least it can spill within."""
    d = load_last_json(a.plan)
    if d is None:
        fail(f"dltrain --plan --json gave no JSON ({a.plan})")
        return 1
    peak = d["plan"]["planned_peak_bytes"]
    least = d.get("spill_least_bytes") or 0
    budget = max(peak * 3 // 4, int(least * 1.25))
    if budget >= peak:
        fail(f"no budget below the planned peak {peak} fits (spilling needs {least})")
        return 1
    print(budget)
    return 0


def cmd_spill_compare(a):
    lim = load_last_json(a.limited)
    ref = load_last_json(a.unlimited)
    if lim is None or ref is None:
        fail("dltrain gave no JSON (" + (a.limited if lim is None else a.unlimited) + ")")
        return 1
    status = 0
    if not lim.get("spilled_bytes"):
        fail(f"--mem-limit {lim.get('mem_limit')}: nothing spilled (spilled_bytes 0)")
        status = 1
    for field in ("final_loss", "test_loss"):
        if rel(lim[field], ref[field]) > SPILL_LOSS_REL:
            fail(f"{field} {lim[field]:.6f} under the budget vs {ref[field]:.6f} without")
            status = 1
    print(f"{lim['device']} budget {lim['mem_limit'] / 2**20:.1f} MiB: peak"
          f" {lim['peak_device_bytes'] / 2**20:.1f} MiB (unlimited"
          f" {ref['peak_device_bytes'] / 2**20:.1f}), spilled {lim['spilled_bytes'] / 2**20:.1f}"
          f" MiB, loss {lim['final_loss']:.5f} = {ref['final_loss']:.5f},"
          f" {lim['train_images_per_s']:.0f} vs {ref['train_images_per_s']:.0f} img/s")
    return status


def cmd_gpt_compare(a):
    """A gpt preset on the device against the cpu with the same seed: the
    validation loss after the same steps."""
    dut, cpu = load_last_json(a.dut), load_last_json(a.cpu)
    if dut is None or cpu is None:
        fail("dltrain gave no JSON (" + (a.dut if dut is None else a.cpu) + ")")
        return 1
    d = rel(dut["val_loss"], cpu["val_loss"])
    print(f"val loss {dut['val_loss']:.4f} vs cpu {cpu['val_loss']:.4f} ({100 * d:.2f}%),"
          f" {dut.get('tokens_per_s') or 0:.0f} tokens/s")
    if d > GPT_VAL_LOSS_REL:
        fail(f"validation loss {100 * d:.2f}% from the cpu's, over {100 * GPT_VAL_LOSS_REL:.0f}%")
        return 1
    return 0


# ---------------------------------------------------------------- summary

def cmd_summary(a):
    rows = []
    with open(a.rows, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 4:
                rows.append(parts[:4])
    width = max([len(r[0]) for r in rows] + [5])
    lines = [f"{'PHASE':<{width}}  {'RESULT':<12} {'SECONDS':>7}  KEY FIGURE"]
    for name, result, seconds, key in rows:
        lines.append(f"{name:<{width}}  {result:<12} {seconds:>7}  {key}")
    counts = {}
    for r in rows:
        counts[r[1]] = counts.get(r[1], 0) + 1
    lines.append(", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    print("\n".join(lines))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"rows": [{"phase": r[0], "result": r[1], "seconds": r[2], "key": r[3]}
                                for r in rows], "counts": counts}, f, indent=1)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("fmnist-subset")
    s.add_argument("src")
    s.add_argument("dst")
    s.add_argument("count", type=int)
    s.set_defaults(fn=cmd_fmnist_subset)
    s = sub.add_parser("dlinfo")
    s.add_argument("json")
    s.add_argument("--want", default="")
    s.set_defaults(fn=cmd_dlinfo)
    s = sub.add_parser("dlbench")
    s.add_argument("json")
    s.add_argument("--device", required=True)
    s.add_argument("--suites", default="copy,gemm,ops,train")
    s.add_argument("--vendor", help="every gemm row must have this vendor beside it")
    s.add_argument("--figures")
    s.set_defaults(fn=cmd_dlbench)
    s = sub.add_parser("dltrain-compare")
    s.add_argument("--model", required=True)
    s.add_argument("--precision", required=True, choices=sorted(CPU_LOSS_REL))
    s.add_argument("--dut", required=True)
    s.add_argument("--cpu")
    s.add_argument("--torch")
    s.add_argument("--figures")
    s.set_defaults(fn=cmd_dltrain_compare)
    s = sub.add_parser("budget")
    s.add_argument("plan")
    s.set_defaults(fn=cmd_budget)
    s = sub.add_parser("spill-compare")
    s.add_argument("--limited", required=True)
    s.add_argument("--unlimited", required=True)
    s.set_defaults(fn=cmd_spill_compare)
    s = sub.add_parser("gpt-compare")
    s.add_argument("--dut", required=True)
    s.add_argument("--cpu", required=True)
    s.set_defaults(fn=cmd_gpt_compare)
    s = sub.add_parser("summary")
    s.add_argument("rows")
    s.add_argument("--json")
    s.set_defaults(fn=cmd_summary)
    a = p.parse_args()
    try:
        return a.fn(a)
    except (KeyError, TypeError, ValueError) as e:
        fail(f"gpu-check.py {a.cmd}: unexpected input: {type(e).__name__} {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
