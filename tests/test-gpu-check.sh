#!/bin/sh
# test-gpu-check.sh — the parts of the GPU check that decide its verdict,
# checked here, where a mistake costs no device minutes: the tests' switch
# DLRT_TEST_REQUIRE (tests/tap.c) that fails a run whose required backend is
# missing, the SKIP scan of gpu-check.sh, the judgements of gpu-check.py, and
# that a rehearsal without the .debs says so and fails. The whole rehearsal
# (a build from the tarball with autotools off PATH) is a step of .ci/run.
srcdir=${srcdir:-.}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT DLRT_TEST_REQUIRE

TOOL=$srcdir/tests/gpu-check.sh PLAN=14
# shellcheck source=tests/tap.sh
. "$srcdir/tests/tap.sh"
helper="$srcdir/tests/gpu-check.py"
norm=./tests/test-norm

run --help
[ $rc -eq 0 ] && grep -q -- '--rehearse' "$tmp/out" && grep -q -- '--prepare' "$tmp/out"
result "--help lists --prepare and --rehearse"

run --no-such-option
[ $rc -eq 2 ] && grep -q -- "--no-such-option" "$tmp/err"
result "an unknown option exits 2 naming it"

# norm ENV...: test-norm (every device, through tap_for_each_device) with ENV.
norm() {
  env "$@" "$norm" >"$tmp/out" 2>"$tmp/err"
  rc=$?
}

norm DLRT_TEST_REQUIRE=cpu
[ $rc -eq 0 ] && ! grep -q '^not ok' "$tmp/out"
result "DLRT_TEST_REQUIRE=cpu: test-norm passes (the cpu is there)"

if "${DLINFO:-./tools/dlinfo}" --device cuda:0 >/dev/null 2>&1; then
  norm DLRT_TEST_REQUIRE=cuda
  [ $rc -eq 0 ] && grep -q 'cuda:0' "$tmp/out"
  result "DLRT_TEST_REQUIRE=cuda with a CUDA device: test-norm passes on cuda:0"
else
  norm DLRT_TEST_REQUIRE=cuda
  [ $rc -ne 0 ] && grep -q '^not ok.*no cuda device, which DLRT_TEST_REQUIRE=cuda requires' \
    "$tmp/out"
  result "DLRT_TEST_REQUIRE=cuda without a CUDA device: a failed point, not a SKIP"
fi

norm DLRT_BACKEND=cpu DLRT_TEST_REQUIRE=opencl
[ $rc -ne 0 ] && grep -q '^not ok.*no opencl device, which DLRT_TEST_REQUIRE=opencl requires' \
  "$tmp/out"
result "DLRT_TEST_REQUIRE=opencl with DLRT_BACKEND=cpu: the left-out backend fails a point"

norm DLRT_BACKEND=cpu
[ $rc -eq 0 ] && grep -q '# SKIP no opencl device' "$tmp/out"
result "the same run without DLRT_TEST_REQUIRE passes, with SKIPs"

norm DLRT_TEST_REQUIRE=cdua
[ $rc -ne 0 ] && grep -q '^not ok.*cdua is not a backend' "$tmp/out"
result "DLRT_TEST_REQUIRE=cdua: a name that is no backend fails a point"

cat >"$tmp/a.log" <<'EOF'
ok 1 - cuda:0 opens: NVIDIA H200 (580.159)
ok 2 # SKIP a CUDA device is present
ok 3 # SKIP cuda:0: no host pointer to see where blocks are placed
ok 4 # SKIP no cuda device: the cuda backend is built but found no driver, platform or device
ok 5 # SKIP one device only: no copies between devices
EOF
run --scan-skips cuda "$tmp/a.log"
[ $rc -eq 1 ] && [ "$(wc -l <"$tmp/out")" -eq 1 ] && grep -q 'ok 4 # SKIP no cuda device' "$tmp/out"
result "--scan-skips cuda flags the SKIP of a missing cuda device alone"

grep -v 'ok 4' "$tmp/a.log" >"$tmp/b.log"
run --scan-skips cuda "$tmp/b.log"
[ $rc -eq 0 ] && [ ! -s "$tmp/out" ]
result "--scan-skips cuda excuses the SKIPs skip_allowed lists"

if [ $have_python = yes ]; then
  # dltrain --json lines: a device run, the cpu's, PyTorch's.
  cat >"$tmp/dut.json" <<'EOF'
{"device": "cuda:0", "final_loss": 0.6000, "test_loss": 0.5000, "test_accuracy": 0.820, "train_images_per_s": 50000, "spilled_bytes": 0, "mem_limit": null, "peak_device_bytes": 11454976}
EOF
  cat >"$tmp/cpu.json" <<'EOF'
{"device": "cpu:0", "final_loss": 0.6030, "test_loss": 0.5010, "test_accuracy": 0.818, "train_images_per_s": 9000}
EOF
  cat >"$tmp/torch.jsonl" <<'EOF'
{"model": "mlp", "precision": "fp32", "device": "cuda", "test_loss": 0.47, "test_accuracy": 0.83, "train_images_per_s": 60000}
EOF
  sed 's/"final_loss": 0.6000/"final_loss": 2.3026/' "$tmp/dut.json" >"$tmp/bad.json"
  python3 "$helper" dltrain-compare --model mlp --precision fp32 --dut "$tmp/dut.json" \
    --cpu "$tmp/cpu.json" --torch "$tmp/torch.jsonl" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 0 ] && grep -q 'dlrt 0.83x' "$tmp/out"
  result "gpu-check.py dltrain-compare: losses within tolerance pass, with the speed ratio"

  python3 "$helper" dltrain-compare --model mlp --precision fp32 --dut "$tmp/bad.json" \
    --cpu "$tmp/cpu.json" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 1 ] && grep -q 'final_loss 2.30260 on cuda:0 vs 0.60300 on the cpu' "$tmp/err"
  result "gpu-check.py dltrain-compare: a loss far from the cpu's fails, naming both"

  python3 "$helper" spill-compare --limited "$tmp/dut.json" --unlimited "$tmp/dut.json" \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 1 ] && grep -q 'nothing spilled' "$tmp/err"
  result "gpu-check.py spill-compare: a budgeted run that spilled nothing fails"

  cat >"$tmp/bench.json" <<'EOF'
{"results": [
 {"suite": "gemm", "device": "cuda:0", "case": "f32/1024x1024x1024/NN", "median": 30000, "vendor": "cublas", "vendor_median": 31000, "ratio": 0.97, "work": 2147483648, "note": "", "images_per_s": null},
 {"suite": "gemm", "device": "cuda:0", "case": "bf16/1024x1024x1024/NN", "median": 90000, "vendor": null, "vendor_median": null, "ratio": null, "work": 2147483648, "note": "cuBLAS (libcublas.so.13) could not be loaded", "images_per_s": null}],
 "skipped": []}
EOF
  python3 "$helper" dlbench "$tmp/bench.json" --device cuda:0 --suites gemm --vendor cublas \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 1 ] && grep -q 'bf16/1024x1024x1024/NN: no cublas figure' "$tmp/err" &&
    ! grep -q 'f32/' "$tmp/err"
  result "gpu-check.py dlbench: a GEMM row without cuBLAS beside it fails"
else
  for i in 10 11 12 13; do skip "test $i" "python3 not found"; done
fi

# Without the .debs (no network when they were to be fetched) a rehearsal
# must say so and fail, not pass without them.
mkdir "$tmp/nodebs"
TMPDIR=$tmp "$TOOL" --rehearse --debs "$tmp/nodebs" --tarball "$tmp/none.tar.gz" \
  --out "$tmp/report" --budget 120 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "deps.*FAIL.*lacks libopenblas0-pthread.*--fetch-debs.*no network" \
  "$tmp/out" && grep -q 'configure.*NOT-RUN' "$tmp/out" && [ -f "$tmp/report/gpu-check-rehearse.tar.gz" ]
result "a rehearsal without the .debs fails, saying they are missing, and leaves its report"
