#!/bin/sh
# test-pkgconfig.sh — a program links against the static libdlrt.a with no
# flags but `pkg-config --static --cflags --libs dlrt`, and runs. The dlrt.pc
# of this build is used as installed, with its libdir a folder that holds
# libdlrt.a alone (so the link cannot take libdlrt.so) and its includedir the
# source tree's lib/. Then again with CLBlast's static archive in place of
# -lclblast: CLBlast is C++, and dlrt.pc must name the C++ runtime after it.
srcdir=${srcdir:-.}
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
cc=${CC:-cc}
echo "1..4"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-pkgconfig.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
n=0

# point STATUS DESC: one TAP point; on failure $tmp/log goes to the log.
point() {
  n=$((n + 1))
  if [ "$1" -eq 0 ]; then
    echo "ok $n - $2"
  else
    echo "not ok $n - $2"
    [ -s "$tmp/log" ] && tail -n 20 "$tmp/log" | sed 's/^/# /'
  fi
  : >"$tmp/log"
}

if [ ! -f .libs/libdlrt.a ] || [ ! -f dlrt.pc ] || ! command -v "$PKG_CONFIG" >/dev/null 2>&1; then
  for i in 1 2 3 4; do
    echo "ok $i - static link through dlrt.pc # SKIP needs pkg-config and libdlrt.a" \
      "(--enable-static)"
  done
  exit 0
fi
abs_srcdir=$(cd "$srcdir" && pwd)
mkdir -p "$tmp/lib" "$tmp/pkgconfig"
cp .libs/libdlrt.a "$tmp/lib/"
sed -e "s|^libdir=.*|libdir=$tmp/lib|" -e "s|^includedir=.*|includedir=$abs_srcdir/lib|" \
  dlrt.pc >"$tmp/pkgconfig/dlrt.pc"
PKG_CONFIG_PATH=$tmp/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export PKG_CONFIG_PATH

# The backends this build compiled, which the program must list.
backends=cpu
grep -q '^#define DLRT_HAVE_OPENCL 1' config.h && backends="$backends opencl"
grep -q '^#define DLRT_HAVE_CUDA 1' config.h && backends="$backends cuda"

cat >"$tmp/prog.c" <<'EOF'
#include <dlrt.h>
#include <stdio.h>

/* Lists the compiled backends: the registry reaches every backend's code. */
int main(void) {
  int count = dlrt_backend_count();
  printf("dlrt %s:", dlrt_version_string());
  for (int i = 0; i < count; i++)
    printf(" %s", dlrt_backend_name(i));
  printf("\n");
  return count > 0 ? 0 : 1;
}
EOF

"$PKG_CONFIG" --static --libs dlrt >"$tmp/libs" 2>"$tmp/log"
point $? "pkg-config --static --libs dlrt (its Requires.private modules are there)"
libs=$(cat "$tmp/libs")
cflags=$("$PKG_CONFIG" --cflags dlrt)

# link_and_run DESC LIBS: links prog with LIBS, runs it, checks the backends.
link_and_run() {
  # shellcheck disable=SC2086 # the flags are words
  if ! $cc $cflags "$tmp/prog.c" -o "$tmp/prog" $2 $DLRT_SANITIZER_FLAGS >"$tmp/log" 2>&1; then
    echo "link: $cc $cflags prog.c $2" >>"$tmp/log"
    point 1 "$1"
    return
  fi
  "$tmp/prog" >"$tmp/out" 2>>"$tmp/log"
  status=$?
  for b in $backends; do
    grep -qw "$b" "$tmp/out" || status=1
  done
  [ $status -eq 0 ] || { echo "expected the backends: $backends"; cat "$tmp/out"; } >>"$tmp/log"
  point $status "$1"
}

link_and_run "a static link with pkg-config --static runs, listing: $backends" "$libs"

# Nothing in that program may come from libdlrt.so (there is none in $tmp/lib).
if command -v readelf >/dev/null 2>&1 && [ -x "$tmp/prog" ]; then
  readelf -d "$tmp/prog" >"$tmp/log" 2>&1
  ! grep -q 'libdlrt\.so' "$tmp/log"
  point $? "the program does not load libdlrt.so"
else
  n=$((n + 1))
  echo "ok $n - the program does not load libdlrt.so # SKIP no readelf, or no program"
fi

clblast_a=$($cc -print-file-name=libclblast.a)
if ! grep -q '^#define DLRT_HAVE_CLBLAST 1' config.h; then
  n=$((n + 1))
  echo "ok $n - with CLBlast's static archive # SKIP built without CLBlast"
elif [ ! -f "$clblast_a" ]; then
  n=$((n + 1))
  echo "ok $n - with CLBlast's static archive # SKIP no libclblast.a on this machine"
else
  # -Wl,--as-needed as Ubuntu's compiler does by default: a library named
  # before the archive that needs it would be dropped.
  link_and_run "with CLBlast's static archive (C++): pkg-config names the C++ runtime after it" \
    "-Wl,--as-needed $(echo "$libs" | sed "s|-lclblast|$clblast_a|")"
fi
