# tap.sh — the shared part of the shell TAP tests. A test sets TOOL (the
# binary under test, an executable path) and PLAN (its number of points),
# then sources this file, which prints the plan and defines:
#   run ARGS...   runs TOOL: output in $tmp/out and $tmp/err, status in $rc
#   result DESC   one point, passed if the previous command succeeded; on
#                 failure the end of the last run's output goes to the log
#   skip DESC WHY one skipped point
# and $tmp (removed at exit), $have_python.

echo "1..$PLAN"
if [ ! -x "$TOOL" ]; then
  echo "Bail out! no $(basename "$TOOL") at $TOOL (build it, or set the variable naming it)"
  exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-$(basename "$TOOL").XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
n=0

result() {
  status=$?
  n=$((n + 1))
  if [ $status -eq 0 ]; then
    echo "ok $n - $1"
  else
    echo "not ok $n - $1"
    echo "# $(basename "$TOOL") exited $rc"
    for f in out err; do
      [ -s "$tmp/$f" ] && tail -n 20 "$tmp/$f" | sed "s/^/# $f: /"
    done
  fi
  return 0
}

skip() {
  n=$((n + 1))
  echo "ok $n - $1 # SKIP $2"
}

run() {
  "$TOOL" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
}

have_python=yes
command -v python3 >/dev/null 2>&1 || have_python=no
