#!/bin/sh
# test-python.sh — the dlrt Python package (python/) over this build's
# libdlrt: installed as a user would (pip install into a fresh virtual
# environment, with Debian's NumPy, PyTorch and pytest from the system's
# site-packages, no network), then its pytest suite, one TAP point per test
# (tests/python-tap.py reads pytest's JUnit report); and three points of its
# own: the venv install, the library found through pkg-config's dlrt.pc
# alone, and a clear ImportError when $DLRT_LIBRARY names nothing.
# Needs python3-venv, python3-pytest, python3-numpy and python3-torch
# (.ci/install-deps installs them): without them the points fail, saying so.

PYTHON=${PYTHON:-/usr/bin/python3}
srcdir=$(cd "$(dirname "$0")/.." && pwd)
unset DLRT_DEVICE DLRT_BACKEND DLRT_MEM_LIMIT PYTHONPATH
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
DLRT_LIBRARY=$(abs "${DLRT_LIBRARY:-.libs/libdlrt.so}")
DLTRAIN=$(abs "${DLTRAIN:-./tools/dltrain}")
DLINFO=$(abs "${DLINFO:-./tools/dlinfo}")
PYTHON_ABI=$(abs "${PYTHON_ABI:-./tests/python-abi}")
export DLRT_LIBRARY DLTRAIN DLINFO PYTHON_ABI
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-python.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
n=0

point() { # point STATUS DESC [LOG]: one TAP point, the log's end on failure
  n=$((n + 1))
  if [ "$1" -eq 0 ]; then
    echo "ok $n - $2"
  else
    echo "not ok $n - $2"
    [ -n "${3:-}" ] && [ -s "$3" ] && tail -n 20 "$3" | sed 's/^/# /'
  fi
}

# A copy of the package, so that pip's in-tree build writes nothing into the
# source tree (which make distcheck keeps read-only).
cp -R "$srcdir/python" "$tmp/src" && rm -rf "$tmp/src/build" "$tmp/src"/*.egg-info
venv=$tmp/venv
{
  "$PYTHON" -m venv --system-site-packages "$venv" &&
    "$venv/bin/python" -m pip install --no-deps --no-build-isolation --no-index \
      --disable-pip-version-check --quiet "$tmp/src" &&
    # The installed copy is the one imported, not the sources.
    (cd "$tmp" && "$venv/bin/python" -c 'import dlrt, sys
assert dlrt.__file__.startswith(sys.prefix), dlrt.__file__
print(dlrt.__file__, dlrt.library_path)')
} >"$tmp/install.log" 2>&1
installed=$?
point $installed "pip install ./python into a fresh venv (python3 -m venv --system-site-packages)" \
  "$tmp/install.log"

if [ $installed -eq 0 ]; then
  # Found through pkg-config alone: a dlrt.pc naming the build's library.
  mkdir -p "$tmp/pc"
  printf 'libdir=%s\nName: dlrt\nDescription: dlrt\nVersion: 0.1.0\nLibs: -L${libdir} -ldlrt\n' \
    "$(dirname "$DLRT_LIBRARY")" >"$tmp/pc/dlrt.pc"
  (cd "$tmp" && env -u DLRT_LIBRARY PKG_CONFIG_PATH="$tmp/pc" "$venv/bin/python" -c '
import dlrt, os, sys
want = os.path.dirname(sys.argv[1])
assert os.path.dirname(dlrt.library_path) == want, (dlrt.library_path, want)
assert dlrt.devices(), "no device"' "$DLRT_LIBRARY") >"$tmp/pc.log" 2>&1
  point $? "the library found through pkg-config's dlrt.pc (PKG_CONFIG_PATH, no DLRT_LIBRARY)" \
    "$tmp/pc.log"
  (cd "$tmp" && DLRT_LIBRARY=$tmp/absent.so "$venv/bin/python" -c '
import sys
try:
    import dlrt
except ImportError as e:
    assert "DLRT_LIBRARY" in str(e) and "absent.so" in str(e), e
    sys.exit(0)
sys.exit("imported without a library")') >"$tmp/absent.log" 2>&1
  point $? "a DLRT_LIBRARY naming no library: an ImportError that names it" "$tmp/absent.log"

  (cd "$tmp" && "$venv/bin/python" -m pytest -p no:cacheprovider -q \
    --junitxml="$tmp/junit.xml" "$tmp/src/tests") >"$tmp/pytest.log" 2>&1
  pytest_status=$?
  # Its closing line, for the log ("87 passed in 30.1s").
  tail -n 1 "$tmp/pytest.log" | sed 's/^/# pytest: /'
  "$PYTHON" "$srcdir/tests/python-tap.py" "$tmp/junit.xml" $((n + 1)) 2>"$tmp/count"
  n=$((n + $(tail -n 1 "$tmp/count")))
  if [ $pytest_status -ne 0 ] && ! grep -q '^not ok' "$tmp/pytest.log" && \
     ! grep -q 'failed\|error' "$tmp/pytest.log"; then
    point 1 "pytest exited $pytest_status" "$tmp/pytest.log"
  fi
else
  point 1 "pytest over the package: not run, the install failed (see above)"
fi
echo "1..$n"
