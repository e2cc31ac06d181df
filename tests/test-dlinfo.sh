#!/bin/sh
# test-dlinfo.sh — TAP checks of the dlinfo tool. automake's tap-driver runs it
# from the top of the build tree; DLINFO may name another binary to test.

DLINFO=${DLINFO:-./tools/dlinfo}
# The checks expect every compiled backend and no budget: ignore the caller's.
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT DLRT_LINK

TOOL=$DLINFO PLAN=18
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

# json PYTHON: runs PYTHON with d = the JSON document in $tmp/out.
json() {
  python3 -c "import json, sys; d = json.load(sys.stdin)
$1" <"$tmp/out"
}

# device_rows: the rows of the device table in $tmp/out, from below its SPEC
# heading to the blank line after it; not those of the Processes table, which
# also start with a spec when another dlrt program is running.
device_rows() {
  awk '/^SPEC /{table = 1; next} table && /^$/{exit} table' "$tmp/out"
}

# spawn ARGS...: DLINFO ARGS in the background, pid in $pid, output in
# $tmp/out and $tmp/err, with SIGINT at its default (killing) disposition
# where python3 can restore it (sh starts a background job with it ignored).
spawn() {
  if [ $have_python = yes ]; then
    python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])' "$DLINFO" "$@" >"$tmp/out" 2>"$tmp/err" &
  else
    "$DLINFO" "$@" >"$tmp/out" 2>"$tmp/err" &
  fi
  pid=$!
}

# wait_for SECONDS CONDITION: polls the shell CONDITION every 0.1 s.
wait_for() {
  tries=$(($1 * 10))
  while [ $tries -gt 0 ]; do
    eval "$2" && return 0
    sleep 0.1
    tries=$((tries - 1))
  done
  return 1
}

# 1
run
[ $rc -eq 0 ] && device_rows | grep -q "^cpu:0 "
result "dlinfo runs and lists cpu:0"

# 2, 3
run --json
if [ $have_python = yes ]; then
  json '
cpu = [x for x in d["devices"] if x["backend"] == "cpu"]
assert cpu, "no cpu device"
for x in cpu:
    assert x["total_memory"] > 0, x
    assert 0 <= x["free_memory"] <= x["total_memory"], x
    assert x["used_memory"] == x["total_memory"] - x["free_memory"], x
assert d["version"], d
assert any(b["name"] == "cpu" and b["available"] for b in d["backends"]), d'
  result "--json parses; the cpu device has total > 0 and free <= total"

  # With the opencl backend compiled in and a platform present (clinfo sees a
  # device, or dlrt says the backend started), opencl:0 must be listed.
  opencl=$(json 'b = {x["name"]: x["available"] for x in d["backends"]}
print("absent" if "opencl" not in b else "up" if b["opencl"] else "down")')
  if [ "$opencl" = absent ]; then
    skip "opencl:0 is listed" "no opencl backend in this build"
  elif [ "$opencl" = up ] || clinfo -l 2>/dev/null | grep -q "Device #"; then
    json 'assert "opencl:0" in [x["spec"] for x in d["devices"]], d["backends"]'
    result "opencl:0 is listed (an OpenCL platform is installed)"
  else
    skip "opencl:0 is listed" "no OpenCL platform (clinfo -l lists no device)"
  fi
else
  skip "--json parses" "python3 not found"
  skip "opencl:0 is listed" "python3 not found"
fi

# 4
run --device cpu --json
if [ $have_python = yes ]; then
  [ $rc -eq 0 ] && json 'assert [x["spec"] for x in d["devices"]] == ["cpu:0"], d'
else
  [ $rc -eq 0 ] && grep -q '"cpu:0"' "$tmp/out"
fi
result "--device cpu --json shows only cpu:0"

# 5
run --device cpu:0
[ $rc -eq 0 ] && device_rows | grep -q "^cpu:0 " && [ "$(device_rows | wc -l)" -eq 1 ]
result "--device cpu:0 prints a table with the one device"

# 6
run --device bogus
[ $rc -ne 0 ] && grep -qi "spec" "$tmp/err" && grep -q "run dlinfo" "$tmp/err"
result "--device bogus fails with a message about the spec on stderr"

# 7
run --device cuda:7
[ $rc -ne 0 ] && [ -s "$tmp/err" ]
result "--device cuda:7 fails with a message"

# 8
run --bad-option
[ $rc -eq 2 ] && grep -q "unknown option '--bad-option'" "$tmp/err" &&
  grep -q "dlinfo --help" "$tmp/err" && ! grep -q "Usage:" "$tmp/err"
result "--bad-option is a usage error (exit 2): the error and a pointer to --help, not the help"

# 9
run --help
[ $rc -eq 0 ] && grep -q DLRT_DEVICE "$tmp/out" && grep -q DLRT_MEM_LIMIT "$tmp/out"
result "--help exits 0 and documents DLRT_DEVICE and DLRT_MEM_LIMIT"

# 10
run --watch 0
[ $rc -eq 2 ] && [ ! -s "$tmp/out" ]
result "--watch 0 is a usage error (exit 2)"

# 11
run --version
[ $rc -eq 0 ] && grep -q "[0-9]\.[0-9]" "$tmp/out"
result "--version prints the version"

# 12: SIGINT once it has refreshed twice, however slowly it started.
spawn --watch 0.3
wait_for 120 '[ "$(grep -c "^dlrt " "$tmp/out")" -ge 2 ] || ! kill -0 $pid 2>/dev/null'
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c "^dlrt " "$tmp/out")" -ge 2 ]
result "--watch 0.3 refreshes until SIGINT, then exits 0"

# 13: SIGINT while dlrt_init starts the backends (the signal handlers were
# once installed after it: exit 130). The OpenCL loader is held in dlrt_init
# opening a vendor file that is a FIFO ($OCL_ICD_VENDORS) until the SIGINT
# has come; then the FIFO is opened and closed at the other end (EOF: an
# empty vendor file, ignored). Linux: /proc/PID/wchan tells it is waiting.
vendors=$tmp/vendors
if [ $have_python = no ]; then
  skip "SIGINT during dlrt_init" "python3 not found"
elif ! "$DLINFO" | grep -q "^  opencl "; then
  skip "SIGINT during dlrt_init" "no opencl backend in this build"
else
  mkdir "$vendors" && mkfifo "$vendors/fifo" && ln -s fifo "$vendors/held.icd"
  OCL_ICD_VENDORS=$vendors spawn --watch 0.3
  if wait_for 60 '[ "$(cat /proc/$pid/wchan 2>/dev/null)" = wait_for_partner ]'; then
    kill -INT $pid
    sleep 0.2
    : <>"$vendors/fifo" # a writer that does not wait for the reader
    wait $pid
    rc=$?
    [ $rc -eq 0 ] && [ "$(grep -c "^dlrt " "$tmp/out")" -ge 1 ]
    result "SIGINT during dlrt_init ends --watch after one refresh, exit 0"
  else
    : <>"$vendors/fifo"
    kill $pid 2>/dev/null
    wait $pid
    skip "SIGINT during dlrt_init" "dlinfo was not seen opening the FIFO (no /proc/PID/wchan?)"
  fi
fi

# 14-18: the host link model (--link, DLRT_LINK): shown per device, in the
# table and in --json; none without one; a bad spec is a usage error.
run --device cpu --link 12GB/s:10us
[ $rc -eq 0 ] && grep -q "^Host link models" "$tmp/out" &&
  grep -q "^  cpu:0 .*12.0 GB/s + 10 us per copy" "$tmp/out"
result "--link 12GB/s:10us: the table shows cpu:0's model"
run --device cpu --link 12GB/s:10us --json
if [ $have_python = yes ]; then
  json '
l = d["devices"][0]["link"]
assert l["spec"] == "12GB/s:10us" and l["preset"] is None, l
assert l["bytes_per_s"] == 12e9 and abs(l["latency_s"] - 1e-5) < 1e-12, l'
  result "--link in --json: the spec, 12e9 bytes/s and 10 us"
  run --device cpu --json
  json 'assert d["devices"][0]["link"] is None'
  result "without a model, --json has link: null"
else
  skip "--link in --json" "python3 not found"
  skip "link: null without a model" "python3 not found"
fi
DLRT_LINK=h200-pcie5 "$TOOL" --device cpu >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && grep -q "^  cpu:0 .*h200-pcie5: .* per copy.*14391 FLOP/B.*GFLOP/s" "$tmp/out"
result "DLRT_LINK=h200-pcie5: the preset's rate from this device's measured GEMM rate"
run --link 12Gb/s
[ $rc -eq 2 ] && grep -q "link" "$tmp/err" && ! grep -q "^dlrt " "$tmp/out"
result "--link 12Gb/s (bits) is a usage error (exit 2) naming --link"
