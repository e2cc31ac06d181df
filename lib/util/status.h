/* status.h — internal error reporting: every failing path sets a thread-local
 * detail message and returns a negative dlrt_status. */
#ifndef DLRT_UTIL_STATUS_H
#define DLRT_UTIL_STATUS_H

#include "dlrt.h"

#if defined(__GNUC__)
#define DLRT__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define DLRT__PRINTF(f, a)
#endif

/* Sets the detail message and returns `status`, so a failing path reads
 *   return dlrt__set_error(DLRT_ERR_OOM, "...%zu...", bytes); */
int dlrt__set_error(int status, const char *fmt, ...) DLRT__PRINTF(2, 3);

/* Validation helpers for public entry points. */
#define DLRT__CHECK_ARG(cond, ...)                                             \
  do {                                                                         \
    if (!(cond))                                                               \
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, __VA_ARGS__);               \
  } while (0)

/* 1 when [offset, offset + bytes) lies inside [0, size), without overflow. */
static inline int dlrt__range_ok(size_t offset, size_t bytes, size_t size) {
  return offset <= size && bytes <= size - offset;
}

#endif
