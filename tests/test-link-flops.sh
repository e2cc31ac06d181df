#!/bin/sh
# shellcheck disable=SC2086
# test-link-flops.sh — TAP checks that a ratio preset's link is the same in
# every process: DLRT_LINK_FLOPS=RATE pins the GEMM rate it divides by (the
# link exactly that rate over the preset's FLOP per byte; a bad rate fails
# naming the variable); otherwise the rate measured first is kept per device
# in the profile cache ($DLRT_PROFILE_CACHE) and read back by the next
# process (a rate written into the file is the one used), and
# DLRT_PROFILE_FRESH=1 measures again; the help texts name both.

DLBENCH=${DLBENCH:-./tools/dlbench}
DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT DLRT_LINK DLRT_LINK_FLOPS DLRT_PROFILE_FRESH
unset XDG_CACHE_HOME

TOOL=$DLBENCH PLAN=9
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ $have_python = no ]; then
  for i in $(seq 1 $PLAN); do skip "test $i" "python3 not found"; done
  exit 0
fi

cache="$tmp/cache"
mkdir "$cache"
export DLRT_PROFILE_CACHE="$cache"

link_of() { # ARGS...: dlbench copy's link for cpu into $tmp/link.json
  "$DLBENCH" copy --quick --quiet --device cpu --filter h2d-pinned/4KiB --link h200-pcie5 \
    --json "$tmp/copy.json" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 0 ] && python3 -c "import json, sys
l = json.load(open(sys.argv[1]))['machine']['devices'][0]['link']
json.dump(l, open(sys.argv[2], 'w'))" "$tmp/copy.json" "$tmp/link.json"
}

# 1-2: pinned
DLRT_LINK_FLOPS=30GFLOP/s link_of && python3 -c "import json, sys
l = json.load(open(sys.argv[1]))
assert l['device_flops'] == 30e9, l
assert abs(l['bytes_per_s'] - 30e9 / l['flop_per_byte']) < 1e-4 * l['bytes_per_s'], l  # 5 digits
assert 'DLRT_LINK_FLOPS' in l['text'], l" "$tmp/link.json" && [ -z "$(ls "$cache")" ]
result "DLRT_LINK_FLOPS=30GFLOP/s: the link is 30e9 over h200-pcie5's FLOP per byte, nothing measured"
DLRT_LINK_FLOPS=fast link_of
[ $rc -ne 0 ] && grep -q "DLRT_LINK_FLOPS" "$tmp/err" && grep -q "fast" "$tmp/err"
result "a bad DLRT_LINK_FLOPS fails, naming the variable and the value"

# 3-5: measured once, kept
link_of && cp "$tmp/link.json" "$tmp/first.json" && ls "$cache"/link-flops-*.txt >/dev/null
result "the first process measures the rate and keeps it in the profile cache"
link_of && python3 -c "import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert abs(a['device_flops'] - b['device_flops']) < 1e-6 * a['device_flops'], (a, b)
assert a['bytes_per_s'] == b['bytes_per_s'], (a, b)
assert 'cached' in b['text'] and 'cached' not in a['text'], (a['text'], b['text'])
" "$tmp/first.json" "$tmp/link.json"
result "the next process gets the same link, from the cache"
f=$(ls "$cache"/link-flops-*.txt | head -n 1)
sed 's/^dlrt-link-flops-1 [^ ]*/dlrt-link-flops-1 1.25e9/' "$f" >"$f.new" && mv "$f.new" "$f"
link_of && python3 -c "import json, sys
l = json.load(open(sys.argv[1]))
assert l['device_flops'] == 1.25e9, l" "$tmp/link.json"
result "the rate in the cache file is the one used"

# 6-7: measured again
DLRT_PROFILE_FRESH=1 link_of && python3 -c "import json, sys
l = json.load(open(sys.argv[1]))
assert l['device_flops'] != 1.25e9 and 'cached' not in l['text'], l" "$tmp/link.json" &&
  ! grep -q "1.25e9" "$f"
result "DLRT_PROFILE_FRESH=1 measures again and rewrites the cache"
XDG_CACHE_HOME="$tmp/xdg" DLRT_PROFILE_CACHE= link_of && ls "$tmp/xdg/dlrt"/link-flops-*.txt >/dev/null
result "without DLRT_PROFILE_CACHE the rate is kept in \$XDG_CACHE_HOME/dlrt"

# 8-9: the help texts
"$DLBENCH" --help >"$tmp/out" 2>&1 && grep -q "DLRT_LINK_FLOPS" "$tmp/out" &&
  grep -q "DLRT_PROFILE_FRESH" "$tmp/out"
result "dlbench --help documents DLRT_LINK_FLOPS and the cached rate"
"$DLTRAIN" --help >"$tmp/out" 2>&1 && grep -q "DLRT_LINK_FLOPS" "$tmp/out"
result "dltrain --help documents DLRT_LINK_FLOPS"
