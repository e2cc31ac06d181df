#!/usr/bin/env bash
# gpu-check.sh — the whole check on a machine with an NVIDIA GPU, in one call:
# build with CUDA and OpenCL, run the test suite (every test covers every
# device, cuda:0 and NVIDIA's OpenCL included), run the GEMM benchmark on the
# GPU, and leave logs under $OUT (or ./gpu-check-out).
#
# That machine has CUDA, nvcc, cuBLAS and the driver but no package registry:
# OpenBLAS, the OpenCL ICD loader and CLBlast come as Debian packages
# downloaded beforehand into .debs/ (ignored by git, named in the device
# tool's `carry`):
#   mkdir -p .debs && (cd .debs && apt-get download libopenblas0-pthread \
#     libopenblas-dev libopenblas0 ocl-icd-libopencl1 ocl-icd-opencl-dev \
#     opencl-c-headers libclblast1 libclblast-dev libgfortran5)
# They are unpacked into a private prefix, never into /.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
out=${OUT:-$root/gpu-check-out}
mkdir -p "$out"
exec > >(tee "$out/gpu-check.log") 2>&1

prefix=/tmp/dlrt-deps
if compgen -G ".debs/*.deb" >/dev/null; then
  mkdir -p "$prefix"
  for deb in .debs/*.deb; do dpkg -x "$deb" "$prefix"; done
  multiarch=usr/lib/x86_64-linux-gnu
  export CPPFLAGS="-I$prefix/usr/include -I$prefix/usr/include/x86_64-linux-gnu/openblas-pthread ${CPPFLAGS:-}"
  export LDFLAGS="-L$prefix/$multiarch -L$prefix/$multiarch/openblas-pthread ${LDFLAGS:-}"
  export LD_LIBRARY_PATH="$prefix/$multiarch:$prefix/$multiarch/openblas-pthread:${LD_LIBRARY_PATH:-}"
  export PKG_CONFIG_PATH="$prefix/$multiarch/pkgconfig:$prefix/usr/share/pkgconfig"
  # pkg-config files name /usr: point them at the prefix.
  export PKG_CONFIG_SYSROOT_DIR=$prefix
fi
# NVIDIA's OpenCL driver, when no .icd names it.
if [[ ! -d /etc/OpenCL/vendors ]] && ldconfig -p | grep -q libnvidia-opencl.so.1; then
  mkdir -p /tmp/dlrt-icd && echo libnvidia-opencl.so.1 > /tmp/dlrt-icd/nvidia.icd
  export OCL_ICD_VENDORS=/tmp/dlrt-icd
fi
export PATH=/usr/local/cuda/bin:$PATH

nvidia-smi | tee "$out/nvidia-smi.txt"
build=/tmp/dlrt-gpu-build
rm -rf "$build" && mkdir -p "$build" && cd "$build" || exit 1
{ autoreconf -fi "$root" && "$root/configure" --with-cuda --with-openblas \
    NVCC_ARCHS="${NVCC_ARCHS:-90}"; } > "$out/configure.log" 2>&1 || {
  tail -40 "$out/configure.log"; exit 1; }
tail -12 "$out/configure.log"
make -j"$(nproc)" > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
make -j"$(nproc)" bench >> "$out/build.log" 2>&1

./tools/dlinfo | tee "$out/dlinfo.txt"
make -j"$(nproc)" -k check > "$out/check.log" 2>&1
status=$?
cp test-suite.log "$out/" 2>/dev/null
grep -E '^# (TOTAL|PASS|SKIP|XFAIL|FAIL|XPASS|ERROR)' "$out/check.log"
grep -E '^(FAIL|ERROR)' "$out/check.log" | head -40
grep -h 'cuda:0' tests/test-backend-ops.log 2>/dev/null | grep -E '^not ok|max' | head -40

for n in 1024 4096 8192; do
  ./bench/sgemm-vs-openblas --device cuda:0 --n "$n" --reps 21 | tee -a "$out/bench.txt"
done
exit $status
