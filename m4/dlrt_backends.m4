# dlrt_backends.m4 — detection of OpenBLAS, OpenCL, CLBlast, CUDA, NCCL and MPI.
#
# Each --with-X takes yes (required), no (off), check (the default: use it when
# found) or a DIR (required, and from there: DIR/include and DIR/lib* come
# before the system's folders, and a DIR that does not hold the package stops
# configure). A required package that cannot be found stops configure naming
# the package (and the DIR).

# _DLRT_WITH(NAME, HELP): declares --with-NAME and sets dlrt_with_NAME.
AC_DEFUN([_DLRT_WITH], [
  AC_ARG_WITH([$1], [AS_HELP_STRING([--with-$1@<:@=DIR@:>@], [$2 (default: check)])],
    [dlrt_with_$1=$withval], [dlrt_with_$1=check])
])

# _DLRT_MULTIARCH: dlrt_multiarch, the compiler's multiarch triplet
# (x86_64-linux-gnu on Debian) or empty, for DIR/lib/TRIPLET.
AC_DEFUN([_DLRT_MULTIARCH], [
  dlrt_multiarch=`$CC -print-multiarch 2>/dev/null`
])

# _DLRT_FIND_IN_DIR(NAME, PACKAGE, VAR_PREFIX, HEADER, INCLUDE_DIRS, LIBRARY_FILES):
# for --with-NAME=DIR, DIR must hold PACKAGE: HEADER (as the code includes
# it) in one of DIR/INCLUDE_DIRS, and one of LIBRARY_FILES in DIR/lib64,
# DIR/lib or DIR/lib/TRIPLET. A DIR without them stops configure naming
# PACKAGE and DIR: the compiler would otherwise fall back to the system's copy
# and the DIR would be ignored without a word. Sets VAR_PREFIX_CFLAGS to -I
# the header's folder and VAR_PREFIX_LIBS to -L the library's folder and an
# rpath to it (so DIR's copy is the one compiled against, linked and loaded
# at run time), dlrt_NAME_dir to DIR and dlrt_NAME_libdir to that folder.
# Without a DIR (yes, check, no) dlrt_NAME_dir is empty and nothing is set.
AC_DEFUN([_DLRT_FIND_IN_DIR], [
  AC_REQUIRE([_DLRT_MULTIARCH])
  dlrt_$1_dir=
  dlrt_$1_libdir=
  case $dlrt_with_$1 in
    yes|no|check) ;;
    *) dlrt_$1_dir=$dlrt_with_$1
       AC_MSG_CHECKING([for $2 in $dlrt_$1_dir])
       dlrt_incdir=
       dlrt_tried=
       for d in $5; do
         dlrt_tried="$dlrt_tried${dlrt_tried:+, }$dlrt_$1_dir/$d"
         AS_IF([test -z "$dlrt_incdir" && test -f "$dlrt_$1_dir/$d/$4"],
           [dlrt_incdir=$dlrt_$1_dir/$d])
       done
       AS_IF([test -z "$dlrt_incdir"], [
         AC_MSG_RESULT([no])
         AC_MSG_ERROR([--with-$1=$dlrt_$1_dir: $2 is not there (no $4 in $dlrt_tried); give the folder $2 was installed into (holding include/ and lib/), or --with-$1 for the system's copy])])
       dlrt_libdirs="lib64 lib"
       AS_IF([test -n "$dlrt_multiarch"], [dlrt_libdirs="$dlrt_libdirs lib/$dlrt_multiarch"])
       dlrt_tried=
       for d in $dlrt_libdirs; do
         dlrt_tried="$dlrt_tried${dlrt_tried:+, }$dlrt_$1_dir/$d"
         for f in $6; do
           AS_IF([test -z "$dlrt_$1_libdir" && test -f "$dlrt_$1_dir/$d/$f"],
             [dlrt_$1_libdir=$dlrt_$1_dir/$d])
         done
       done
       AS_IF([test -z "$dlrt_$1_libdir"], [
         AC_MSG_RESULT([no])
         dlrt_files=`echo "$6" | sed 's/ / or /g'`
         AC_MSG_ERROR([--with-$1=$dlrt_$1_dir: $2 is not there (no $dlrt_files in $dlrt_tried); give the folder $2 was installed into (holding include/ and lib/), or --with-$1 for the system's copy])])
       AC_MSG_RESULT([$dlrt_incdir, $dlrt_$1_libdir])
       $3_CFLAGS="-I$dlrt_incdir"
       $3_LIBS="-L$dlrt_$1_libdir -Wl,-rpath,$dlrt_$1_libdir" ;;
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

# _DLRT_LOCATE(NAME, PACKAGE, VAR_PREFIX, HEADER, INCLUDE_DIRS, LIBRARY_FILES,
#              PKG_MODULE, LIB_FLAG): where PACKAGE's header and library are.
# With --with-NAME=DIR, in DIR (_DLRT_FIND_IN_DIR) and linked with LIB_FLAG;
# else through pkg-config's PKG_MODULE, else LIB_FLAG on the default paths.
# Sets dlrt_NAME_pc to PKG_MODULE when pkg-config found it (dlrt.pc can then
# require it, DLRT_PC_PRIVATE), else empty.
AC_DEFUN([_DLRT_LOCATE], [
  _DLRT_FIND_IN_DIR([$1], [$2], [$3], [$4], [$5], [$6])
  dlrt_$1_pc=
  AS_IF([test -n "$dlrt_$1_dir"], [$3_LIBS="$$3_LIBS $8"],
    [PKG_CHECK_MODULES([$3], [$7], [dlrt_$1_pc=$7], [$3_LIBS=$8])])
])

# _DLRT_NOT_LINKED(NAME, PACKAGE, VAR_PREFIX, WHAT-TO-INSTALL): stops configure
# for a required PACKAGE that did not link, naming the DIR when one was given.
AC_DEFUN([_DLRT_NOT_LINKED], [
  AS_IF([test -n "$dlrt_$1_dir"],
    [AC_MSG_ERROR([--with-$1=$dlrt_$1_dir: $2 there does not link ($$3_CFLAGS $$3_LIBS; see config.log); give the folder a working $2 was installed into, or --with-$1 for the system's copy])],
    [AC_MSG_ERROR([$2 not found: $4, or pass --with-$1=DIR])])
])

AC_DEFUN([DLRT_CHECK_OPENBLAS], [
  _DLRT_WITH([openblas], [OpenBLAS for the CPU backend's GEMM (required)])
  AS_IF([test "x$dlrt_with_openblas" = xno],
    [AC_MSG_ERROR([the CPU backend needs OpenBLAS; drop --without-openblas (Debian: apt-get install libopenblas-dev)])])
  _DLRT_LOCATE([openblas], [OpenBLAS], [OPENBLAS], [cblas.h], [include include/openblas],
    [libopenblas.so libopenblas.a], [openblas], [-lopenblas])
  AC_MSG_CHECKING([for cblas_sgemm in OpenBLAS])
  _DLRT_TRY_LINK([cblas.h], [cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.f, 0, 1, 0, 1, 0.f, 0, 1);],
    [$OPENBLAS_CFLAGS], [$OPENBLAS_LIBS], [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     _DLRT_NOT_LINKED([openblas], [OpenBLAS], [OPENBLAS],
       [install libopenblas-dev (cblas.h and libopenblas)])])
  AC_SUBST([OPENBLAS_CFLAGS])
  AC_SUBST([OPENBLAS_LIBS])
  dlrt_openblas_summary="$OPENBLAS_LIBS"
])

AC_DEFUN([DLRT_CHECK_OPENCL], [
  _DLRT_WITH([opencl], [OpenCL backend through the ICD loader])
  dlrt_have_opencl=no
  AS_IF([test "x$dlrt_with_opencl" != xno], [
    _DLRT_LOCATE([opencl], [OpenCL], [OPENCL], [CL/cl.h], [include],
      [libOpenCL.so libOpenCL.a], [OpenCL], [-lOpenCL])
    AC_MSG_CHECKING([for the OpenCL ICD loader])
    _DLRT_TRY_LINK([CL/cl.h], [cl_uint n; clGetPlatformIDs(0, 0, &n);],
      [-DCL_TARGET_OPENCL_VERSION=120 $OPENCL_CFLAGS], [$OPENCL_LIBS],
      [dlrt_have_opencl=yes], [])
    AC_MSG_RESULT([$dlrt_have_opencl])
    AS_IF([test $dlrt_have_opencl = no && _DLRT_REQUIRED([opencl])],
      [_DLRT_NOT_LINKED([opencl], [OpenCL], [OPENCL],
        [install ocl-icd-opencl-dev and opencl-c-headers (and a driver such as pocl-opencl-icd)])])
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
    # A DIR is checked first, so that a wrong one is named whatever else is
    # missing.
    _DLRT_LOCATE([clblast], [CLBlast], [CLBLAST], [clblast_c.h], [include],
      [libclblast.so libclblast.a], [clblast], [-lclblast])
    AS_IF([test $dlrt_have_opencl = no], [
      AS_IF([_DLRT_REQUIRED([clblast])],
        [AC_MSG_ERROR([--with-clblast needs the OpenCL backend; install ocl-icd-opencl-dev and opencl-c-headers])])
    ], [
      AC_MSG_CHECKING([for CLBlast])
      _DLRT_TRY_LINK([clblast_c.h], [CLBlastClearCache();],
        [-DCL_TARGET_OPENCL_VERSION=120 $OPENCL_CFLAGS $CLBLAST_CFLAGS], [$CLBLAST_LIBS $OPENCL_LIBS],
        [dlrt_have_clblast=yes], [])
      AC_MSG_RESULT([$dlrt_have_clblast])
      AS_IF([test $dlrt_have_clblast = no && _DLRT_REQUIRED([clblast])],
        [_DLRT_NOT_LINKED([clblast], [CLBlast], [CLBLAST], [install libclblast-dev])])
    ])
  ])
  AS_IF([test $dlrt_have_clblast = yes],
    [AC_DEFINE([DLRT_HAVE_CLBLAST], [1], [OpenCL GEMM through CLBlast])],
    [CLBLAST_CFLAGS= CLBLAST_LIBS=])
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
         # DIR's own nvcc (not AC_PATH_PROG's, which a cache file may answer
         # from an earlier run); an NVCC given on the command line wins.
         AC_MSG_CHECKING([for nvcc in $CUDA_DIR/bin])
         AS_IF([test -z "$NVCC" && test -x "$CUDA_DIR/bin/nvcc"], [NVCC=$CUDA_DIR/bin/nvcc])
         AC_MSG_RESULT([${NVCC:-no}]) ;;
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
    AS_IF([test $dlrt_have_cuda = no && _DLRT_REQUIRED([cuda])], [
      AS_CASE([$dlrt_with_cuda],
        [yes], [AC_MSG_ERROR([--with-cuda: the CUDA toolkit (nvcc, cuda_runtime_api.h, libcudart_static.a) was not found under $CUDA_DIR; install the CUDA toolkit or pass --with-cuda=DIR])],
        [AC_MSG_ERROR([--with-cuda=$CUDA_DIR: the CUDA toolkit is not there (nvcc, cuda_runtime_api.h and libcudart_static.a, or they do not link; see config.log); give the folder holding bin/nvcc, include/ and lib64/, or --with-cuda to find nvcc on PATH])])])
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
    # cuBLAS is loaded from the toolkit dlrt was built against before the
    # library path is searched.
    AC_DEFINE_UNQUOTED([DLRT_CUDA_LIBDIR], ["`dirname "$dlrt_cudart"`"],
      [The folder of the CUDA toolkit's libraries (libcublas.so.*)])
    dlrt_cuda_summary="$CUDA_DIR, static cudart$dlrt_cuda_summary"])
  AC_SUBST([CUDA_DIR])
  AC_SUBST([CUDA_CFLAGS])
  AC_SUBST([CUDA_LIBS])
  AC_SUBST([NVCC])
])

# DLRT_CHECK_NCCL: NCCL for the all-reduce of replicas on several CUDA devices.
# Only its header is needed to build: the library is loaded with dlopen when
# an all-reduce first runs, as cuBLAS is; from DIR's lib folder first when
# --with-nccl=DIR gave one. --with-nccl without CUDA, or where nccl.h is
# missing, stops with a message naming the package (and the DIR).
AC_DEFUN([DLRT_CHECK_NCCL], [
  _DLRT_WITH([nccl], [NCCL for the GPU all-reduce of data parallelism (needs CUDA)])
  dlrt_have_nccl=no
  NCCL_CFLAGS=
  AS_IF([test "x$dlrt_with_nccl" != xno], [
    _DLRT_FIND_IN_DIR([nccl], [NCCL], [NCCL], [nccl.h], [include],
      [libnccl.so.2 libnccl.so])
    AS_IF([test $dlrt_have_cuda = yes], [
      # AC_COMPILE_IFELSE, not AC_CHECK_HEADER: a cached answer would stand
      # for another DIR's header.
      AC_MSG_CHECKING([for nccl.h])
      dlrt_save_CPPFLAGS=$CPPFLAGS
      CPPFLAGS="$CPPFLAGS $NCCL_CFLAGS $CUDA_CFLAGS"
      AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <cuda_runtime_api.h>
#include <nccl.h>]], [[ncclComm_t comm = 0; (void)comm;]])], [dlrt_have_nccl=yes])
      CPPFLAGS=$dlrt_save_CPPFLAGS
      AC_MSG_RESULT([$dlrt_have_nccl])])
    AS_IF([test $dlrt_have_nccl = no && _DLRT_REQUIRED([nccl])], [
      AS_IF([test $dlrt_have_cuda = no],
        [AC_MSG_ERROR([--with-nccl needs the CUDA backend (--with-cuda); install the CUDA toolkit])],
        [_DLRT_NOT_LINKED([nccl], [NCCL], [NCCL],
          [install NCCL (libnccl-dev, or the CUDA toolkit's)])])])
  ])
  AS_IF([test $dlrt_have_nccl = yes], [
    AC_DEFINE([DLRT_HAVE_NCCL], [1], [All-reduce across CUDA devices through NCCL (dlopen)])
    AS_IF([test -n "$dlrt_nccl_libdir"], [
      AC_DEFINE_UNQUOTED([DLRT_NCCL_LIBDIR], ["$dlrt_nccl_libdir"],
        [The folder of --with-nccl=DIR's libnccl.so.2, loaded before the library path's])])],
    [NCCL_CFLAGS=])
  AC_SUBST([NCCL_CFLAGS])
])

# DLRT_CHECK_MPI: MPI for data parallelism across processes and machines
# (dltrain under mpirun). Found through pkg-config (ompi-c, mpich) or the mpicc
# wrapper; --with-mpi that cannot be satisfied names the Debian package.
AC_DEFUN([DLRT_CHECK_MPI], [
  _DLRT_WITH([mpi], [MPI for data parallelism across processes (Open MPI)])
  dlrt_have_mpi=no
  AS_IF([test "x$dlrt_with_mpi" != xno], [
    _DLRT_FIND_IN_DIR([mpi], [MPI], [MPI], [mpi.h], [include include/openmpi include/mpich],
      [libmpi.so libmpi.a])
    AS_IF([test -z "$dlrt_mpi_dir"], [
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
      [_DLRT_NOT_LINKED([mpi], [MPI], [MPI],
        [install libopenmpi-dev (and openmpi-bin for mpirun)])])
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

# DLRT_CHECK_CXX_RUNTIME: DLRT_CXX_LIBS, the C++ runtime (-lstdc++) where C++
# is linked in: the CUDA kernels are nvcc's C++ (static locals, exceptions'
# personality) and CLBlast is C++. libdlrt links it itself when it holds C++
# objects (CUDA), rather than count on libclblast to have loaded libstdc++
# first; a static link of libdlrt.a needs it in either case (dlrt.pc).
AC_DEFUN([DLRT_CHECK_CXX_RUNTIME], [
  DLRT_CXX_LIBS=
  AS_IF([test "x$dlrt_have_cuda" = xyes || test "x$dlrt_have_clblast" = xyes], [
    AC_CHECK_LIB([stdc++], [__cxa_guard_acquire], [DLRT_CXX_LIBS=-lstdc++],
      [AC_MSG_ERROR([the C++ runtime (libstdc++) was not found, and the CUDA kernels and CLBlast are C++: install g++ (libstdc++-dev)])])])
  AC_SUBST([DLRT_CXX_LIBS])
])

# _DLRT_PC_ADD(PKG_MODULE, LIBS): one package's part of a static link, as
# dlrt.pc's Requires.private when pkg-config found it (its own Libs.private,
# OpenBLAS's -lgfortran, come along), else its flags in Libs.private.
AC_DEFUN([_DLRT_PC_ADD], [
  AS_IF([test -n "$1"], [DLRT_PC_REQUIRES="$DLRT_PC_REQUIRES${DLRT_PC_REQUIRES:+, }$1"],
    [DLRT_PC_LIBS="$DLRT_PC_LIBS $2"])
])

# DLRT_PC_PRIVATE: what a program linked with libdlrt.a needs besides it, for
# the backends configured (`pkg-config --static --libs dlrt`):
# DLRT_PC_REQUIRES (Requires.private) and DLRT_PC_LIBS (Libs.private).
AC_DEFUN([DLRT_PC_PRIVATE], [
  DLRT_PC_REQUIRES=
  DLRT_PC_LIBS=
  # CLBlast's own clblast.pc does not say that it needs the C++ runtime, and
  # pkg-config puts Libs.private before the libraries of Requires.private: so
  # CLBlast is named here, ahead of -lstdc++, for its static archive.
  AS_IF([test "x$dlrt_have_clblast" = xyes], [DLRT_PC_LIBS="$DLRT_PC_LIBS $CLBLAST_LIBS"])
  AS_IF([test "x$dlrt_have_cuda" = xyes], [DLRT_PC_LIBS="$DLRT_PC_LIBS $CUDA_LIBS"])
  DLRT_PC_LIBS="$DLRT_PC_LIBS $DLRT_CXX_LIBS"
  AS_IF([test "x$dlrt_have_opencl" = xyes], [_DLRT_PC_ADD([$dlrt_opencl_pc], [$OPENCL_LIBS])])
  _DLRT_PC_ADD([$dlrt_zlib_pc], [$ZLIB_LIBS])
  _DLRT_PC_ADD([$dlrt_openblas_pc], [$OPENBLAS_LIBS])
  DLRT_PC_LIBS="$DLRT_PC_LIBS $LIBS"
  AC_SUBST([DLRT_PC_REQUIRES])
  AC_SUBST([DLRT_PC_LIBS])
])
