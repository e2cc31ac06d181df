# dlrt_flags.m4 — compiler flag options: visibility, sanitizers, debug.

# DLRT_CHECK_VISIBILITY: build with -fvisibility=hidden so that only symbols
# marked DLRT_API (lib/dlrt.h) are exported from libdlrt.
AC_DEFUN([DLRT_CHECK_VISIBILITY], [
  AC_MSG_CHECKING([whether $CC accepts -fvisibility=hidden])
  dlrt_save_CFLAGS=$CFLAGS
  CFLAGS="$CFLAGS -fvisibility=hidden -Werror"
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[]], [[]])],
    [AC_MSG_RESULT([yes]); AC_SUBST([DLRT_VISIBILITY_CFLAGS], [-fvisibility=hidden])],
    [AC_MSG_RESULT([no])])
  CFLAGS=$dlrt_save_CFLAGS
])

# DLRT_CHECK_VECTORIZE: -fvect-cost-model=dynamic -fno-trapping-math
# -fno-math-errno where the compiler has them. GCC's -O2 vectorizes only
# loops that need no run-time checks; the kernels' loops read and write
# arrays that may alias (in place is allowed), so they need one. A float
# compare in a select (ReLU, its gradient) stays a branch while compares may
# trap; dlrt never enables floating-point traps. And sqrtf stays a library
# call (which may set errno) unless errno is left alone; dlrt never reads
# it. With these, the CPU backend's kernels, the fp16 conversions and the
# host-side optimizer updates of spilling run 2-30x faster. None of them
# reorders arithmetic (no -ffast-math): results keep their bits.
AC_DEFUN([DLRT_CHECK_VECTORIZE], [
  AC_MSG_CHECKING([whether $CC accepts -fvect-cost-model=dynamic -fno-trapping-math -fno-math-errno])
  dlrt_save_CFLAGS=$CFLAGS
  CFLAGS="$CFLAGS -fvect-cost-model=dynamic -fno-trapping-math -fno-math-errno -Werror"
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[]], [[]])],
    [AC_MSG_RESULT([yes])
     AC_SUBST([DLRT_VECTORIZE_CFLAGS],
               ["-fvect-cost-model=dynamic -fno-trapping-math -fno-math-errno"])],
    [AC_MSG_RESULT([no])])
  CFLAGS=$dlrt_save_CFLAGS
])

# DLRT_ARG_SANITIZERS: --enable-sanitizers builds everything with ASan + UBSan;
# --enable-sanitizers=thread with ThreadSanitizer (the two cannot be mixed).
AC_DEFUN([DLRT_ARG_SANITIZERS], [
  AC_ARG_ENABLE([sanitizers],
    [AS_HELP_STRING([--enable-sanitizers@<:@=address|thread@:>@],
      [build with AddressSanitizer and UndefinedBehaviorSanitizer (address, the
       default) or with ThreadSanitizer (thread)])],
    [dlrt_enable_sanitizers=$enableval], [dlrt_enable_sanitizers=no])
  AS_CASE([$dlrt_enable_sanitizers],
    [yes|address], [dlrt_san="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"],
    [thread], [dlrt_san="-fsanitize=thread -fno-omit-frame-pointer"],
    [no], [dlrt_san=],
    [AC_MSG_ERROR([--enable-sanitizers=$dlrt_enable_sanitizers: use address or thread])])
  AS_IF([test -n "$dlrt_san"], [
    dlrt_save_CFLAGS=$CFLAGS; dlrt_save_LDFLAGS=$LDFLAGS
    CFLAGS="$CFLAGS $dlrt_san"; LDFLAGS="$LDFLAGS $dlrt_san"
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[]], [[]])], [],
      [AC_MSG_ERROR([--enable-sanitizers: $CC cannot build with $dlrt_san (install gcc with libasan, libubsan and libtsan)])])
    CFLAGS=$dlrt_save_CFLAGS; LDFLAGS=$dlrt_save_LDFLAGS
    AC_SUBST([DLRT_SANITIZER_FLAGS], [$dlrt_san])
  ])
])

# DLRT_ARG_DEBUG: --enable-debug: -O0 -g3 and internal assertions.
AC_DEFUN([DLRT_ARG_DEBUG], [
  AC_ARG_ENABLE([debug],
    [AS_HELP_STRING([--enable-debug], [build without optimisation, with assertions])],
    [dlrt_enable_debug=$enableval], [dlrt_enable_debug=no])
  AS_IF([test "x$dlrt_enable_debug" = xyes],
    [AC_SUBST([DLRT_DEBUG_CFLAGS], ["-O0 -g3 -DDLRT_DEBUG=1"])],
    [AC_SUBST([DLRT_DEBUG_CFLAGS], ["-DNDEBUG"])])
])
