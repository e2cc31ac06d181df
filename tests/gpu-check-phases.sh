# gpu-check-phases.sh — the phases of tests/gpu-check.sh, sourced by it (see
# its header for what each checks and its budget). A phase is a function
# phase_NAME run in its own process under a timeout, with the GC_* variables
# of the environment (GC_MODE device or rehearse, GC_WORK the scratch folder,
# GC_SRC the unpacked tarball, GC_BUILD the build, GC_PREFIX the unpacked
# packages, GC_REPORT the report, GC_DUT the device under test); it ends with
# `result RESULT KEY...` and may add rows with `row NAME RESULT SECONDS KEY...`.
# shellcheck shell=bash

phase_env() {
  local gpu= torch
  {
    echo "mode: $GC_MODE, $(nproc) cores, scratch $GC_WORK"
    uname -a
    grep -E '^(PRETTY_NAME|VERSION_ID)=' /etc/os-release 2>/dev/null
    ldd --version 2>&1 | head -1
    free -g 2>/dev/null | head -2
    gcc --version 2>&1 | head -1
    "$GC_CUDA/bin/nvcc" --version 2>&1 | tail -2
    echo "compute-sanitizer: ${GC_SANITIZER:-none}"
    for t in "${autotools[@]}" pkg-config dpkg ar xz make; do
      printf '%-12s %s\n' "$t" "$(PATH=$GC_ORIG_PATH command -v "$t" || echo '-')"
    done
  } 2>&1
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi 2>&1
    gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null |
      head -1)
  fi
  torch=$(py -c 'import torch
print(torch.__version__, "cuda" if torch.cuda.is_available() else "no cuda",
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>/dev/null)
  echo "torch: ${torch:-none} ($GC_PY)"
  local nvcc glibc
  nvcc=$("$GC_CUDA/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
  glibc=$(ldd --version 2>&1 | head -1 | awk '{print $NF}')
  local key="${gpu:-no GPU}; nvcc ${nvcc:-none}; gcc $(gcc -dumpfullversion 2>/dev/null);"
  key+=" glibc $glibc; torch ${torch:-none}; $(nproc) cores"
  if rehearsal; then
    result PASS "$key"
  elif [[ -z $gpu ]]; then
    result FAIL "nvidia-smi lists no GPU; $key"
  elif [[ -z $nvcc ]]; then
    result FAIL "no nvcc in $GC_CUDA/bin; $key"
  else
    result PASS "$key"
  fi
}

phase_tarball() {
  local t
  if [[ -n ${GC_TARBALL_ARG:-} ]]; then
    [[ -f $GC_TARBALL_ARG ]] || { result FAIL "--tarball $GC_TARBALL_ARG: no such file"; return; }
    t=$GC_TARBALL_ARG
  elif rehearsal; then
    # With the machine's own PATH: making the tarball is the one step that
    # needs autotools.
    PATH=$GC_ORIG_PATH build_dir=${GC_BUILD_DIR_ARG:-} make_tarball "$GC_WORK/dist" || {
      cp "$GC_WORK/dist/dist.log" "$GC_REPORT/" 2>/dev/null
      result FAIL "make dist failed: $(grep -m1 -iE 'error|missing' "$GC_WORK/dist/dist.log" |
        cut -c1-200) (see dist.log)"
      return
    }
    cp "$GC_WORK/dist/dist.log" "$GC_REPORT/"
    t=$(tarball)
  else
    t=$(tarball) || true
    [[ -n $t ]] || {
      result FAIL "no dlrt-*.tar.gz in $GC_DEBS: run tests/gpu-check.sh --prepare on a" \
        "machine with autotools and carry .debs"
      return
    }
  fi
  result PASS "$(basename "$t"), $(du -k "$t" | cut -f1) KiB, made $(date -r "$t" '+%F %T')"
}

# Files a dist tarball holds that the tree has only when bootstrapped or built
# in place (never to be compared with the tree's).
generated_file() {
  case $1 in
    configure | Makefile.in | aclocal.m4 | config.h.in | build-aux/* | m4/libtool.m4 | m4/lt*.m4 | \
      docs/man/*.1 | kernels/opencl_source.c) return 0 ;;
  esac
  return 1
}

phase_source() {
  local t
  t=$(tarball) || true
  [[ -f $t ]] || { result FAIL "no tarball"; return; }
  rm -rf "$GC_SRC" "$GC_WORK/unpack" && mkdir -p "$GC_WORK/unpack" &&
    tar xzf "$t" -C "$GC_WORK/unpack" && mv "$GC_WORK"/unpack/dlrt-* "$GC_SRC" || {
    result FAIL "cannot unpack $t"
    return
  }
  [[ -x $GC_SRC/configure ]] || { result FAIL "$(basename "$t") has no configure"; return; }
  # The tarball must hold the tree's sources: one made before the last
  # change would check old code.
  local files=0 same=0 stale=() f
  while IFS= read -r f; do
    files=$((files + 1))
    generated_file "$f" && continue
    [[ -f $GC_ROOT/$f ]] || continue
    if cmp -s "$GC_SRC/$f" "$GC_ROOT/$f"; then same=$((same + 1)); else stale+=("$f"); fi
  done < <(cd "$GC_SRC" && find . -type f | sed 's|^\./||' | sort)
  echo "$files files, $same the same as $GC_ROOT's, ${#stale[@]} different: ${stale[*]}"
  local absent
  # A source the tarball lacks (one Makefile.am does not list) fails the
  # build there, on the lent machine's clock: found here instead.
  absent=$(cd "$GC_ROOT" && for f in lib/*.h lib/*/*.c lib/*/*.h backends/*/*.c backends/*/*.h \
    kernels/*.h kernels/*.c kernels/*.cu tools/*.c tools/*.h tests/*.c tests/*.h tests/*.sh \
    tests/*.py python/*.toml python/*/*.py; do [[ -f $f && ! -f $GC_SRC/$f ]] && echo "$f"; done)
  [[ -n $absent ]] && echo "in the tree but not in the tarball: $absent"
  if [[ -n $absent ]]; then
    result FAIL "the tarball lacks $(echo "$absent" | wc -w) of the tree's sources" \
      "($(echo "$absent" | head -n 1)...): list them in Makefile.am"
  elif ((${#stale[@]})); then
    result FAIL "${#stale[@]} of its files differ from the tree (${stale[0]}...): make it" \
      "again (tests/gpu-check.sh --prepare)"
  else
    result PASS "$files files, configure pre-generated; $same sources as in the tree$([[ -n \
      $absent ]] && echo "; $(wc -w <<<"$absent") tree files not in it (see log)")"
  fi
}

# unpack_deb DEB DIR: dpkg -x, or ar and tar where dpkg is missing.
unpack_deb() {
  if command -v dpkg >/dev/null; then
    dpkg -x "$1" "$2"
  else
    local tmp
    tmp=$(mktemp -d) && (cd "$tmp" && ar x "$1" && tar xf data.tar.* -C "$2")
    local rc=$?
    rm -rf "$tmp"
    return $rc
  fi
}

# system_library NAME: the machine's NAME.N (libz.so -> /lib/.../libz.so.1),
# from ldconfig's cache or the usual folders; empty when it has none.
system_library() {
  local name=$1 d f
  f=$(ldconfig -p 2>/dev/null | awk -v n="$name." 'index($1, n) == 1 && $NF ~ /^\// {print $NF; exit}')
  if [[ -z $f ]]; then
    for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64; do
      f=$(ls "$d/$name".[0-9]* 2>/dev/null | head -1)
      [[ -n $f ]] && break
    done
  fi
  echo "$f"
}

# The OpenCL driver the check's .icd file names: NVIDIA's there, the
# machine's own (PoCL) in a rehearsal, so the same loader path is taken.
opencl_vendor_library() {
  local lib
  if rehearsal; then
    lib=$(cat /etc/OpenCL/vendors/*.icd 2>/dev/null | head -1)
  else
    lib=$(find /usr/local/nvidia -name 'libnvidia-opencl.so.1' 2>/dev/null | head -1)
    [[ -n $lib ]] || lib=$(ldconfig -p 2>/dev/null | awk '/libnvidia-opencl\.so\.1 / {print $NF; exit}')
  fi
  echo "$lib"
}

phase_deps() {
  local missing=() p
  for p in "${debs_needed[@]}"; do
    compgen -G "$GC_DEBS/${p}_*.deb" >/dev/null || missing+=("$p")
  done
  if ((${#missing[@]})); then
    result FAIL "$GC_DEBS lacks ${missing[*]}: run tests/gpu-check.sh --fetch-debs where" \
      "apt-get reaches Debian's registry (no network here?)"
    return
  fi
  rm -rf "$GC_PREFIX" && mkdir -p "$GC_PREFIX" || return 1
  local d n=0
  for d in "$GC_DEBS"/*.deb; do
    unpack_deb "$d" "$GC_PREFIX" || { result FAIL "cannot unpack $(basename "$d")"; return; }
    n=$((n + 1))
  done
  # Folders shaped as configure's --with-X=DIR wants them (DIR/include,
  # DIR/lib), whatever the compiler's multiarch triplet.
  local multi=$GC_PREFIX/usr/lib/x86_64-linux-gnu
  mkdir -p "$GC_PREFIX/openblas" "$GC_PREFIX/sys"
  ln -s "$GC_PREFIX/usr/include/x86_64-linux-gnu/openblas-pthread" "$GC_PREFIX/openblas/include"
  ln -s "$multi/openblas-pthread" "$GC_PREFIX/openblas/lib"
  ln -s "$GC_PREFIX/usr/include" "$GC_PREFIX/sys/include"
  ln -s "$multi" "$GC_PREFIX/sys/lib"
  # zlib alone, for CPPFLAGS and LDFLAGS: configure keeps them in the
  # Makefiles, and a -L there holding libOpenCL would come before any
  # --with-opencl=DIR a test gives (tests/test-configure.sh).
  mkdir -p "$GC_PREFIX/zlib/include" "$GC_PREFIX/zlib/lib"
  ln -s "$GC_PREFIX"/usr/include/{zlib,zconf}.h "$GC_PREFIX/zlib/include/"
  ln -s "$multi"/libz.{so,a} "$GC_PREFIX/zlib/lib/"
  # A development link naming a library outside the prefix (zlib1g-dev's
  # libz.so names /lib/x86_64-linux-gnu/libz.so.1.2.13, this Debian's own)
  # dangles on another machine: point it at that machine's library of the
  # same soname (libz.so.1), which is what programs load there anyway.
  local link lib relinked=()
  while IFS= read -r link; do
    lib=$(system_library "$(basename "$link")")
    if [[ -z $lib ]]; then
      result FAIL "$(basename "$link") names $(readlink "$link"), and this machine has no" \
        "$(basename "$link").N"
      return
    fi
    ln -sfn "$lib" "$link"
    relinked+=("$(basename "$link") -> $lib")
  done < <(find "$GC_PREFIX/usr/lib" -type l -name 'lib*.so' -lname '/*')
  ((${#relinked[@]})) && echo "relinked: ${relinked[*]}"
  local f lacking=()
  for f in openblas/include/cblas.h openblas/lib/libopenblas.so openblas/lib/libopenblas.so.0 \
    sys/include/CL/cl.h sys/lib/libOpenCL.so sys/include/clblast_c.h sys/lib/libclblast.so \
    zlib/include/zlib.h zlib/lib/libz.so sys/lib/libgfortran.so.5; do
    [[ -e $GC_PREFIX/$f ]] || lacking+=("$f")
  done
  if ((${#lacking[@]})); then
    result FAIL "the unpacked packages lack ${lacking[*]}"
    return
  fi
  # Packages of a newer Debian than the machine's C library would link here
  # and fail there: say so now, not at the first test.
  local want=0 have v
  have=$(ldd --version 2>&1 | head -1 | awk '{print $NF}')
  for f in "$GC_PREFIX"/openblas/lib/libopenblas.so.0 "$multi"/libclblast.so.1 \
    "$multi"/libgfortran.so.5 "$multi"/libOpenCL.so.1; do
    v=$(objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
    [[ -n $v ]] && want=$(printf '%s\n' "$want" "$v" | sort -V | tail -1)
  done
  echo "glibc: the packages need $want, the machine has $have"
  if [[ $(printf '%s\n' "$want" "$have" | sort -V | tail -1) != "$have" ]]; then
    result FAIL "the .debs need glibc $want, this machine has $have: fetch them on an older" \
      "Debian (or build OpenBLAS here)"
    return
  fi
  # CLBlast is C++: the machine's libstdc++ must have its GLIBCXX versions.
  local cxx_want cxx_have stdcxx
  cxx_want=$(objdump -T "$multi/libclblast.so.1" 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' |
    sed 's/GLIBCXX_//' | sort -V | tail -1)
  stdcxx=$(system_library libstdc++.so)
  cxx_have=$(strings "$stdcxx" 2>/dev/null | grep -o '^GLIBCXX_[0-9.]*$' | sed 's/GLIBCXX_//' |
    sort -V | tail -1)
  echo "libstdc++: CLBlast needs GLIBCXX_$cxx_want, $stdcxx has up to GLIBCXX_$cxx_have"
  if [[ -n $cxx_want && -n $cxx_have &&
    $(printf '%s\n' "$cxx_want" "$cxx_have" | sort -V | tail -1) != "$cxx_have" ]]; then
    result FAIL "libclblast.so.1 needs GLIBCXX_$cxx_want, this machine's libstdc++ has" \
      "GLIBCXX_$cxx_have"
    return
  fi
  # make, when the machine has none.
  if ! command -v make >/dev/null; then
    ln -sf "$GC_PREFIX/usr/bin/make" "$GC_WORK/bin/make"
    echo "make: the one from the .debs"
  fi
  # OpenCL: our own .icd folder, naming the vendor's library.
  local icd
  lib=$(opencl_vendor_library)
  mkdir -p "$GC_WORK/icd"
  if [[ -n $lib ]]; then
    icd=$GC_WORK/icd/$(basename "${lib%%.so*}").icd
    echo "$lib" >"$icd"
    echo "OpenCL: $icd names $lib; OCL_ICD_VENDORS=$OCL_ICD_VENDORS"
  fi
  result PASS "$n .debs into $GC_PREFIX; glibc $want needed, $have here;" \
    "${relinked[*]:+${relinked[*]}; }OpenCL ICD:" \
    "${lib:-none found (no OpenCL platform)}$(rehearsal && echo ' (stand-in for libnvidia-opencl.so.1)')"
}

phase_configure() {
  local t found=()
  for t in "${autotools[@]}"; do
    command -v "$t" >/dev/null && found+=("$t=$(command -v "$t")")
  done
  if ((${#found[@]})); then
    result FAIL "still on PATH: ${found[*]}"
    return
  fi
  echo "PATH=$PATH"
  echo "command -v autoreconf: $(command -v autoreconf || echo 'none, as it must be')"
  local args=(--prefix="$GC_WORK/install" --with-cuda="$GC_CUDA"
    --with-openblas="$GC_PREFIX/openblas" --with-opencl="$GC_PREFIX/sys"
    --with-clblast="$GC_PREFIX/sys" --without-mpi NVCC_ARCHS=90)
  # NCCL comes with PyTorch's pip wheels (nvidia-nccl-cu13): its header
  # builds dlrt's NCCL path, and its library is what dlopen loads.
  local nccl
  nccl=$(py -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
  if [[ -n $nccl && -f $nccl/include/nccl.h ]]; then
    args+=(--with-nccl="$nccl")
  fi
  rm -rf "$GC_BUILD" && mkdir -p "$GC_BUILD" && cd "$GC_BUILD" || return 1
  echo "configure ${args[*]}"
  "$GC_SRC/configure" "${args[@]}" >"$GC_REPORT/configure.out" 2>&1
  local rc=$?
  cp config.log "$GC_REPORT/" 2>/dev/null
  if ((rc != 0)) && [[ -n $nccl ]]; then
    echo "configure with --with-nccl=$nccl failed; again without it"
    row "configure --with-nccl" FAIL "" "--with-nccl=$nccl refused: $(grep -m1 'error:' \
      "$GC_REPORT/configure.out" | cut -c1-200)"
    args=("${args[@]/--with-nccl=*/--without-nccl}")
    "$GC_SRC/configure" "${args[@]}" >"$GC_REPORT/configure.out" 2>&1
    rc=$?
    cp config.log "$GC_REPORT/" 2>/dev/null
  fi
  tail -14 "$GC_REPORT/configure.out"
  if ((rc != 0)); then
    result FAIL "$(grep -m1 'error:' "$GC_REPORT/configure.out" | cut -c1-240)"
    return
  fi
  local s=$GC_REPORT/configure.out want bad=()
  for want in 'cuda backend: +yes' 'opencl backend: +yes' 'CLBlast GEMM: +yes'; do
    grep -Eq "^ +$want" "$s" || bad+=("${want%%:*}")
  done
  if ((${#bad[@]})); then
    result FAIL "configure left out: ${bad[*]} (see configure.out)"
    return
  fi
  result PASS "autotools off PATH (command -v autoreconf: none); cuda $(sed -n \
    's/^ *cuda backend: *yes.*sm: *\([0-9 ]*\).*/sm \1/p' "$s" | xargs), opencl, CLBlast:" \
    "yes; NCCL: $(sed -n 's/^ *NCCL: *//p' "$s")"
}

phase_build() {
  cd "$GC_BUILD" || return 1
  make -j"$GC_JOBS" >"$GC_REPORT/build.log" 2>&1 || {
    grep -E 'error|Error' "$GC_REPORT/build.log" | head -20
    tail -20 "$GC_REPORT/build.log"
    result FAIL "make: $(grep -m1 -E 'error' "$GC_REPORT/build.log" | cut -c1-200)"
    return
  }
  # The test programs, without running them.
  make -j"$GC_JOBS" check TESTS= >>"$GC_REPORT/build.log" 2>&1 || {
    tail -20 "$GC_REPORT/build.log"
    result FAIL "make check's programs: $(grep -m1 -E 'error' "$GC_REPORT/build.log" | cut -c1-200)"
    return
  }
  # Every library the programs load must be found (ldd through libtool, so
  # the build's own libdlrt.so is the one looked at).
  local prog unresolved=() line
  for prog in tools/dlinfo tools/dlbench tools/dltrain; do
    while IFS= read -r line; do
      unresolved+=("$prog: $line")
    done < <(./libtool --mode=execute ldd "$prog" 2>&1 | grep 'not found')
    ./libtool --mode=execute ldd "$prog" >>"$GC_REPORT/ldd.txt" 2>&1
  done
  if ((${#unresolved[@]})); then
    result FAIL "unresolved: ${unresolved[*]}"
    return
  fi
  local blas
  blas=$(grep -m1 'libopenblas' "$GC_REPORT/ldd.txt" | awk '{print $3}')
  result PASS "make -j$GC_JOBS: libdlrt, 4 tools, $(ls tests/test-* | grep -vc '\.') test" \
    "programs; every library found (OpenBLAS: $blas)"
}

phase_dlinfo() {
  cd "$GC_BUILD" || return 1
  ./tools/dlinfo || { result FAIL "dlinfo exited $?"; return; }
  ./tools/dlinfo --json >"$GC_REPORT/dlinfo.json" || { result FAIL "dlinfo --json failed"; return; }
  local key
  if judge dlinfo "$GC_REPORT/dlinfo.json" --want "$GC_DUT,cpu:0"; then
    result PASS "$key"
  else
    result FAIL "$key"
  fi
}

# The tests that run on every device (their logs must name the device).
per_device_tests() {
  (cd "$GC_SRC/tests" && grep -lE 'tap_for_each_device|dlrt_device_get\(' test-*.c) |
    sed 's|^\(.*\)\.c$|tests/\1|'
}

# skipped_on BACKEND LOG...: the "# SKIP" lines naming BACKEND that
# skip_allowed does not excuse, as FILE: LINE.
skipped_on() {
  local backend=$1 allowed
  shift
  allowed=$(printf '%s|' "${skip_allowed[@]}")
  allowed=${allowed%|}
  grep -HiE "^ok [0-9]+.*# *SKIP.*$backend" "$@" 2>/dev/null | grep -viE "$allowed"
}

# all_tests: make check's TESTS, one a line.
all_tests() {
  printf 'gc-print-tests:\n\t@echo $(TESTS)\n' >"$GC_WORK/print-tests.mk"
  make -s -C "$GC_BUILD" -f Makefile -f "$GC_WORK/print-tests.mk" gc-print-tests | tr ' ' '\n' |
    grep .
}

# run_tests NAME TESTS...: make check for these tests, with DLRT_TEST_REQUIRE.
run_tests() {
  local name=$1
  shift
  cd "$GC_BUILD" || return 1
  DLRT_TEST_REQUIRE=$GC_REQUIRE make -k -j"$GC_JOBS" check TESTS="$*" \
    >"$GC_REPORT/$name.log" 2>&1
  local rc=$?
  mkdir -p "$GC_REPORT/tests"
  cp tests/*.log "$GC_REPORT/tests/" 2>/dev/null
  cp test-suite.log "$GC_REPORT/tests/$name-suite.log" 2>/dev/null
  grep -E '^(# [A-Z]+:|FAIL|ERROR|XPASS)' "$GC_REPORT/$name.log"
  return $rc
}

phase_tests_device() {
  local tests rc
  mapfile -t tests < <(per_device_tests)
  run_tests tests-device "${tests[@]}"
  rc=$?
  local points=0 failed=0 absent=() t log
  for t in "${tests[@]}"; do
    log=$GC_BUILD/$t.log
    points=$((points + $(grep -cE '^(not )?ok ' "$log" 2>/dev/null)))
    failed=$((failed + $(grep -cE '^not ok ' "$log" 2>/dev/null)))
    grep -q "$GC_DUT" "$log" 2>/dev/null || absent+=("$(basename "$t")")
  done
  local skips
  skips=$(cd "$GC_BUILD" && skipped_on "$GC_REQUIRE" "${tests[@]/%/.log}")
  [[ -n $skips ]] && echo "SKIPs naming $GC_REQUIRE:" && echo "$skips"
  local key="${#tests[@]} per-device tests, $points points, $failed failed;"
  key+=" $(grep -c . <<<"$skips") SKIPs naming $GC_REQUIRE"
  if ((rc != 0 || failed > 0)); then
    result FAIL "$key; failing: $(grep -E '^(FAIL|ERROR):' "$GC_REPORT/tests-device.log" |
      awk '{print $2}' | xargs)"
  elif ((${#absent[@]})); then
    result FAIL "$key; never ran on $GC_DUT: ${absent[*]}"
  elif [[ -n $skips ]]; then
    result FAIL "$key: $(head -1 <<<"$skips" | cut -c1-160)"
  else
    result PASS "$key; each ran on $GC_DUT"
  fi
  if rehearsal; then
    row "tests cuda:0" NEEDS-DEVICE "" "the same ${#tests[@]} tests with DLRT_TEST_REQUIRE=cuda," \
      "each log naming cuda:0"
  fi
}

phase_tests_rest() {
  local rc list=() device t
  # A rehearsal runs a handful; the device, all the rest of make check.
  if rehearsal; then
    list=(tests/test-status tests/test-kernel-table tests/test-options tests/test-dlinfo.sh
      tests/test-layers.sh)
  else
    device=" $(per_device_tests | xargs) "
    # The Python package's suite needs pytest, NumPy and venv in the
    # machine's python3, which a lent machine may lack: it is a CPU test
    # that CI runs, left out here (and said so) rather than failed.
    if ! /usr/bin/python3 -c 'import pytest, numpy, venv' >/dev/null 2>&1; then
      device+="tests/test-python.sh "
      echo "tests/test-python.sh left out: this python3 lacks pytest, numpy or venv (CI runs it)"
    fi
    while IFS= read -r t; do
      [[ $device == *" $t "* ]] || list+=("$t")
    done < <(all_tests)
    ((${#list[@]})) || { result FAIL "make check lists no tests (see the log)"; return; }
  fi
  run_tests tests-rest "${list[@]}"
  rc=$?
  local skips
  skips=$(cd "$GC_BUILD" && skipped_on "$GC_REQUIRE" tests/*.log)
  [[ -n $skips ]] && echo "SKIPs naming $GC_REQUIRE:" && echo "$skips"
  local summary
  summary=$(grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR):' "$GC_REPORT/tests-rest.log" | tr -d '#' |
    xargs)
  if ((rc != 0)); then
    result FAIL "$summary; failing: $(grep -E '^(FAIL|ERROR):' "$GC_REPORT/tests-rest.log" |
      awk '{print $2}' | xargs)"
  elif [[ -n $skips ]]; then
    result FAIL "$summary; $(grep -c . <<<"$skips") SKIPs naming $GC_REQUIRE:" \
      "$(head -1 <<<"$skips" | cut -c1-140)"
  else
    result PASS "${#list[@]} tests: $summary; no SKIP naming $GC_REQUIRE in any log"
  fi
  rehearsal && row "tests (rest) cuda:0" NEEDS-DEVICE "" "all of make check with" \
    "DLRT_TEST_REQUIRE=cuda; a SKIP naming cuda fails"
}

# The conformance programs under compute-sanitizer TOOL.
sanitize() {
  local tool=$1 progs
  shift
  progs=("$@")
  if rehearsal; then
    result NEEDS-DEVICE "compute-sanitizer --tool $tool on ${progs[*]} (DLRT_BACKEND=cuda);" \
      "sanitizer here: ${GC_SANITIZER:-none}"
    return
  fi
  [[ -n $GC_SANITIZER ]] || { result FAIL "no compute-sanitizer on this machine"; return; }
  cd "$GC_BUILD" || return 1
  # Does the tool run here at all (gVisor's runtime refuses it)?
  DLRT_BACKEND=cuda ./libtool --mode=execute "$GC_SANITIZER" --tool "$tool" \
    --error-exitcode 99 tools/dlinfo >"$GC_REPORT/$tool-dlinfo.log" 2>&1
  local rc=$?
  if grep -qiE 'not supported|unsupported|error 999' "$GC_REPORT/$tool-dlinfo.log" && ((rc != 0)); then
    result UNSUPPORTED "compute-sanitizer refuses this machine: $(grep -m1 -iE \
      'not supported|unsupported' "$GC_REPORT/$tool-dlinfo.log" | cut -c1-160)"
    return
  fi
  # dlinfo itself is checked too (its free-memory queries, every device).
  local p bad=() summary=("dlinfo: $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' \
    "$GC_REPORT/$tool-dlinfo.log" | sed -E 's/.*(ERROR|RACECHECK) SUMMARY: //')")
  ((rc != 0)) && bad+=("dlinfo (exit $rc)")
  # Each program its share of the phase's time left, so that one slow
  # program does not hide the others' results.
  local share=$(((GC_CAP - 10 - SECONDS) / ${#progs[@]}))
  ((share < 15)) && share=15
  for p in "${progs[@]}"; do
    DLRT_BACKEND=cuda DLRT_TEST_REQUIRE=cuda timeout -k 5 "$share" ./libtool --mode=execute \
      "$GC_SANITIZER" --tool "$tool" --error-exitcode 99 "tests/$p" >"$GC_REPORT/$tool-$p.log" 2>&1
    rc=$?
    if ((rc == 124 || rc == 137)); then
      summary+=("$p: timed out after $share s")
    else
      summary+=("$p: $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$GC_REPORT/$tool-$p.log" |
        sed -E 's/.*(ERROR|RACECHECK) SUMMARY: //')")
    fi
    ((rc != 0)) && bad+=("$p (exit $rc)")
  done
  printf '%s\n' "${summary[@]}"
  if ((${#bad[@]})); then
    result FAIL "${bad[*]}; ${summary[*]}"
  else
    result PASS "${summary[*]}"
  fi
}
phase_memcheck() {
  sanitize memcheck test-backend-ops test-gemm test-copy test-stream test-elementwise test-norm
}
phase_racecheck() { sanitize racecheck test-backend-ops test-norm; }

phase_dlbench() {
  if rehearsal; then
    result NEEDS-DEVICE "dlbench copy gemm ops train --device cuda:0 --json, GEMMs beside cuBLAS"
    return
  fi
  cd "$GC_BUILD" || return 1
  ./tools/dlbench copy gemm ops train --device "$GC_DUT" --json "$GC_REPORT/dlbench-cuda.json" \
    --csv "$GC_REPORT/dlbench-cuda.csv" --quiet >"$GC_REPORT/dlbench-cuda.txt" 2>&1
  local rc=$? key
  cat "$GC_REPORT/dlbench-cuda.txt"
  judge dlbench "$GC_REPORT/dlbench-cuda.json" --device "$GC_DUT" --vendor cublas \
    --figures "$GC_REPORT/figures.json"
  local krc=$?
  if ((rc != 0 || krc != 0)); then result FAIL "dlbench exit $rc; $key"; else result PASS "$key"; fi
}

phase_dlbench_peers() {
  cd "$GC_BUILD" || return 1
  local specs suites
  # Every device but the GPU's CUDA ones: the cpu, and OpenCL (NVIDIA's there).
  specs=$(py -c 'import json, sys
print(",".join(d["spec"] for d in json.load(open(sys.argv[1]))["devices"]
               if d["backend"] != "cuda"))' "$GC_REPORT/dlinfo.json") || {
    result FAIL "no device list (dlinfo.json)"
    return
  }
  if rehearsal; then suites=copy,gemm,ops,train; else suites=copy,gemm; fi
  ./tools/dlbench ${suites//,/ } --quick --device "$specs" --json "$GC_REPORT/dlbench-peers.json" \
    --quiet >"$GC_REPORT/dlbench-peers.txt" 2>&1
  local rc=$? key
  cat "$GC_REPORT/dlbench-peers.txt"
  judge dlbench "$GC_REPORT/dlbench-peers.json" --device "$specs" --suites "$suites" \
    --figures "$GC_REPORT/figures.json"
  local krc=$?
  if ((rc != 0 || krc != 0)); then result FAIL "dlbench exit $rc; $key"; else result PASS "$key"; fi
}

# dltrain_run OUT ARGS...: one dltrain --json run, its stderr beside it.
dltrain_run() {
  local o=$1
  shift
  (cd "$GC_BUILD" && ./tools/dltrain "$@" --epochs 1 --batch 64 --seed 1 --json --quiet) \
    >"$o" 2>"${o%.json}.err"
}

phase_dltrain() {
  local data=$GC_DEBS/fashion-mnist dir=$GC_REPORT/dltrain limit models precisions torch_py=
  mkdir -p "$dir"
  if [[ ! -f $data/train-images-idx3-ubyte.gz ]]; then
    result FAIL "no Fashion-MNIST subset in $data: run tests/gpu-check.sh --fetch-debs"
    return
  fi
  if rehearsal; then
    limit=3200 models=(mlp) precisions=(fp32 bf16)
  else
    limit=$fmnist_count models=(mlp cnn) precisions=(fp32 fp16 bf16)
  fi
  local common=(--data "$data" --limit "$limit")
  local m p s0 key
  # The device first, alone on the machine: its speed is a figure.
  for m in "${models[@]}"; do
    for p in "${precisions[@]}"; do
      dltrain_run "$dir/$m-$p-dut.json" --model "$m" --precision "$p" --device "$GC_DUT" \
        "${common[@]}"
    done
  done
  # PyTorch on the same device (the GPU there; the CPU in a rehearsal, where
  # a python3 with torch may be found).
  local torch_dev=cuda
  if rehearsal; then
    torch_dev=cpu
    local c
    for c in "$GC_PY" /usr/bin/python3; do
      LD_LIBRARY_PATH=$GC_ORIG_LD_LIBRARY_PATH "$c" -c 'import torch' 2>/dev/null &&
        torch_py=$c && break
    done
  else
    torch_py=$GC_PY
  fi
  local torch_json=
  if [[ -n $torch_py ]]; then
    s0=$SECONDS
    LD_LIBRARY_PATH=$GC_ORIG_LD_LIBRARY_PATH "$torch_py" "$GC_SRC/bench/pytorch_train.py" \
      --device "$torch_dev" --model "$(IFS=,; echo "${models[*]}")" \
      --precision "$(IFS=,; echo "${precisions[*]}")" --data "$data" --limit "$limit" \
      --epochs 1 --batch 64 --seed 1 --threads "$GC_JOBS" >"$dir/torch.jsonl" 2>"$dir/torch.err"
    local trc=$?
    if ((trc != 0)); then
      row "pytorch $torch_dev" FAIL "$(elapsed $s0)" "bench/pytorch_train.py exited $trc:" \
        "$(tail -1 "$dir/torch.err" | cut -c1-160)"
    else
      torch_json=$dir/torch.jsonl
    fi
  elif rehearsal; then
    row "pytorch" NEEDS-DEVICE "" "no python3 with torch here; PyTorch 2.11 on the GPU there"
  else
    row "pytorch cuda" FAIL "" "$GC_PY cannot import torch"
  fi
  # The cpu's losses with the same seed: the same initial parameters and
  # batches, so only rounding differs.
  for m in "${models[@]}"; do
    for p in "${precisions[@]}"; do
      dltrain_run "$dir/$m-$p-cpu.json" --model "$m" --precision "$p" --device cpu \
        --threads "$GC_JOBS" "${common[@]}"
    done
  done
  local status=PASS
  for m in "${models[@]}"; do
    for p in "${precisions[@]}"; do
      local args=(--model "$m" --precision "$p" --dut "$dir/$m-$p-dut.json"
        --cpu "$dir/$m-$p-cpu.json" --figures "$GC_REPORT/figures.json")
      [[ -n $torch_json ]] && args+=(--torch "$torch_json")
      if judge dltrain-compare "${args[@]}"; then
        row "dltrain $GC_DUT $m $p" PASS "" "$key"
      else
        row "dltrain $GC_DUT $m $p" FAIL "" "$key $(tail -1 "$dir/$m-$p-dut.err" 2>/dev/null |
          cut -c1-120)"
        status=FAIL
      fi
    done
  done
  # Under a device budget: it must spill and keep the unlimited losses.
  for m in "${models[@]}"; do
    local budget
    (cd "$GC_BUILD" && ./tools/dltrain --model "$m" --device "$GC_DUT" --batch 64 --plan --json) \
      >"$dir/$m-plan.json" 2>"$dir/$m-plan.err"
    if ! judge budget "$dir/$m-plan.json"; then
      row "dltrain $GC_DUT $m --mem-limit" FAIL "" "$key $(tail -1 "$dir/$m-plan.err")"
      status=FAIL
      continue
    fi
    budget=$key
    dltrain_run "$dir/$m-limit.json" --model "$m" --device "$GC_DUT" --mem-limit "$budget" \
      "${common[@]}"
    if judge spill-compare --limited "$dir/$m-limit.json" --unlimited "$dir/$m-fp32-dut.json"
    then
      row "dltrain $GC_DUT $m --mem-limit" PASS "" "$key"
    else
      row "dltrain $GC_DUT $m --mem-limit" FAIL "" "$key $(tail -1 "$dir/$m-limit.err" |
        cut -c1-120)"
      status=FAIL
    fi
  done
  if rehearsal; then
    row "dltrain cuda:0" NEEDS-DEVICE "" "mlp, cnn x fp32, fp16, bf16 and --mem-limit on" \
      "cuda:0, against the cpu and PyTorch 2.11 on the GPU ($fmnist_count images)"
  fi
  result "$status" "${#models[@]} models x ${#precisions[@]} precisions on $GC_DUT, $limit" \
    "images: rows below"
}

phase_gpt() {
  cd "$GC_BUILD" || return 1
  local m help
  # Read once: `dltrain --help | grep -q` fails under pipefail when grep
  # stops reading before dltrain has written everything (SIGPIPE).
  help=$(./tools/dltrain --help 2>&1)
  for m in gpt-mini gpt2; do
    if ! grep -q -- "|$m|" <<<"$help"; then
      row "dltrain $m" NOT-BUILT "" "dltrain has no --model $m yet (issue 19); this hook runs" \
        "it on cuda:0 and the cpu once it does"
      continue
    fi
    if rehearsal; then
      row "dltrain $m cuda:0" NEEDS-DEVICE "" "$m on cuda:0 against the cpu"
      continue
    fi
    # The corpus: the fortunes (text files at the top level of the package).
    local corpus=$GC_WORK/fortunes f
    mkdir -p "$corpus"
    for f in "$GC_PREFIX"/usr/share/games/fortunes/*; do
      [[ -f $f && $f != *.* ]] && cp "$f" "$corpus/"
    done
    local steps=100 extra=()
    [[ $m == gpt2 ]] && steps=10 extra=(--batch 4 --context 64)
    local dir=$GC_REPORT/gpt s0=$SECONDS
    mkdir -p "$dir"
    ./tools/dltrain --model "$m" --data "$corpus" --steps "$steps" "${extra[@]}" --seed 1 \
      --device "$GC_DUT" --json --quiet >"$dir/$m-dut.json" 2>"$dir/$m-dut.err"
    local rc=$?
    ./tools/dltrain --model "$m" --data "$corpus" --steps "$steps" "${extra[@]}" --seed 1 \
      --device cpu --threads "$GC_JOBS" --json --quiet >"$dir/$m-cpu.json" 2>"$dir/$m-cpu.err"
    local rc2=$? key
    judge gpt-compare --dut "$dir/$m-dut.json" --cpu "$dir/$m-cpu.json"
    local krc=$?
    if ((rc == 0 && rc2 == 0 && krc == 0)); then
      row "dltrain $m $GC_DUT" PASS "$(elapsed $s0)" "$key; PyTorch side: not wired yet"
    else
      row "dltrain $m $GC_DUT" FAIL "$(elapsed $s0)" "exit $rc/$rc2: $key $(tail -1 \
        "$dir/$m-dut.err" | cut -c1-120)"
    fi
  done
  result PASS "the gpt presets dltrain has (rows below)"
}

