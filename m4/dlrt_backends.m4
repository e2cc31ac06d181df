# dlrt_backends.m4 — detection of OpenBLAS, OpenCL, CLBlast and CUDA.
#
# Each --with-X takes yes (required), no (off), check (the default: use it when
# found) or a DIR (required, looked for under DIR/include and DIR/lib*). A
# required package that cannot be found stops configure naming the package.

# _DLRT_WITH(NAME, HELP): declares --with-NAME and sets dlrt_with_NAME.
AC_DEFUN([_DLRT_WITH], [
  AC_ARG_WITH([$1], [AS_HELP_STRING([--with-$1@<:@=DIR@:>@], [$2 (default: check)])],
    [dlrt_with_$1=$withval], [dlrt_with_$1=check])
])

# _DLRT_DIR_FLAGS(NAME, VAR_PREFIX): for --with-NAME=DIR, sets VAR_PREFIX_CFLAGS
# and VAR_PREFIX_LIBS search paths.
AC_DEFUN([_DLRT_DIR_FLAGS], [
  case $dlrt_with_$1 in
    yes|no|check) ;;
    *) $2_CFLAGS="-I$dlrt_with_$1/include"
       for d in lib64 lib lib/x86_64-linux-gnu; do
         AS_IF([test -d "$dlrt_with_$1/$d"], [$2_LIBS="$$2_LIBS -L$dlrt_with_$1/$d"])
       done ;;
  esac
])

# _DLRT_REQUIRED(NAME): whether the user asked for it explicitly.
AC_DEFUN([_DLRT_REQUIRED], [test "x$dlrt_with_$1" != xcheck && test "x$dlrt_with_$1" != xno])

# _DLRT_TRY_LINK(HEADER, FUNC_CALL, CFLAGS, LIBS, ACTION-IF, ACTION-IF-NOT)
AC_DEFUN([_DLRT_TRY_LINK], [
  dlrt_save_CPPFLAGS=$CPPFLAGS; dlrt_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $3"; LIBS="$4 $LIBS"
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <$1>]], [[$2]])], [$5], [$6])
  CPPFLAGS=$dlrt_save_CPPFLAGS; LIBS=$dlrt_save_LIBS
])

AC_DEFUN([DLRT_CHECK_OPENBLAS], [
  _DLRT_WITH([openblas], [OpenBLAS for the CPU backend's GEMM (required)])
  AS_IF([test "x$dlrt_with_openblas" = xno],
    [AC_MSG_ERROR([the CPU backend needs OpenBLAS; drop --without-openblas (Debian: apt-get install libopenblas-dev)])])
  _DLRT_DIR_FLAGS([openblas], [OPENBLAS])
  AS_IF([test -z "$OPENBLAS_CFLAGS$OPENBLAS_LIBS"],
    [PKG_CHECK_MODULES([OPENBLAS], [openblas], [], [OPENBLAS_LIBS=-lopenblas])],
    [OPENBLAS_LIBS="$OPENBLAS_LIBS -lopenblas"])
  AC_MSG_CHECKING([for cblas_sgemm in OpenBLAS])
  _DLRT_TRY_LINK([cblas.h], [cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.f, 0, 1, 0, 1, 0.f, 0, 1);],
    [$OPENBLAS_CFLAGS], [$OPENBLAS_LIBS], [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([OpenBLAS not found (cblas.h and libopenblas): install libopenblas-dev, or pass --with-openblas=DIR])])
  AC_SUBST([OPENBLAS_CFLAGS])
  AC_SUBST([OPENBLAS_LIBS])
  dlrt_openblas_summary="$OPENBLAS_LIBS"
])

AC_DEFUN([DLRT_CHECK_OPENCL], [
  _DLRT_WITH([opencl], [OpenCL backend through the ICD loader])
  dlrt_have_opencl=no
  AS_IF([test "x$dlrt_with_opencl" != xno], [
    _DLRT_DIR_FLAGS([opencl], [OPENCL])
    AS_IF([test -z "$OPENCL_CFLAGS$OPENCL_LIBS"],
      [PKG_CHECK_MODULES([OPENCL], [OpenCL], [], [OPENCL_LIBS=-lOpenCL])],
      [OPENCL_LIBS="$OPENCL_LIBS -lOpenCL"])
    AC_MSG_CHECKING([for the OpenCL ICD loader])
    _DLRT_TRY_LINK([CL/cl.h], [cl_uint n; clGetPlatformIDs(0, 0, &n);],
      [-DCL_TARGET_OPENCL_VERSION=120 $OPENCL_CFLAGS], [$OPENCL_LIBS],
      [dlrt_have_opencl=yes], [])
    AC_MSG_RESULT([$dlrt_have_opencl])
    AS_IF([test $dlrt_have_opencl = no && _DLRT_REQUIRED([opencl])],
      [AC_MSG_ERROR([--with-opencl: OpenCL headers or ICD loader not found; install ocl-icd-opencl-dev and opencl-c-headers (and a driver such as pocl-opencl-icd)])])
  ])
  AS_IF([test $dlrt_have_opencl = yes], [
    AC_DEFINE([DLRT_HAVE_OPENCL], [1], [Build the OpenCL backend])
    dlrt_opencl_summary="$OPENCL_LIBS"])
  AC_SUBST([OPENCL_CFLAGS])
  AC_SUBST([OPENCL_LIBS])
])

AC_DEFUN([DLRT_CHECK_CLBLAST], [
  _DLRT_WITH([clblast], [CLBlast for GEMM on OpenCL devices])
  dlrt_have_clblast=no
  AS_IF([test "x$dlrt_with_clblast" != xno], [
    AS_IF([test $dlrt_have_opencl = no], [
      AS_IF([_DLRT_REQUIRED([clblast])],
        [AC_MSG_ERROR([--with-clblast needs the OpenCL backend; install ocl-icd-opencl-dev and opencl-c-headers])])
    ], [
      _DLRT_DIR_FLAGS([clblast], [CLBLAST])
      AS_IF([test -z "$CLBLAST_CFLAGS$CLBLAST_LIBS"],
        [PKG_CHECK_MODULES([CLBLAST], [clblast], [], [CLBLAST_LIBS=-lclblast])],
        [CLBLAST_LIBS="$CLBLAST_LIBS -lclblast"])
      AC_MSG_CHECKING([for CLBlast])
      _DLRT_TRY_LINK([clblast_c.h], [CLBlastClearCache();],
        [-DCL_TARGET_OPENCL_VERSION=120 $OPENCL_CFLAGS $CLBLAST_CFLAGS], [$CLBLAST_LIBS $OPENCL_LIBS],
        [dlrt_have_clblast=yes], [])
      AC_MSG_RESULT([$dlrt_have_clblast])
      AS_IF([test $dlrt_have_clblast = no && _DLRT_REQUIRED([clblast])],
        [AC_MSG_ERROR([--with-clblast: CLBlast not found; install libclblast-dev or pass --with-clblast=DIR])])
    ])
  ])
  AS_IF([test $dlrt_have_clblast = yes],
    [AC_DEFINE([DLRT_HAVE_CLBLAST], [1], [OpenCL GEMM through CLBlast])])
  AC_SUBST([CLBLAST_CFLAGS])
  AC_SUBST([CLBLAST_LIBS])
])

# CUDA: the runtime is linked statically (libcudart_static.a) so that libdlrt
# loads and reports zero CUDA devices on machines without the NVIDIA driver.
AC_DEFUN([DLRT_CHECK_CUDA], [
  _DLRT_WITH([cuda], [CUDA backend (cudart + cuBLAS)])
  dlrt_have_cuda=no
  AS_IF([test "x$dlrt_with_cuda" != xno], [
    case $dlrt_with_cuda in
      yes|check)
        AC_PATH_PROG([NVCC], [nvcc], [], [$PATH:/usr/local/cuda/bin])
        AS_IF([test -n "$NVCC"], [CUDA_DIR=`dirname "$NVCC"`; CUDA_DIR=`dirname "$CUDA_DIR"`],
              [CUDA_DIR=/usr/local/cuda]) ;;
      *) CUDA_DIR=$dlrt_with_cuda
         AC_PATH_PROG([NVCC], [nvcc], [], [$CUDA_DIR/bin]) ;;
    esac
    CUDA_CFLAGS="-I$CUDA_DIR/include"
    dlrt_cudart=
    for d in lib64 lib lib/x86_64-linux-gnu targets/x86_64-linux/lib; do
      AS_IF([test -z "$dlrt_cudart" && test -f "$CUDA_DIR/$d/libcudart_static.a"],
        [dlrt_cudart="$CUDA_DIR/$d/libcudart_static.a"])
    done
    AC_MSG_CHECKING([for the static CUDA runtime])
    AS_IF([test -n "$dlrt_cudart" && test -n "$NVCC"], [
      CUDA_LIBS="-Wl,--exclude-libs,libcudart_static.a $dlrt_cudart -ldl -lrt -lpthread"
      _DLRT_TRY_LINK([cuda_runtime_api.h], [int n; cudaGetDeviceCount(&n);],
        [$CUDA_CFLAGS], [$CUDA_LIBS], [dlrt_have_cuda=yes], [])])
    AC_MSG_RESULT([$dlrt_have_cuda])
    AS_IF([test $dlrt_have_cuda = no && _DLRT_REQUIRED([cuda])],
      [AC_MSG_ERROR([--with-cuda: the CUDA toolkit (nvcc, cuda_runtime_api.h, libcudart_static.a) was not found under $CUDA_DIR; install the CUDA toolkit or pass --with-cuda=DIR])])
  ])
  # Device code for every architecture from sm_70 to sm_90 that this nvcc
  # still builds, plus PTX of the newest for later GPUs. NVCC_ARCHS="80 90"
  # overrides the list.
  AS_IF([test $dlrt_have_cuda = yes], [
    AC_ARG_VAR([NVCC_ARCHS], [CUDA architectures to build kernels for (e.g. "80 90")])
    AC_MSG_CHECKING([CUDA architectures])
    dlrt_supported=`"$NVCC" --list-gpu-arch 2>/dev/null | tr '\n' ' '`
    dlrt_archs=
    for a in ${NVCC_ARCHS:-70 75 80 86 89 90}; do
      case " $dlrt_supported " in *" compute_$a "*) dlrt_archs="$dlrt_archs $a" ;; esac
    done
    AS_IF([test -z "$dlrt_archs"],
      [AC_MSG_ERROR([$NVCC builds none of the architectures ${NVCC_ARCHS:-70 75 80 86 89 90}; set NVCC_ARCHS])])
    NVCC_ARCH_FLAGS=
    for a in $dlrt_archs; do
      NVCC_ARCH_FLAGS="$NVCC_ARCH_FLAGS -gencode arch=compute_$a,code=sm_$a"
      dlrt_last_arch=$a
    done
    NVCC_ARCH_FLAGS="$NVCC_ARCH_FLAGS -gencode arch=compute_$dlrt_last_arch,code=compute_$dlrt_last_arch"
    AC_MSG_RESULT([$dlrt_archs (+ PTX $dlrt_last_arch)])
    dlrt_cuda_summary="$dlrt_cuda_summary; sm:$dlrt_archs"
  ])
  AC_SUBST([NVCC_ARCH_FLAGS])
  AS_IF([test $dlrt_have_cuda = yes], [
    AC_DEFINE([DLRT_HAVE_CUDA], [1], [Build the CUDA backend])
    dlrt_cuda_summary="$CUDA_DIR, static cudart"])
  AC_SUBST([CUDA_DIR])
  AC_SUBST([CUDA_CFLAGS])
  AC_SUBST([CUDA_LIBS])
  AC_SUBST([NVCC])
])

# DLRT_CHECK_NCCL: NCCL for the all-reduce of replicas on several CUDA devices.
# Only its header is needed to build: the library is loaded with dlopen when
# an all-reduce first runs, as cuBLAS is. --with-nccl without CUDA, or where
# nccl.h is missing, stops with a message naming the package.
AC_DEFUN([DLRT_CHECK_NCCL], [
  _DLRT_WITH([nccl], [NCCL for the GPU all-reduce of data parallelism (needs CUDA)])
  dlrt_have_nccl=no
  AS_IF([test "x$dlrt_with_nccl" != xno], [
    AS_IF([test $dlrt_have_cuda = yes], [
      NCCL_CFLAGS=
      case $dlrt_with_nccl in
        yes|check) ;;
        *) NCCL_CFLAGS="-I$dlrt_with_nccl/include" ;;
      esac
      dlrt_save_CPPFLAGS=$CPPFLAGS
      CPPFLAGS="$CPPFLAGS $NCCL_CFLAGS $CUDA_CFLAGS"
      AC_CHECK_HEADER([nccl.h], [dlrt_have_nccl=yes], [], [#include <cuda_runtime_api.h>])
      CPPFLAGS=$dlrt_save_CPPFLAGS])
    AS_IF([test $dlrt_have_nccl = no && _DLRT_REQUIRED([nccl])],
      [AC_MSG_ERROR([--with-nccl: nccl.h was not found (it needs the CUDA backend too); install NCCL (libnccl-dev, or the CUDA toolkit's) or pass --with-nccl=DIR])])
  ])
  AS_IF([test $dlrt_have_nccl = yes],
    [AC_DEFINE([DLRT_HAVE_NCCL], [1], [All-reduce across CUDA devices through NCCL (dlopen)])])
  AC_SUBST([NCCL_CFLAGS])
])

# DLRT_CHECK_MPI: MPI for data parallelism across processes and machines
# (dltrain under mpirun). Found through pkg-config (ompi-c, mpich) or the mpicc
# wrapper; --with-mpi that cannot be satisfied names the Debian package.
AC_DEFUN([DLRT_CHECK_MPI], [
  _DLRT_WITH([mpi], [MPI for data parallelism across processes (Open MPI)])
  dlrt_have_mpi=no
  AS_IF([test "x$dlrt_with_mpi" != xno], [
    _DLRT_DIR_FLAGS([mpi], [MPI])
    AS_IF([test -z "$MPI_CFLAGS$MPI_LIBS"], [
      PKG_CHECK_MODULES([MPI], [ompi-c], [], [
        PKG_CHECK_MODULES([MPI], [mpich], [], [
          AS_IF([command -v mpicc >/dev/null 2>&1], [
            MPI_CFLAGS=`mpicc --showme:compile 2>/dev/null`
            MPI_LIBS=`mpicc --showme:link 2>/dev/null`])])])],
      [MPI_LIBS="$MPI_LIBS -lmpi"])
    AC_MSG_CHECKING([for MPI])
    _DLRT_TRY_LINK([mpi.h], [int n; MPI_Initialized(&n);], [$MPI_CFLAGS], [$MPI_LIBS],
      [dlrt_have_mpi=yes], [])
    AC_MSG_RESULT([$dlrt_have_mpi])
    AS_IF([test $dlrt_have_mpi = no && _DLRT_REQUIRED([mpi])],
      [AC_MSG_ERROR([--with-mpi: MPI not found; install libopenmpi-dev (and openmpi-bin for mpirun) or pass --with-mpi=DIR])])
  ])
  AS_IF([test $dlrt_have_mpi = yes], [
    AC_DEFINE([DLRT_HAVE_MPI], [1], [dltrain can train across MPI processes])
    # Open MPI's extensions: MPIX_Query_cuda_support (CUDA-aware MPI).
    dlrt_save_CPPFLAGS=$CPPFLAGS
    CPPFLAGS="$CPPFLAGS $MPI_CFLAGS"
    AC_CHECK_HEADERS([mpi-ext.h], [], [], [#include <mpi.h>])
    CPPFLAGS=$dlrt_save_CPPFLAGS])
  AC_SUBST([MPI_CFLAGS])
  AC_SUBST([MPI_LIBS])
])
