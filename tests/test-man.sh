#!/bin/sh
# test-man.sh — the tools' man pages (docs/man/TOOL.1, made by help2man from
# --help, see Makefile.am) are there and match the tools built: the version,
# one synopsis line per usage form of --help, and every long option --help
# names. A page shipped in the tarball, or made before a tool's --help
# changed, fails here rather than drift.
srcdir=${srcdir:-.}
tools="dlinfo dltrain dlbench dlrecord dlgen"
echo "1..16"
if [ "${DLRT_MAN_PAGES:-yes}" = no ]; then
  for i in $(seq 16); do
    echo "ok $i - man pages # SKIP configured without them: help2man was not found"
  done
  exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-man.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
n=0

# point STATUS DESC: one TAP point, with $tmp/why in the log on failure.
point() {
  n=$((n + 1))
  if [ "$1" -eq 0 ]; then
    echo "ok $n - $2"
  else
    echo "not ok $n - $2"
    [ -s "$tmp/why" ] && sed 's/^/# /' "$tmp/why"
  fi
  : >"$tmp/why"
}

# The version every page must carry: dlinfo's (dlrecord has no --version).
version=$("${DLINFO:-tools/dlinfo}" --version | sed -n '1s/.* //p')

for tool in $tools; do
  bin=tools/$tool
  page=docs/man/$tool.1
  [ -f "$page" ] || page=$srcdir/docs/man/$tool.1
  : >"$tmp/why"

  # The page exists, for this tool and this version.
  if [ ! -f "$page" ]; then
    echo "no $page (made by make from $tool --help with help2man)" >"$tmp/why"
    point 1 "$tool.1: made for $tool $version"
    point 1 "$tool.1: a synopsis line per usage form"
    point 1 "$tool.1: every long option of --help"
    continue
  fi
  grep -q "^\.TH \"*$(echo "$tool" | tr a-z A-Z)\"* .*\"dlrt $version\"" "$page"
  status=$?
  [ $status -eq 0 ] || grep '^\.TH' "$page" >"$tmp/why"
  point $status "$tool.1: made for $tool $version"

  # help2man reads "Usage:" and "  or:" lines; any other form would end up
  # in the description instead of the synopsis.
  "$bin" --help >"$tmp/help" 2>&1
  forms=$(grep -c -e '^Usage:' -e '^  *or: ' "$tmp/help")
  lines=$(sed -n '/^\.SH SYNOPSIS/,/^\.SH/p' "$page" | grep -c "^\.B $tool\$")
  [ "$forms" -eq "$lines" ]
  status=$?
  [ $status -eq 0 ] ||
    echo "$forms usage forms in --help, $lines in the page's SYNOPSIS" >"$tmp/why"
  point $status "$tool.1: a synopsis line per usage form"

  # Every long option --help names is in the page (roff writes - as \-).
  sed 's/\\-/-/g' "$page" >"$tmp/page"
  missing=
  for opt in $(grep -o -e '--[a-z][a-z0-9-]*' "$tmp/help" | sort -u); do
    grep -q -e "$opt\([^a-z0-9-]\|\$\)" "$tmp/page" || missing="$missing $opt"
  done
  [ -z "$missing" ]
  status=$?
  [ $status -eq 0 ] || echo "not in $page:$missing (the page is older than the tool)" >"$tmp/why"
  point $status "$tool.1: every long option of --help"
done

# dlinfo(1) shares its name with the C library's dlinfo(3): the page says so.
page=docs/man/dlinfo.1
[ -f "$page" ] || page=$srcdir/docs/man/dlinfo.1
grep -q 'dlinfo (3)' "$page" 2>/dev/null && grep -q 'man 3 dlinfo' "$page"
point $? "dlinfo.1 tells dlinfo(3) apart"
