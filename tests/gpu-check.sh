#!/usr/bin/env bash
# gpu-check.sh — dlrt's whole check on a machine with an NVIDIA GPU in one
# call of at most 10 minutes, and its rehearsal on a machine without one.
# The phases are in gpu-check-phases.sh, the JSON reading in gpu-check.py.
#
# It builds dlrt from a `make dist` tarball (configure already generated: that
# machine has no autoconf, automake or libtool, and the check runs with them
# off PATH everywhere) against Debian packages unpacked into a private prefix
# (that machine has no package registry), then runs, each phase under its own
# timeout, and prints and saves a summary table (phase, PASS / FAIL /
# NEEDS-DEVICE / NOT-BUILT / NOT-RUN / UNSUPPORTED, seconds, key figure):
#
#   env            nvidia-smi, nvcc, gcc, glibc, PyTorch and its CUDA, cores
#   tarball        the dist tarball (made here in a rehearsal, carried there)
#   source         unpacked in a scratch folder; its sources must be the tree's
#                  (a stale tarball would check old code)
#   deps           the .debs unpacked with dpkg -x into the private prefix
#                  (never into /); their glibc against the machine's; an
#                  OpenCL .icd file naming NVIDIA's libnvidia-opencl.so.1 (from
#                  /usr/local/nvidia or ldconfig) in the check's own folder,
#                  OCL_ICD_VENDORS pointing there
#   configure      with autotools off PATH (command -v autoreconf must fail),
#                  --with-X=DIR for OpenBLAS, OpenCL, CLBlast, CUDA (and NCCL
#                  from PyTorch's pip wheel when there), sm_90; the cuda,
#                  opencl and CLBlast backends must all say yes
#   build          make -j$(nproc), the tests too; every library libdlrt and
#                  dlbench load must resolve (CUDA's lib64 is on
#                  LD_LIBRARY_PATH, or cuBLAS would not load and every CUDA
#                  GEMM test would SKIP while the run looked green)
#   dlinfo         cuda:0 must be listed, with its memory
#   tests cuda:0   every per-device test (tests/tap.c's tap_for_each_device or
#                  a loop over dlrt_device_get) with DLRT_TEST_REQUIRE=cuda:
#                  a missing, unbuilt or left-out cuda backend, or an op cuda
#                  lacks, is a failed point; each test's log must name cuda:0;
#                  a "# SKIP" naming cuda is a failure unless listed in
#                  skip_allowed below (with why)
#   tests (rest)   the rest of make check, the same SKIP rule over every log
#   memcheck,      the conformance programs (test-backend-ops, test-gemm,
#   racecheck      test-copy, test-stream, test-elementwise, test-norm) under
#                  compute-sanitizer --tool memcheck, and the ones with shared
#                  memory kernels under --tool racecheck, DLRT_BACKEND=cuda
#                  (UNSUPPORTED where the machine's runtime refuses the tool)
#   dlbench cuda:0 copy, gemm, ops and train on cuda:0, every GEMM beside
#                  cuBLAS called directly (a row without cuBLAS's figure, or
#                  whose results disagree, fails); --json kept
#   dlbench peers  copy and gemm (--quick) on the cpu and NVIDIA's OpenCL
#   dltrain        mlp and cnn on cuda:0 in fp32, fp16 and bf16, each against
#                  the cpu's losses with the same seed and against PyTorch on
#                  the same GPU (bench/pytorch_train.py --device cuda
#                  --precision P); and under --mem-limit (3/4 of the planned
#                  peak): it must spill and keep the unlimited run's losses
#   gpt            gpt-mini and gpt2 on cuda:0 against the cpu, once dltrain
#                  --model gpt-mini exists (until then a NOT-BUILT row)
#
# Through those, the latent CUDA faults only a GPU can show (issue 24): fp16
# and bf16 GEMMs accumulating in fp32 with reduced-precision reduction
# disallowed (test-gemm's k = 8192 cases against an fp64 reference, dlbench's
# check against cuBLAS); per-stream cuBLAS workspaces (test-stream's GEMMs on
# several streams, racecheck); sticky errors detected, the device marked lost
# and the first failing call named (the tests' error paths on cuda:0);
# peer copies synchronising both sides with peer access enabled (test-copy
# across devices, where the machine has two); cuda_shutdown destroying NCCL
# communicators (every test's dlrt_shutdown, memcheck's leak report); free
# memory queries creating no context (dlinfo, "auto", budgets); cudaFreeHost
# with the device selected (test-pinned); row copies whose pitch passes
# cudaMemcpy2DAsync's limit falling back to copies by row (test-copy); the
# zero-item launch guard (test-backend-ops' empty shapes).
#
# Budget (one device call of at most 600 s on 16 cores; the caps below are
# upper bounds, and the whole run stops at --budget, default 560 s, leaving
# time to write the report): env 20, tarball 20, source 20, deps 30,
# configure 90, build 150, dlinfo 20, tests cuda:0 120, dlbench cuda:0 90,
# dlbench peers 40, dltrain 150, gpt 60, tests (rest) 150, memcheck 90,
# racecheck 60. Expected: about 450 s in all, most of it configure, build and
# the tests; the phases that matter most for a first look run first.
#
# Usage:
#   tests/gpu-check.sh --prepare [--build-dir DIR]   here, before a device call:
#       downloads the .debs (apt-get download), cuts a Fashion-MNIST subset
#       and makes the dist tarball, all into .debs/ (ignored by git)
#   tests/gpu-check.sh --fetch-debs      the .debs and the data subset only
#   tests/gpu-check.sh --rehearse [--tarball FILE | --build-dir DIR]
#       the CPU side here: tarball, deps, configure with autotools off PATH,
#       build, the non-CUDA phases on the cpu and opencl:0 (PoCL, standing in
#       for the GPU), the CUDA phases as NEEDS-DEVICE rows
#   bash tests/gpu-check.sh              there (device tool: carry [".debs"],
#       timeout_s 600): the whole check; one tarball of every log under $OUT
#   tests/gpu-check.sh --scan-skips cuda LOG...   the SKIPs in test logs that
#       the check would count as failures (exit 1 when there is one)
# Options: --out DIR (default $OUT, else ./gpu-check-out), --debs DIR (default
# .debs), --tarball FILE, --budget SECONDS, --jobs N, --keep (keep the scratch
# folder, with env.sh: `. env.sh; cd build` to run a phase's command again).
# Exit status: 0 when no row is FAIL or NOT-RUN, 1 otherwise, 2 usage.
set -uo pipefail

self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
root=$(dirname "$(dirname "$self")")

# The Debian packages the build needs and such a machine may lack:
# libopenblas-dev is a metapackage, cblas.h is in libopenblas-pthread-dev;
# make in case the machine has none; fortunes for the gpt corpus.
debs_needed=(libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libopenblas0
  libgfortran5 libquadmath0 ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers
  libclblast1 libclblast-dev zlib1g-dev make fortunes)
# Training images the dltrain phase uses (the first N of Fashion-MNIST).
fmnist_count=12800
# Tools a build from the tarball must not need: off PATH for the configure
# and everything after it (m4 and help2man too: only a bootstrap uses them).
autotools=(autoconf autoheader autom4te autoreconf autoscan autoupdate ifnames automake
  aclocal libtool libtoolize m4 help2man)
# SKIP reasons that name cuda and are right on a GPU machine (extended
# regular expressions, matched case-insensitively against the reason):
skip_allowed=(
  'a CUDA device is present'     # test-registry: the no-GPU behaviour, checked without one
  'no host pointer'              # test-alloc, test-stream: a discrete GPU's memory is not mapped
)

usage() {
  sed -n '/^# Usage:/,/^set -uo/p' "$self" | sed '$d; s/^# \{0,1\}//'
  exit "${1:-0}"
}

mode=device phase= tarball_arg= build_dir= debs=${DLRT_DEBS:-$root/.debs}
out=${OUT:-} budget= jobs=$(nproc) keep=no
while (($#)); do
  case $1 in
    --prepare) mode=prepare ;;
    --fetch-debs) mode=fetch ;;
    --rehearse) mode=rehearse ;;
    --phase) phase=${2:?}; shift ;;
    --tarball) tarball_arg=$(realpath "${2:?}"); shift ;;
    --build-dir) build_dir=$(realpath "${2:?}"); shift ;;
    --debs) debs=$(realpath -m "${2:?}"); shift ;;
    --out) out=${2:?}; shift ;;
    --budget) budget=${2:?}; shift ;;
    --jobs) jobs=${2:?}; shift ;;
    --keep) keep=yes ;;
    --scan-skips)
      # --scan-skips BACKEND LOG...: print the SKIPs naming BACKEND that
      # skip_allowed does not excuse; exit 1 when there is one.
      mode=scan scan_backend=${2:?}
      shift 2
      scan_logs=("$@")
      break
      ;;
    -h | --help) usage 0 ;;
    *) echo "gpu-check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# ------------------------------------------------------------ helpers
# Everything below the phases share; a phase runs as `gpu-check.sh --phase
# NAME` in its own process under timeout, reading GC_* from the environment.

note() { printf '%s\n' "$*"; }
# result RESULT KEY...: the phase's own row (its name and seconds the
# parent's); the words of KEY joined by blanks, as echo would.
result() {
  local r=$1
  shift
  printf '%s\t%s\n' "$r" "$*" >"$GC_ROWS/$GC_SEQ.main"
}
# row NAME RESULT SECONDS KEY...: a further row of this phase (SECONDS ""
# for none; no field may be empty, or read would join two tabs into one).
row() {
  local n=$1 r=$2 s=${3:--}
  shift 3
  printf '%s\t%s\t%s\t%s\n' "$n" "$r" "$s" "$*" >>"$GC_ROWS/$GC_SEQ.rows"
}
# py ARGS: python3 with the machine's own library path (our private prefix's
# older libgfortran or zlib must not replace what PyTorch was built with).
py() { LD_LIBRARY_PATH=$GC_ORIG_LD_LIBRARY_PATH "$GC_PY" "$@"; }
helper() { py "$GC_SRC/tests/gpu-check.py" "$@"; }
# judge ARGS: runs helper ARGS and sets key to its line, led by what it found
# wrong (its stderr, which also goes to the phase's log); returns its status.
judge() {
  local why rc
  why=$(mktemp)
  key=$(helper "$@" 2>"$why")
  rc=$?
  cat "$why" >&2
  if ((rc != 0)); then
    key="$(head -3 "$why" | paste -sd ';' | cut -c1-300)${key:+ | $key}"
  fi
  rm -f "$why"
  return $rc
}
rehearsal() { [[ $GC_MODE == rehearse ]]; }
# tarball: the dist tarball this run builds from.
tarball() {
  local t
  if [[ -n ${GC_TARBALL_ARG:-} ]]; then echo "$GC_TARBALL_ARG"; return; fi
  t=$(ls -t "$GC_WORK"/dist/dlrt-*.tar.gz "$GC_DEBS"/dlrt-*.tar.gz 2>/dev/null | head -1)
  [[ -n $t ]] && echo "$t"
}
# elapsed SINCE: whole seconds since a $SECONDS reading.
elapsed() { echo $((SECONDS - $1)); }

# ------------------------------------------------------------ fetching
# The .debs (for this machine's Debian release) and the data subset, into
# $debs. Packages already there are not fetched again.
fetch_debs() {
  mkdir -p "$debs" || return 1
  local missing=() p
  for p in "${debs_needed[@]}"; do
    compgen -G "$debs/${p}_*.deb" >/dev/null || missing+=("$p")
  done
  if ((${#missing[@]})); then
    note "gpu-check: downloading ${missing[*]} into $debs"
    if ! (cd "$debs" && apt-get download "${missing[@]}") >"$debs/.fetch.log" 2>&1; then
      note "gpu-check: apt-get download failed; updating the package lists once"
      apt-get update >>"$debs/.fetch.log" 2>&1
      if ! (cd "$debs" && apt-get download "${missing[@]}") >>"$debs/.fetch.log" 2>&1; then
        tail -5 "$debs/.fetch.log" >&2
        echo "gpu-check: cannot download ${missing[*]} (no network, or no Debian" \
          "package registry?): see $debs/.fetch.log" >&2
        return 1
      fi
    fi
  fi
  local fm=/usr/share/datasets/fashion-mnist tmp
  if [[ ! -f $debs/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
    if [[ ! -f $fm/train-images-idx3-ubyte.gz ]]; then
      tmp=$(mktemp -d) || return 1
      note "gpu-check: $fm absent; downloading dataset-fashion-mnist"
      (cd "$tmp" && apt-get download dataset-fashion-mnist && dpkg -x ./*.deb x) \
        >>"$debs/.fetch.log" 2>&1 || {
        echo "gpu-check: cannot download dataset-fashion-mnist (no network?)" >&2
        rm -rf "$tmp"
        return 1
      }
      fm=$tmp/x/usr/share/datasets/fashion-mnist
    fi
    python3 "$root/tests/gpu-check.py" fmnist-subset "$fm" "$debs/fashion-mnist" \
      "$fmnist_count" || return 1
    [[ -n ${tmp:-} ]] && rm -rf "$tmp"
  fi
  note "gpu-check: $debs holds ${#debs_needed[@]} packages and a Fashion-MNIST subset" \
    "($(du -sh "$debs" | cut -f1))"
}

# make_tarball DEST_DIR: `make dist` into DEST_DIR — in --build-dir when one
# was given (a configured build of this tree), else in a scratch copy of the
# tree, bootstrapped and configured for nothing but that.
make_tarball() {
  local dest=$1 t
  mkdir -p "$dest" || return 1
  if [[ -n $build_dir ]]; then
    make -C "$build_dir" dist >"$dest/dist.log" 2>&1 || { tail -20 "$dest/dist.log"; return 1; }
    t=$(ls -t "$build_dir"/dlrt-*.tar.gz | head -1)
    mv "$t" "$dest/" || return 1
  else
    command -v autoreconf >/dev/null || {
      echo "gpu-check: making the tarball needs autoreconf (or --tarball FILE)" >&2
      return 1
    }
    local scratch
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/dlrt-dist.XXXXXX") || return 1
    # The tree as git sees it (tracked and untracked-not-ignored files), or
    # everything but build folders when it is no git checkout.
    if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
      (cd "$root" && git ls-files -co --exclude-standard -z |
        xargs -0 cp --parents -t "$scratch" 2>/dev/null)
    else
      (cd "$root" && tar cf - --exclude='./_*' --exclude=./.debs --exclude=./.git . |
        tar xf - -C "$scratch")
    fi
    {
      cd "$scratch" && autoreconf -fi && mkdir _dist && cd _dist &&
        ../configure --without-cuda --without-opencl --without-mpi &&
        make -j"$jobs" dist
    } >"$dest/dist.log" 2>&1 || {
      tail -30 "$dest/dist.log"
      rm -rf "$scratch"
      return 1
    }
    mv "$scratch"/_dist/dlrt-*.tar.gz "$dest/" || return 1
    rm -rf "$scratch"
  fi
  ls "$dest"/dlrt-*.tar.gz
}

# ------------------------------------------------------------ the phases
# shellcheck source=tests/gpu-check-phases.sh
. "$(dirname "$self")/gpu-check-phases.sh"

# ------------------------------------------------------------ the runner

# run_phase NAME CAP FUNCTION [NEEDS...]: runs FUNCTION in its own process
# under a timeout of CAP seconds (less when the budget is nearly spent),
# its output in the report; adds its rows. NEEDS: phases that must have
# passed (else the row is NOT-RUN).
declare -A phase_status=()
seq=0
run_phase() {
  local name=$1 cap=$2 fn=$3 need
  shift 3
  seq=$((seq + 1))
  local id
  id=$(printf '%02d' "$seq")
  for need in "$@"; do
    if [[ ${phase_status[$need]:-} != PASS ]]; then
      printf '%s\t%s\t%s\t%s\n' "$name" NOT-RUN 0 "needs $need, which did not pass" \
        >>"$GC_ROWS/all.tsv"
      phase_status[$name]=NOT-RUN
      note "== $name: NOT-RUN (needs $need)"
      return
    fi
  done
  local left=$((deadline - SECONDS - 15))
  ((cap > left)) && cap=$left
  if ((cap < 5)); then
    printf '%s\t%s\t%s\t%s\n' "$name" FAIL 0 "no time left in the ${total_budget} s budget" \
      >>"$GC_ROWS/all.tsv"
    phase_status[$name]=FAIL
    note "== $name: FAIL (no time left)"
    return
  fi
  local log=$GC_REPORT/phase-$id-${fn#phase_}.log start=$SECONDS rc
  GC_SEQ=$id GC_CAP=$cap timeout -k 10 "$cap" bash "$self" --phase "$fn" >"$log" 2>&1
  rc=$?
  local secs=$((SECONDS - start)) res key
  if ((rc == 124 || rc == 137)); then
    res=FAIL key="timed out after $secs s (cap $cap s); see $(basename "$log")"
  elif [[ -f $GC_ROWS/$id.main ]]; then
    IFS=$'\t' read -r res key <"$GC_ROWS/$id.main"
    ((rc != 0)) && [[ $res == PASS ]] && res=FAIL key="exit $rc; $key"
  elif ((rc == 0)); then
    res=PASS key=""
  else
    res=FAIL key="exit $rc: $(tail -1 "$log" | cut -c1-200)"
  fi
  # A phase with a failed row below it has failed.
  if [[ -f $GC_ROWS/$id.rows ]] && [[ $res != FAIL ]] &&
    awk -F'\t' '$2 == "FAIL" || $2 == "NOT-RUN" {bad = 1} END {exit !bad}' "$GC_ROWS/$id.rows"
  then
    res=FAIL key="a row below failed; $key"
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$res" "$secs" "$key" >>"$GC_ROWS/all.tsv"
  if [[ -f $GC_ROWS/$id.rows ]]; then
    local rname rres rsecs rkey
    while IFS=$'\t' read -r rname rres rsecs rkey; do
      printf '%s\t%s\t%s\t%s\n' "  $rname" "$rres" "$rsecs" "$rkey" >>"$GC_ROWS/all.tsv"
    done <"$GC_ROWS/$id.rows"
  fi
  phase_status[$name]=$res
  note "== $name: $res (${secs} s) ${key:0:200}"
  if [[ $res == FAIL ]]; then
    tail -n 12 "$log" | sed 's/^/   | /' | cut -c1-220
  fi
}

if [[ -n $phase ]]; then
  "$phase"
  exit $?
fi

case $mode in
  scan)
    found=$(skipped_on "$scan_backend" "${scan_logs[@]}")
    [[ -z $found ]] || { echo "$found"; exit 1; }
    exit 0
    ;;
  fetch)
    fetch_debs
    exit $?
    ;;
  prepare)
    fetch_debs || exit 1
    rm -f "$debs"/dlrt-*.tar.gz
    make_tarball "$debs" || exit 1
    note "gpu-check: ready; on the device: bash tests/gpu-check.sh (carry [\".debs\"])" \
      "— $(du -sh "$debs" | cut -f1) to carry"
    exit 0
    ;;
esac

# ------------------------------------------------------------ setup
export GC_MODE=$mode GC_ROOT=$root GC_DEBS=$debs GC_JOBS=$jobs GC_SELF=$self
export GC_TARBALL_ARG=$tarball_arg GC_BUILD_DIR_ARG=$build_dir
GC_WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlrt-gpu-check.XXXXXX") || exit 1
export GC_WORK GC_REPORT=$GC_WORK/report GC_ROWS=$GC_WORK/rows GC_SRC=$GC_WORK/src
export GC_BUILD=$GC_WORK/build GC_PREFIX=$GC_WORK/prefix
mkdir -p "$GC_REPORT" "$GC_ROWS" "$GC_WORK/bin"
if [[ $mode == rehearse ]]; then
  export GC_DUT=opencl:0 GC_REQUIRE=opencl
  total_budget=${budget:-1800}
  out=${out:-$root/gpu-check-out}
else
  export GC_DUT=cuda:0 GC_REQUIRE=cuda
  total_budget=${budget:-560}
  out=${out:-$root/gpu-check-out}
fi
deadline=$((SECONDS + total_budget))
export GC_CUDA=${CUDA_HOME:-/usr/local/cuda}
export GC_PY=${PYTHON:-python3}
export GC_ORIG_PATH=$PATH GC_ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
# compute-sanitizer, wherever the toolkit put it.
GC_SANITIZER=$(PATH=$GC_CUDA/bin:$PATH command -v compute-sanitizer ||
  ls "$GC_CUDA"/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
export GC_SANITIZER

# A PATH without autotools: each folder of PATH (CUDA's bin first) that holds
# one of them is replaced by a folder of links to its other programs.
path_dirs=() n=0
IFS=: read -ra orig_dirs <<<"$GC_CUDA/bin:$PATH"
for d in "${orig_dirs[@]}"; do
  [[ -d $d ]] || continue
  hit=no
  for t in "${autotools[@]}"; do
    compgen -G "$d/$t" >/dev/null || compgen -G "$d/$t-[0-9]*" >/dev/null || continue
    hit=yes
    break
  done
  if [[ $hit == no ]]; then
    path_dirs+=("$d")
    continue
  fi
  n=$((n + 1))
  links=$GC_WORK/path/$n
  mkdir -p "$links"
  others=()
  for f in "$d"/*; do
    b=${f##*/}
    [[ -x $f && ! -d $f ]] || continue
    skip=no
    for t in "${autotools[@]}"; do [[ $b == "$t" || $b == "$t"-[0-9]* ]] && skip=yes; done
    [[ $skip == yes ]] || others+=("$f")
  done
  ((${#others[@]})) && ln -s -t "$links" "${others[@]}"
  path_dirs+=("$links")
done
PATH=$GC_WORK/bin:$(IFS=:; echo "${path_dirs[*]}")
export PATH
# The private prefix, to the compiler, the linker, the loader and pkg-config.
P=$GC_PREFIX
multi=$P/usr/lib/x86_64-linux-gnu
# OpenBLAS, OpenCL and CLBlast come through configure's --with-X=DIR;
# CPPFLAGS and LDFLAGS name zlib alone (phase_deps says why).
export CPPFLAGS="-I$P/zlib/include ${CPPFLAGS:-}"
export LDFLAGS="-L$P/zlib/lib ${LDFLAGS:-}"
# gcc's own search paths too, searched after every -I and -L: a test that
# compiles with $CC alone (tests/test-pkgconfig.sh, test-configure.sh)
# finds the prefix as it would a system install.
export CPATH=$P/usr/include${CPATH:+:$CPATH}
export LIBRARY_PATH=$multi:$multi/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}
export PKG_CONFIG_PATH=$multi/pkgconfig:$multi/openblas-pthread/pkgconfig
ld=$multi/openblas-pthread:$multi:$GC_CUDA/lib64
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do [[ -d $d ]] && ld+=:$d; done
export LD_LIBRARY_PATH=$ld${GC_ORIG_LD_LIBRARY_PATH:+:$GC_ORIG_LD_LIBRARY_PATH}
export OCL_ICD_VENDORS=$GC_WORK/icd
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2}

# What the phases run with, to run one of their commands again by hand in a
# scratch folder kept with --keep: `. env.sh; cd build; make check TESTS=...`.
export -p | grep -E '^declare -x (GC_[A-Z_]+|PATH|CPATH|LIBRARY_PATH|CPPFLAGS|LDFLAGS|LD_LIBRARY_PATH|PKG_CONFIG_PATH|OCL_ICD_VENDORS|OPENBLAS_NUM_THREADS)=' \
  >"$GC_WORK/env.sh"
note "gpu-check ($mode): scratch $GC_WORK, report $out, budget $total_budget s, -j$jobs"

if [[ $mode == rehearse ]]; then
  caps=(60 900 60 60 300 900 60 600 60 120 300 300 600 60 60)
else
  caps=(20 20 20 30 90 150 20 120 90 40 150 60 150 90 60)
fi
run_phase env "${caps[0]}" phase_env
run_phase tarball "${caps[1]}" phase_tarball
run_phase source "${caps[2]}" phase_source tarball
run_phase deps "${caps[3]}" phase_deps
run_phase configure "${caps[4]}" phase_configure source deps
run_phase build "${caps[5]}" phase_build configure
run_phase dlinfo "${caps[6]}" phase_dlinfo build
run_phase "tests $GC_DUT" "${caps[7]}" phase_tests_device build
run_phase "dlbench cuda:0" "${caps[8]}" phase_dlbench dlinfo
run_phase "dlbench peers" "${caps[9]}" phase_dlbench_peers dlinfo
run_phase dltrain "${caps[10]}" phase_dltrain dlinfo
run_phase gpt "${caps[11]}" phase_gpt build
run_phase "tests (rest)" "${caps[12]}" phase_tests_rest build
run_phase memcheck "${caps[13]}" phase_memcheck build
run_phase racecheck "${caps[14]}" phase_racecheck build

# ------------------------------------------------------------ report
python3 "$root/tests/gpu-check.py" summary "$GC_ROWS/all.tsv" --json "$GC_REPORT/summary.json" \
  >"$GC_REPORT/summary.txt" 2>&1 ||
  cp "$GC_ROWS/all.tsv" "$GC_REPORT/summary.txt"
cp "$GC_ROWS/all.tsv" "$GC_REPORT/summary.tsv"
mkdir -p "$out"
report=$out/gpu-check-$mode.tar.gz
tar czf "$report" -C "$GC_WORK" report
echo
echo "gpu-check ($mode) in $SECONDS s; every log in $report"
cat "$GC_REPORT/summary.txt"
status=0
awk -F'\t' '$2 == "FAIL" || $2 == "NOT-RUN" {bad = 1} END {exit bad}' "$GC_ROWS/all.tsv" ||
  status=1
if [[ $keep == no ]]; then rm -rf "$GC_WORK"; else echo "scratch kept: $GC_WORK"; fi
exit $status
