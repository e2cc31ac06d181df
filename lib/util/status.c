/* status.c — status names and messages (from DLRT_STATUS_MAP), and the
 * thread-local detail message. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>

#include "util/status.h"

/* Room for a compiler's build log in the detail of a failed kernel build. */
#define DLRT__DETAIL_MAX 4096

static _Thread_local char detail[DLRT__DETAIL_MAX];

const char *dlrt_strerror(int status) {
  switch (status) {
#define DLRT__MSG(name, value, msg) case value: return msg;
    DLRT_STATUS_MAP(DLRT__MSG)
#undef DLRT__MSG
  }
  return "unknown status";
}

const char *dlrt_err_name(int status) {
  switch (status) {
#define DLRT__NAME(name, value, msg) case value: return "DLRT_" #name;
    DLRT_STATUS_MAP(DLRT__NAME)
#undef DLRT__NAME
  }
  return "DLRT_UNKNOWN";
}

const char *dlrt_last_error(void) { return detail; }

void dlrt_clear_error(void) { detail[0] = '\0'; }

int dlrt__set_error(int status, const char *fmt, ...) {
  /* Format into a scratch buffer first: an argument may be the current
   * detail message itself (a message being extended with context). */
  char scratch[DLRT__DETAIL_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(scratch, sizeof scratch, fmt, ap);
  va_end(ap);
  snprintf(detail, sizeof detail, "%s", scratch);
  return status;
}

const char *dlrt_version_string(void) { return PACKAGE_VERSION; }
