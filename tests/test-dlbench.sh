#!/bin/sh
# shellcheck disable=SC2086
# test-dlbench.sh — TAP checks of the dlbench tool. automake's tap-driver runs
# it from the top of the build tree; DLBENCH (and DLINFO, used to see whether
# an OpenCL device exists) may name other binaries. Every benchmark run is
# --quick: the whole script takes well under a minute and a half on two cores.
# The figures themselves are not checked (a loaded machine makes them what
# it likes); their shape, their consistency and the tool's behaviour are.

DLBENCH=${DLBENCH:-./tools/dlbench}
DLINFO=${DLINFO:-./tools/dlinfo}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT

TOOL=$DLBENCH PLAN=35
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

# 1, 2
run --help
missing=
for word in --device --quick --reps --min-time --warmup --filter --json --csv --report \
  compare copy gemm ops train spill loader all; do
  grep -q -- "$word" "$tmp/out" || missing="$missing $word"
done
[ $rc -eq 0 ] && [ -z "$missing" ]
result "--help exits 0 and documents every option, suite and compare"
run --version
[ $rc -eq 0 ] && grep -q "[0-9]\.[0-9]" "$tmp/out"
result "--version prints the version"

# 3-10: usage errors exit 2, say what is wrong on stderr (naming the option)
# and print nothing on stdout.
usage_error() { # WORD ARGS...: WORD must appear in the message
  word=$1
  shift
  run "$@"
  [ $rc -eq 2 ] && [ ! -s "$tmp/out" ] && grep -q -- "$word" "$tmp/err"
  result "$* is a usage error (exit 2) naming $word"
}
usage_error --reps --reps 0 gemm
usage_error --reps --reps 3x gemm
usage_error --min-time --min-time -1 gemm
usage_error --warmup --warmup many gemm
usage_error --no-such-option --no-such-option
usage_error bogus-suite bogus-suite
usage_error compare compare only-one.json
usage_error stdout --json - --csv - gemm

# 11, 12
run gemm --quick --device bogus
[ $rc -eq 2 ] && grep -q bogus "$tmp/err" && [ ! -s "$tmp/out" ]
result "--device bogus exits 2 and names the spec"
run gemm --quick --device opencl:99
[ $rc -ne 0 ] && grep -q "opencl:99" "$tmp/err"
result "--device opencl:99 (no such device) fails and names it"

if [ $have_python = no ]; then
  for i in $(seq 13 $PLAN); do
    skip "test $i" "python3 not found"
  done
  exit 0
fi

# check FILE PYTHON: runs PYTHON with d = the JSON object in FILE and rows =
# its results; an assertion that fails exits non-zero.
check() {
  python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
rows = d['results']
def of(suite, device):
    return [r for r in rows if r['suite'] == suite and r['device'] == device]
$2" "$1"
}

# The documented schema (docs/dlbench.md), checked key by key.
cat >"$tmp/schema.py" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
num, text = (int, float), str
def need(obj, key, types, nullable=False):
    assert key in obj, "missing key %r in %r" % (key, sorted(obj))
    v = obj[key]
    ok = (v is None and nullable) or (isinstance(v, types) and not isinstance(v, bool))
    assert ok, "%r is %r, not %r" % (key, v, types)
    return v
top = {"tool": text, "schema": int, "dlrt_version": text, "created": text,
       "options": dict, "machine": dict, "skipped": list, "results": list}
for k, t in top.items():
    need(d, k, t)
assert d["tool"] == "dlbench" and d["schema"] == 1, d["schema"]
assert isinstance(d["options"]["quick"], bool)
for k, t in {"warmup": int, "reps": int, "min_time_s": num}.items():
    need(d["options"], k, t)
need(d["options"], "filter", text, True)
m = d["machine"]
for k, t in {"cpu_model": text, "cores": int, "host_memory_bytes": int, "os": text,
             "blas": text, "openblas_num_threads": text, "devices": list}.items():
    need(m, k, t)
assert m["cores"] >= 1 and m["devices"], m
for dev in m["devices"]:
    for k in ("spec", "name", "vendor", "backend", "driver", "kind"):
        need(dev, k, text)
    need(dev, "total_memory_bytes", int)
    need(dev, "compute_units", int)
    need(dev, "link", dict, True)
for s in d["skipped"]:
    need(s, "suite", text); need(s, "device", text, True); need(s, "reason", text)
fields = {"suite": (text, False), "device": (text, False), "case": (text, False),
          "unit": (text, False), "median": (num, False), "min": (num, False),
          "max": (num, False), "ms": (num, False), "reps": (int, False),
          "timing": (text, False), "work": (num, False), "bytes": (num, True),
          "vendor": (text, True), "vendor_median": (num, True), "vendor_min": (num, True),
          "vendor_max": (num, True), "vendor_ms": (num, True), "vendor_timing": (text, True),
          "ratio": (num, True), "check_error": (num, True), "copy_fraction": (num, True),
          "images_per_s": (num, True), "planned_peak_bytes": (num, True),
          "measured_peak_bytes": (num, True), "model": (num, True), "note": (text, False)}
assert d["results"], "no results"
for r in d["results"]:
    assert list(r) == list(fields), "fields or their order differ: %r" % list(r)
    for k, (t, nullable) in fields.items():
        need(r, k, t, nullable)
    where = "%s %s %s" % (r["suite"], r["device"], r["case"])
    assert r["suite"] in ("copy", "gemm", "ops", "train", "loader", "spill"), where
    assert r["unit"] in ("GB/s", "GFLOP/s", "steps/s", "images/s"), where
    assert r["timing"] in ("event", "wall"), where
    assert 0 < r["min"] <= r["median"] <= r["max"], where
    assert r["ms"] > 0 and r["reps"] >= 3 and r["work"] > 0, where
    # median = work / time: the figures are consistent with each other.
    scale = 1 if r["unit"] in ("steps/s", "images/s") else 1e9
    assert abs(r["work"] / (r["ms"] / 1e3) / scale / r["median"] - 1) < 1e-3, where
    has_vendor = r["vendor"] is not None
    for k in ("vendor_median", "vendor_min", "vendor_max", "vendor_ms", "vendor_timing",
              "ratio"):
        assert (r[k] is not None) == has_vendor, (where, k)
    if has_vendor:
        assert abs(r["ratio"] - r["median"] / r["vendor_median"]) < 1e-3 * r["ratio"], where
EOF

# 13-18: every suite, --quick, on the CPU, in one run.
run all --quick --device cpu --json "$tmp/cpu.json" --csv "$tmp/cpu.csv" \
  --report "$tmp/cpu.html"
cp "$tmp/err" "$tmp/cpu.err"
[ $rc -eq 0 ] && python3 "$tmp/schema.py" "$tmp/cpu.json"
result "all --quick on cpu exits 0 and its JSON validates against the documented schema"
check "$tmp/cpu.json" '
g = of("gemm", "cpu:0")
assert {r["case"].split("/")[0] for r in g} == {"f32", "f16", "bf16"}, g
for r in g:
    if r["case"].startswith("f32/"):
        assert r["vendor"] == "openblas" and r["ratio"] > 0, r
        assert r["check_error"] is not None and r["check_error"] < 1e-4, r
    else: # OpenBLAS has no half-precision GEMM: absent, not invented
        assert r["vendor"] is None and r["ratio"] is None and "OpenBLAS" in r["note"], r'
result "gemm on cpu: f32 beside OpenBLAS with a ratio and matching results; f16, bf16 ratio null"
check "$tmp/cpu.json" '
c = of("copy", "cpu:0")
kinds = {r["case"].split("/")[0] for r in c}
assert kinds == {"h2d-pageable", "h2d-pinned", "d2h-pageable", "d2h-pinned", "d2d"}, kinds
assert len({r["bytes"] for r in c}) >= 3 and min(r["bytes"] for r in c) == 4096, c
assert all(r["unit"] == "GB/s" and r["timing"] == "event" for r in c), c'
result "copy on cpu: five directions over several sizes from 4 KiB, timed by events"
check "$tmp/cpu.json" '
o = of("ops", "cpu:0")
names = {r["case"].split("/")[0] for r in o}
for n in ("copy-d2d", "add", "mul", "relu", "reduce-sum", "conv2d-fwd", "conv2d-train"):
    assert n in names, (n, names)
for r in o:
    if r["unit"] == "GB/s":
        assert r["copy_fraction"] > 0, r
    else:
        assert r["unit"] == "GFLOP/s" and r["timing"] == "event", r'
result "ops on cpu: kernels as a fraction of the d2d copy, conv2d forward and training"
check "$tmp/cpu.json" '
t = of("train", "cpu:0")
assert sorted(r["case"].split("/")[0] for r in t) == ["cnn", "mlp"], t
for r in t:
    assert r["unit"] == "steps/s" and r["images_per_s"] > r["median"], r
    assert r["planned_peak_bytes"] > 0 and r["measured_peak_bytes"] > 0, r'
result "train on cpu: mlp and cnn steps/s, images/s and peak memory"
check "$tmp/cpu.json" '
l = of("loader", "cpu:0")
assert sorted(r["case"].split("/")[1] for r in l) == ["w1", "w2", "w4"], l
assert all(r["unit"] == "images/s" and r["median"] > 0 for r in l), l
s = {r["case"]: r for r in of("spill", "cpu:0")}
# Both models within a quarter of their peak (the cnn checkpointed, its
# convolution segments in slices), each timed alternately with an unlimited
# trainer of the same model: the reference side.
for model in ("mlp", "cnn"):
    free = s[model + "/b64/unlimited"]
    for p in (4, 0):
        r = s["%s/b64/budget25%%/prefetch%d" % (model, p)]
        assert r["measured_peak_bytes"] <= free["measured_peak_bytes"] / 4, (r, free)
        assert r["vendor"] == "unlimited" and r["vendor_median"] > 0 and r["ratio"] > 0, r
        assert "step time" in r["note"] and "alternated" in r["note"], r'
result "loader: images/s with 1, 2 and 4 workers; spill: mlp and cnn within a quarter of their peak"

# 19: the CSV holds the same rows under the documented header.
python3 -c '
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
d = json.load(open(sys.argv[2]))
assert list(rows[0]) == list(d["results"][0]), list(rows[0])
assert len(rows) == len(d["results"]), (len(rows), len(d["results"]))
for c, j in zip(rows, d["results"]):
    assert (c["suite"], c["device"], c["case"]) == (j["suite"], j["device"], j["case"]), c
    assert abs(float(c["median"]) - j["median"]) <= 1e-5 * j["median"], (c, j)
    assert (c["ratio"] == "") == (j["ratio"] is None), c' "$tmp/cpu.csv" "$tmp/cpu.json"
result "--csv writes the JSON rows under the documented header; null is an empty field"

# 20, 21
grep -q "<svg" "$tmp/cpu.html" && grep -q "<polyline" "$tmp/cpu.html" &&
  grep -q "</html>" "$tmp/cpu.html" && ! grep -qi "<script" "$tmp/cpu.html" &&
  ! grep -o 'http[s]*://[^"]*' "$tmp/cpu.html" | grep -qv "^http://www.w3.org/2000/svg$"
result "--report writes HTML with inline SVG charts, no script and no external URL"
python3 -c '
import sys, xml.dom.minidom
html = open(sys.argv[1]).read()
svgs = html.split("<svg")[1:]
assert len(svgs) >= 5, len(svgs)
for s in svgs: # each chart is well-formed XML
    xml.dom.minidom.parseString("<svg" + s.split("</svg>")[0] + "</svg>")' "$tmp/cpu.html"
result "every SVG chart of the report is well-formed XML (at least 5 charts)"

# 22, 23: --filter, --json - (stdout holds the JSON alone), a repeated device.
run gemm --quick --device cpu,cpu:0 --device cpu --filter f32/256x256x256 --json -
[ $rc -eq 0 ] && check "$tmp/out" '
assert [(r["device"], r["case"]) for r in rows] == [("cpu:0", "f32/256x256x256/NN")], rows'
result "--filter keeps one case; a device named three times is measured once"
grep -q "f32/256x256x256/NN" "$tmp/err"
result "with --json -, the table goes to stderr"

# 24-27: compare.
cp "$tmp/out" "$tmp/b.json"
run compare "$tmp/cpu.json" "$tmp/b.json"
cp "$tmp/out" "$tmp/compare.out"
[ $rc -eq 0 ] && python3 -c '
import json, sys
a = {(r["suite"], r["device"], r["case"]): r for r in json.load(open(sys.argv[1]))["results"]}
b = json.load(open(sys.argv[2]))["results"][0]
line = [l for l in open(sys.argv[3]) if "f32/256x256x256/NN" in l]
assert len(line) == 1, line
ratio = float(line[0].split()[-1])
want = b["median"] / a[("gemm", "cpu:0", "f32/256x256x256/NN")]["median"]
assert abs(ratio - want) < 1e-3 * want + 5e-4, (ratio, want)
assert "1 case in both" in open(sys.argv[3]).read()' "$tmp/cpu.json" "$tmp/b.json" \
  "$tmp/compare.out"
result "compare prints both medians and the ratio B/A of the matching case"
run compare "$tmp/no-such-file.json" "$tmp/b.json"
[ $rc -eq 2 ] && grep -q "no-such-file.json" "$tmp/err"
result "compare with a missing file exits 2 naming it"
printf '{"tool": "dlbench", "results": [\n  {"suite": "gemm",]\n' >"$tmp/bad.json"
run compare "$tmp/bad.json" "$tmp/b.json"
[ $rc -eq 2 ] && grep -q "bad.json is not valid JSON: line 2" "$tmp/err"
result "compare with malformed JSON exits 2 naming the file and the line"
echo '{"results": 3}' >"$tmp/other.json"
run compare "$tmp/other.json" "$tmp/b.json"
[ $rc -eq 2 ] && grep -q "not a dlbench result" "$tmp/err"
result "compare with JSON that is not a dlbench result exits 2 and says so"

# 28-30: outputs. A failed run (here: no such device) leaves the previous
# results file as it was; a FIFO is written into (its reader gets the whole
# JSON: the early check must not open it); a folder is refused before
# measuring.
echo "previous results" >"$tmp/keep.json"
run gemm --quick --device opencl:99 --json "$tmp/keep.json"
[ $rc -ne 0 ] && [ "$(cat "$tmp/keep.json")" = "previous results" ]
result "a run that fails leaves the previous --json file untouched"
mkfifo "$tmp/fifo.json"
timeout 60 cat "$tmp/fifo.json" >"$tmp/from-fifo.json" &
reader=$!
timeout 60 "$TOOL" gemm --quick --device cpu --filter f32/256x256x256 --json "$tmp/fifo.json" \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
wait $reader
[ $rc -eq 0 ] && [ -p "$tmp/fifo.json" ] && check "$tmp/from-fifo.json" '
assert [r["case"] for r in rows] == ["f32/256x256x256/NN"], rows'
result "--json to a FIFO: its reader gets the whole JSON, and it stays a FIFO"
mkdir "$tmp/folder.json"
run gemm --quick --device cpu --json "$tmp/folder.json"
[ $rc -eq 2 ] && grep -q "folder.json is a folder" "$tmp/err" && [ ! -s "$tmp/out" ]
result "--json naming a folder is refused (exit 2) before measuring"

# 31-35: the same smoke test on OpenCL, beside CLBlast.
opencl=no
if [ -x "$DLINFO" ]; then
  "$DLINFO" --device opencl:0 >/dev/null 2>&1 && opencl=yes
else
  opencl=maybe # no dlinfo: a run that cannot open the device (exit 2) skips
fi
if [ $opencl != no ]; then
  # Under --enable-sanitizers, LeakSanitizer's stop-the-world at exit can
  # crash among PoCL's worker threads after a long run (it reports a fatal
  # error of its own, not a leak); this run keeps ASan's access checks only.
  saved_lsan=${LSAN_OPTIONS-}
  LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}detect_leaks=0"
  export LSAN_OPTIONS
  run all --quick --device opencl:0 --json "$tmp/ocl.json"
  LSAN_OPTIONS=$saved_lsan
  [ $opencl = maybe ] && [ $rc -eq 2 ] && opencl=no
fi
if [ $opencl = no ]; then
  for what in "all --quick on opencl:0" "gemm beside CLBlast" "copy on opencl:0" \
    "ops on opencl:0" "train on opencl:0"; do
    skip "$what" "no OpenCL device"
  done
  exit 0
fi
[ $rc -eq 0 ] && python3 "$tmp/schema.py" "$tmp/ocl.json"
result "all --quick on opencl:0 exits 0 and its JSON validates against the schema"
check "$tmp/ocl.json" '
g = of("gemm", "opencl:0")
f32 = [r for r in g if r["case"].startswith("f32/")]
assert f32 and all(r["vendor"] == "clblast" and r["vendor_timing"] == "event" for r in f32), f32
assert all(r["check_error"] < 1e-4 for r in f32), f32
for r in g:
    if r["case"].startswith("bf16/"): # CLBlast has no bf16 GEMM
        assert r["ratio"] is None and "bf16" in r["note"], r'
result "gemm on opencl:0: f32 beside CLBlast (own context, event-timed, same results)"
check "$tmp/ocl.json" '
c = of("copy", "opencl:0")
assert len({r["case"].split("/")[0] for r in c}) == 5 and all(r["timing"] == "event" for r in c)'
result "copy on opencl:0: five directions, timed by events"
check "$tmp/ocl.json" '
o = of("ops", "opencl:0")
assert any(r["case"].startswith("add/") for r in o), o
assert any(r["case"].startswith("conv2d-train/") for r in o), o'
result "ops on opencl:0: kernels and conv2d"
check "$tmp/ocl.json" '
t = of("train", "opencl:0")
assert sorted(r["case"].split("/")[0] for r in t) == ["cnn", "mlp"], t'
result "train on opencl:0: mlp and cnn"
