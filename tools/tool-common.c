/* tool-common.c — the helpers every tool shares (tool-common.h). */
#include "tool-common.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "dlrt.h"

const char *tool_error_text(int rc) {
  const char *detail = dlrt_last_error();
  return detail && *detail ? detail : dlrt_strerror(rc);
}

int tool_fail(const char *what, int rc) {
  fprintf(stderr, "%s: %s%s%s\n", tool_name, what ? what : "", what ? ": " : "",
          tool_error_text(rc));
  return STATUS_FAIL;
}

int tool_parse_int(const char *name, const char *text, long long min, long long max,
                   long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || end == text || *end || v < min || v > max) {
    fprintf(stderr, "%s: --%s needs an integer from %lld to %lld, not '%s'\n", tool_name,
            name, min, max, text);
    return 0;
  }
  *out = v;
  return 1;
}

void tool_json_string(FILE *out, const char *s) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(out, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f) /* controls, newline and tab included */
      fprintf(out, "\\u%04x", *p);
    else
      fputc(*p, out);
  }
  fputc('"', out);
}

void tool_json_strings(FILE *out, const char *const keys[], const char *const vals[], size_t n) {
  for (size_t k = 0; k < n; k++) {
    tool_json_string(out, keys[k]);
    fputs(": ", out);
    tool_json_string(out, vals[k]);
    fputs(", ", out);
  }
}

double tool_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
