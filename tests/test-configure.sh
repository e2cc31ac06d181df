#!/bin/sh
# test-configure.sh — configure's --with-X=DIR: a DIR that does not hold the
# package stops configure naming the package and the DIR (it used to carry
# on with the system's copy); a DIR that does is used first (its include/ and
# lib/, with an rpath), and a broken one there is not passed over for the
# system's. Also that plain configure, --with-X and --without-X still work.
# configure runs from a copy of what it reads (so an in-tree build's
# config.status does not stop it), with --no-create and one cache file:
# about a second a run.
srcdir=${srcdir:-.}
cc=${CC:-cc}
echo "1..12"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-configure.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
n=0

mkdir -p "$tmp/src/lib"
cp "$srcdir/configure" "$tmp/src/" && cp -R "$srcdir/build-aux" "$tmp/src/" &&
  cp "$srcdir/lib/dlrt.h" "$tmp/src/lib/" || {
  echo "Bail out! cannot copy configure and build-aux/ from $srcdir"
  exit 1
}

# conf ARGS...: runs configure; stdout+stderr in $tmp/out, status in $rc,
# the output variables in $tmp/src/config.log. CUDA and MPI are looked for
# only where a point asks (they are the slow checks).
conf() {
  (cd "$tmp/src" && CC=$cc ./configure --cache-file="$tmp/config.cache" --no-create \
    --without-cuda --without-mpi "$@") >"$tmp/out" 2>&1
  rc=$?
}

# point STATUS DESC: one TAP point; on failure the end of configure's output.
point() {
  n=$((n + 1))
  if [ "$1" -eq 0 ]; then
    echo "ok $n - $2"
  else
    echo "not ok $n - $2"
    echo "# configure exited $rc"
    tail -n 5 "$tmp/out" | sed 's/^/# /'
  fi
}

# output_var NAME: the value configure gave the output variable NAME.
output_var() {
  sed -n "s/^$1='\\(.*\\)'\$/\\1/p" "$tmp/src/config.log"
}

# refused OPTION PACKAGE: configure failed, and its error names both.
refused() {
  [ $rc -ne 0 ] && grep 'error:' "$tmp/out" | grep -F -e "$1" | grep -q -F -e "$2"
}

conf
grep -q 'cpu backend: *yes' "$tmp/out"
point $? "plain configure detects what is there"

# A DIR that does not exist, for every package that takes one.
none=$tmp/nonexistent
for pkg in openblas:OpenBLAS opencl:OpenCL clblast:CLBlast cuda:CUDA nccl:NCCL mpi:MPI; do
  name=${pkg%%:*}
  conf --with-$name="$none"
  refused "--with-$name=$none" "${pkg#*:}"
  point $? "--with-$name=DIR without ${pkg#*:} there stops, naming it and DIR"
done

# A DIR with the header but no library is refused too.
mkdir -p "$tmp/half/include/CL" "$tmp/half/lib"
: >"$tmp/half/include/CL/cl.h"
conf --with-opencl="$tmp/half"
refused "--with-opencl=$tmp/half" libOpenCL
point $? "--with-opencl=DIR with a header and no library stops, naming the library"

# A DIR that holds OpenCL (links to this system's) is the one used.
cl_h=$(printf '#include <CL/cl.h>\n' | $cc -DCL_TARGET_OPENCL_VERSION=120 -M -E - 2>/dev/null |
  tr ' \\' '\n\n' | grep '/CL/cl\.h$' | head -n 1)
cl_so=$($cc -print-file-name=libOpenCL.so)
if [ -z "$cl_h" ] || [ ! -f "$cl_so" ]; then
  for what in "is used" "is not passed over" "--with-opencl finds" "--without-opencl"; do
    n=$((n + 1))
    echo "ok $n - OpenCL DIR $what # SKIP no OpenCL headers and ICD loader here"
  done
  exit 0
fi
mkdir -p "$tmp/cl/include" "$tmp/cl/lib"
ln -s "$(dirname "$cl_h")" "$tmp/cl/include/CL"
ln -s "$cl_so" "$tmp/cl/lib/libOpenCL.so"
conf --with-opencl="$tmp/cl" --without-clblast
status=$rc
[ "$(output_var OPENCL_CFLAGS)" = "-I$tmp/cl/include" ] || status=1
case " $(output_var OPENCL_LIBS) " in
  *" -L$tmp/cl/lib -Wl,-rpath,$tmp/cl/lib -lOpenCL "*) ;;
  *) status=1 ;;
esac
[ $status -eq 0 ] || echo "OPENCL_CFLAGS='$(output_var OPENCL_CFLAGS)'" \
  "OPENCL_LIBS='$(output_var OPENCL_LIBS)'" >>"$tmp/out"
point $status "--with-opencl=DIR holding OpenCL: its include/ and lib/ (and an rpath) are used"

# The same DIR with a library that is not one: configure must not fall back
# to the system's libOpenCL.
mkdir -p "$tmp/badcl/include" "$tmp/badcl/lib"
ln -s "$(dirname "$cl_h")" "$tmp/badcl/include/CL"
echo "not a library" >"$tmp/badcl/lib/libOpenCL.so"
conf --with-opencl="$tmp/badcl" --without-clblast
refused "--with-opencl=$tmp/badcl" "does not link"
point $? "--with-opencl=DIR whose library does not link stops; the system's is not used instead"

conf --with-opencl --without-clblast
status=$rc
grep -q 'opencl backend: *yes' "$tmp/out" || status=1
[ -z "$(output_var OPENCL_CFLAGS | grep -F "$tmp")" ] || status=1
point $status "--with-opencl (no DIR) finds the system's OpenCL"

conf --without-opencl
status=$rc
grep -q 'opencl backend: *no' "$tmp/out" || status=1
point $status "--without-opencl leaves the OpenCL backend out"
