#!/bin/sh
# test-procreg.sh — TAP checks of the process registry: a running dltrain is
# listed by dlinfo under the device it uses, with its bytes, on cpu and on
# OpenCL (PoCL) when present; a killed one disappears; the file is replaced
# whole (rename), in a 0700 folder; DLRT_PROCESS_REGISTRY=0 keeps none; an
# untrustworthy folder is refused without failing training. Run from the top
# of the build tree by automake's tap-driver (DLINFO and DLTRAIN may name
# other binaries).

DLINFO=${DLINFO:-./tools/dlinfo}
DLTRAIN=${DLTRAIN:-./tools/dltrain}
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT DLRT_PROCESS_REGISTRY

TOOL=$DLINFO PLAN=15
# shellcheck source=tests/tap.sh
. "$(dirname "$0")/tap.sh"

if [ ! -x "$DLTRAIN" ]; then
  echo "Bail out! no dltrain at $DLTRAIN"
  exit 1
fi
if [ $have_python = no ]; then
  for i in $(seq 1 $PLAN); do skip "process registry check $i" "python3 not found"; done
  exit 0
fi

# Every registry this test makes lies in $tmp, not in the user's own.
mkdir -m 700 "$tmp/run"
XDG_RUNTIME_DIR=$tmp/run
export XDG_RUNTIME_DIR
reg=$tmp/run/dlrt
trainers=""
trap 'for p in $trainers; do kill -9 $p 2>/dev/null; done; rm -rf "$tmp"' EXIT

# start_train DEVICE [ENV...]: a dltrain that trains until killed, on DEVICE;
# its pid in $pid.
start_train() {
  dev=$1
  shift
  env "$@" "$DLTRAIN" --data generated --device "$dev" --limit 2000 --epochs 1000000 \
    --quiet >"$tmp/train.out" 2>"$tmp/train.err" &
  pid=$!
  trainers="$trainers $pid"
}

# listed PID SPEC: dlinfo --json (now) lists PID under SPEC, allocating.
listed() {
  "$DLINFO" --json >"$tmp/out" 2>"$tmp/err" || return 1
  python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
pid, spec = int(sys.argv[2]), sys.argv[3]
dev = [x for x in d['devices'] if x['spec'] == spec][0]
ps = [p for p in dev['processes'] if p['pid'] == pid]
assert ps, dev['processes']
p = ps[0]
assert p['name'] == 'dltrain', p
assert 0 < p['allocated'] <= p['reserved'] and p['allocated'] <= p['peak'], p
assert p['updated'] > 0, p" "$tmp/out" "$1" "$2"
}

# wait_listed PID SPEC: polls (up to 60 s: a first OpenCL build is slow)
# until PID is listed under SPEC.
wait_listed() {
  for i in $(seq 1 300); do
    listed "$1" "$2" && return 0
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

# unlisted PID: dlinfo --json lists PID nowhere, and PID's file is gone.
unlisted() {
  "$DLINFO" --json >"$tmp/out" 2>"$tmp/err" &&
    python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
pids = [p['pid'] for x in d['devices'] for p in x['processes']]
pids += [p['pid'] for p in d['other_processes']]
assert int(sys.argv[2]) not in pids, pids" "$tmp/out" "$1" &&
    [ ! -e "$reg/$1" ] && [ ! -e "$reg/.$1.tmp" ]
}

# kill_train PID: kill -9, and reap it (a zombie is gone, but it is cleaner).
kill_train() {
  kill -9 "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}

# 1
start_train cpu
wait_listed $pid cpu:0
result "a running dltrain on cpu is listed under cpu:0 with its bytes (dlinfo --json)"

# 2
run
grep -q "^Processes" "$tmp/out" && grep -Eq "^cpu:0 +$pid +dltrain +[0-9.]+ [KMG]iB" "$tmp/out"
result "the dlinfo table lists it under Processes: device, pid, name, bytes"

# 3
[ "$(stat -c %a "$reg")" = 700 ] && [ "$(stat -c %u "$reg")" = "$(id -u)" ] &&
  [ "$(stat -c %a "$reg/$pid")" = 600 ] && [ ! -L "$reg" ]
result "the registry folder is ours, mode 700, and the file mode 600"

# 4: for 5 s, every read of the file is whole, and the file is a new one
# (another inode) after a rewrite: written aside and renamed over the last.
python3 -c "import os, sys, time
path = sys.argv[1]
inodes, reads, end = set(), 0, time.time() + 5
while time.time() < end and (len(inodes) < 3 or reads < 1000):
    with open(path) as f:
        inodes.add(os.fstat(f.fileno()).st_ino)
        text = f.read()
    reads += 1
    time.sleep(0.0005)
    lines = text.splitlines()
    assert lines[0] == 'dlrt-process 1' and lines[-1] == 'end', repr(text)
    assert any(l.startswith('device cpu cpu:0 ') for l in lines), repr(text)
assert len(inodes) >= 2, (reads, inodes)
print('# %d reads, %d versions of the file' % (reads, len(inodes)))" "$reg/$pid"
result "the file is rewritten whole by rename: every read complete, new inodes"

# 5
kill_train $pid
unlisted $pid
result "after kill -9, dlinfo no longer lists it and its file is removed"

# 6, 7
if has_opencl; then
  start_train opencl:0
  wait_listed $pid opencl:0
  result "a running dltrain on opencl:0 is listed under opencl:0 with its bytes"
  kill_train $pid
  unlisted $pid
  result "after kill -9, the OpenCL entry disappears"
else
  skip "dltrain on opencl:0 is listed" "no OpenCL device"
  skip "the OpenCL entry disappears" "no OpenCL device"
fi

# 8: files that look alive but are not: a dead pid's, a live pid's with
# another start time (the pid was taken by a later process), a dead
# writer's temporary file.
mkdir -p -m 700 "$reg"
sh -c 'exit 0' &
dead=$!
wait $dead
for p in $dead $$; do
  printf 'dlrt-process 1\npid %s\nstart 1\nname ghost\n%s\nend\n' $p \
    'device cpu cpu:0 2097152 1024 1024 1 x' >"$reg/$p"
done
: >"$reg/.$dead.tmp"
"$DLINFO" --json >"$tmp/out" 2>&1 && ! grep -q ghost "$tmp/out" &&
  [ ! -e "$reg/$dead" ] && [ ! -e "$reg/$$" ] && [ ! -e "$reg/.$dead.tmp" ]
result "stale files (dead pid, reused pid, a killed writer's temp file) are removed, unlisted"

# 9: a run of a few seconds, listed while it trains, ends with exit 0.
"$DLTRAIN" --data generated --device cpu --limit 2000 --epochs 20 --quiet >"$tmp/train.out" 2>&1 &
pid=$!
trainers="$trainers $pid"
wait_listed $pid cpu:0
seen=$?
wait $pid
rc=$?
[ $seen -eq 0 ] && [ $rc -eq 0 ] && [ ! -e "$reg/$pid" ] && [ -z "$(ls -A "$reg")" ]
result "a dltrain that ends leaves no file behind (dlrt_shutdown removes it)"

# 10
start_train cpu DLRT_PROCESS_REGISTRY=0
sleep 1.5
kill -0 $pid && [ ! -e "$reg/$pid" ] && ! listed $pid cpu:0
status=$?
kill_train $pid
[ $status -eq 0 ]
result "DLRT_PROCESS_REGISTRY=0: a running dltrain keeps no file"

# 11
DLRT_PROCESS_REGISTRY=yes "$DLTRAIN" --data generated --device cpu --limit 500 --quiet \
  >"$tmp/train.out" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q 'DLRT_PROCESS_REGISTRY="yes"' "$tmp/train.out"
result "DLRT_PROCESS_REGISTRY=yes is an error that names the variable"

# refused DIR: a dltrain with XDG_RUNTIME_DIR=DIR (whose dlrt folder must
# not be used) runs on after the registry's first write would have been made,
# says why once on stderr, and writes nothing into DIR/dlrt.
refused() {
  start_train cpu XDG_RUNTIME_DIR="$1"
  # Up to 30 s for the warning: a loaded machine starts dltrain slowly.
  for i in $(seq 1 300); do
    grep -q "^dlrt: process registry: " "$tmp/train.err" && break
    sleep 0.1
  done
  sleep 0.5
  kill -0 $pid && [ "$(grep -c "^dlrt: process registry: " "$tmp/train.err")" -eq 1 ] &&
    [ -z "$(ls -A "$1/dlrt/")" ]
  status=$?
  kill_train $pid
  return $status
}

# 12: a link in the folder's place is refused, and dlinfo says why it lists
# nothing.
mkdir -m 700 "$tmp/run2" "$tmp/elsewhere"
ln -s "$tmp/elsewhere" "$tmp/run2/dlrt"
refused "$tmp/run2" && grep -q "symbolic link" "$tmp/train.err" &&
  XDG_RUNTIME_DIR=$tmp/run2 "$DLINFO" --json >"$tmp/out" 2>"$tmp/err" &&
  python3 -c "import json, sys
e = json.load(open(sys.argv[1]))['process_registry']['error']
assert e and 'symbolic link' in e, e" "$tmp/out"
result "a symlinked folder is refused: training goes on, one warning, dlinfo says why"

# 13: so is a folder others may enter.
mkdir -p "$tmp/run3/dlrt"
chmod 755 "$tmp/run3/dlrt"
refused "$tmp/run3" && grep -q "mode is not 0700" "$tmp/train.err" &&
  XDG_RUNTIME_DIR=$tmp/run3 run && grep -q "cannot be read: .*mode is not 0700" "$tmp/out"
result "a folder with mode 755 is refused: training goes on, dlinfo says why"

# 14
if [ "$(id -u)" -eq 0 ] && id nobody >/dev/null 2>&1; then
  mkdir -m 700 -p "$tmp/run4/dlrt"
  chown nobody "$tmp/run4/dlrt"
  XDG_RUNTIME_DIR=$tmp/run4 run --json
  [ $rc -eq 0 ] && grep -q "belongs to another user" "$tmp/out"
  result "a folder of another user is refused (dlinfo says why)"
else
  skip "a folder of another user is refused" "needs root to give a folder away"
fi

# 15: without XDG_RUNTIME_DIR the folder is /tmp/dlrt-UID, made 0700.
(
  unset XDG_RUNTIME_DIR
  start_train cpu
  wait_listed $pid cpu:0 && [ ! -s "$tmp/train.err" ] &&
    python3 -c "import json, sys
assert json.load(open(sys.argv[1]))['process_registry']['folder'] == sys.argv[2]" \
      "$tmp/out" "/tmp/dlrt-$(id -u)" &&
    [ "$(stat -c %a "/tmp/dlrt-$(id -u)")" = 700 ] && [ -f "/tmp/dlrt-$(id -u)/$pid" ]
  status=$?
  kill_train $pid
  "$DLINFO" >/dev/null 2>&1 # removes the killed one's file
  exit $status
)
result "without XDG_RUNTIME_DIR the registry is /tmp/dlrt-UID, mode 700"
