/*
 * tap.c — the TAP writer declared in tap.h.
 *
 * Everything goes to stdout, flushed after every line, so that a test program
 * that crashes still leaves every point it printed in the log.
 */
#include "tap.h"

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sys/stat.h>
#include <unistd.h>

#include "dlrt.h"

static int planned = -1; /* -1: no plan() call; done_testing() prints it */
/* The backend of the device tap_for_each_device is running a test on, when
 * DLRT_TEST_REQUIRE names it; else NULL. */
static const char *current_required;
static int points;       /* points printed so far */
static int failures;
static int header_printed;

static void print_header(void) {
  if (!header_printed) {
    printf("TAP version 13\n");
    header_printed = 1;
  }
}

void plan(int count) {
  print_header();
  if (planned >= 0 || points > 0)
    bail_out("plan() called twice or after the first point");
  planned = count;
  printf("1..%d\n", count);
  fflush(stdout);
}

int done_testing(void) {
  print_header();
  if (planned < 0) {
    printf("1..%d\n", points);
  } else if (points != planned) {
    diag("planned %d points but ran %d", planned, points);
    failures++;
  }
  if (failures > 0)
    diag("%d of %d points failed", failures, points);
  fflush(stdout);
  return failures > 0 ? 1 : 0;
}

static void vdiag(const char *fmt, va_list ap) {
  /* A message may hold newlines (dlrt_mem_summary tables): every line of it
   * must start with '#' or the driver would read it as TAP. */
  char text[4096];
  vsnprintf(text, sizeof text, fmt, ap);
  const char *line = text;
  for (;;) {
    const char *end = strchr(line, '\n');
    int len = end ? (int)(end - line) : (int)strlen(line);
    printf("# %.*s\n", len, line);
    if (!end || end[1] == '\0')
      break;
    line = end + 1;
  }
  fflush(stdout);
}

void diag(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  print_header();
  vdiag(fmt, ap);
  va_end(ap);
}

/* Prints "ok N - description" or "not ok N - description"; on failure a line
 * naming where the failed assertion sits. */
static int vreport(const char *file, int line, int passed, const char *fmt,
                   va_list ap) {
  char description[1024];
  vsnprintf(description, sizeof description, fmt, ap);
  /* '#' would start a TAP directive inside the description. */
  for (char *c = description; *c; c++)
    if (*c == '#' || *c == '\n')
      *c = ' ';
  print_header();
  points++;
  printf("%sok %d - %s\n", passed ? "" : "not ", points, description);
  if (!passed) {
    failures++;
    printf("#   Failed test at %s line %d\n", file, line);
  }
  fflush(stdout);
  return passed;
}

void skip(int count, const char *fmt, ...) {
  char reason[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  for (char *c = reason; *c; c++)
    if (*c == '\n')
      *c = ' ';
  print_header();
  for (int i = 0; i < count; i++) {
    points++;
    printf("ok %d # SKIP %s\n", points, reason);
  }
  fflush(stdout);
}

_Noreturn void bail_out(const char *fmt, ...) {
  char reason[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  print_header();
  printf("Bail out! %s\n", reason);
  fflush(stdout);
  exit(1);
}

int tap_ok(const char *file, int line, int passed, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int result = vreport(file, line, passed, fmt, ap);
  va_end(ap);
  return result;
}

int tap_is_int(const char *file, int line, long long got, long long want,
               const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int result = vreport(file, line, got == want, fmt, ap);
  va_end(ap);
  if (!result)
    diag("       got: %lld\n  expected: %lld", got, want);
  return result;
}

int tap_is_u64(const char *file, int line, uint64_t got, uint64_t want, const char *fmt,
               ...) {
  va_list ap;
  va_start(ap, fmt);
  int result = vreport(file, line, got == want, fmt, ap);
  va_end(ap);
  if (!result)
    diag("       got: %llu (0x%llx)\n  expected: %llu (0x%llx)",
         (unsigned long long)got, (unsigned long long)got, (unsigned long long)want,
         (unsigned long long)want);
  return result;
}

int tap_is_str(const char *file, int line, const char *got, const char *want,
               const char *fmt, ...) {
  int same = (got == NULL && want == NULL) ||
             (got != NULL && want != NULL && strcmp(got, want) == 0);
  va_list ap;
  va_start(ap, fmt);
  int result = vreport(file, line, same, fmt, ap);
  va_end(ap);
  if (!result)
    diag("       got: %s%s%s\n  expected: %s%s%s", got ? "\"" : "", got ? got : "NULL",
         got ? "\"" : "", want ? "\"" : "", want ? want : "NULL", want ? "\"" : "");
  return result;
}

int tap_is_status(const char *file, int line, int got, int want, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int result = vreport(file, line, got == want, fmt, ap);
  va_end(ap);
  if (!result)
    diag("       got: %s (%d)\n  expected: %s (%d)\n  last error: %s",
         dlrt_err_name(got), got, dlrt_err_name(want), want, dlrt_last_error());
  return result;
}

int tap_is_mem(const char *file, int line, const void *got, const void *want,
               size_t bytes, const char *fmt, ...) {
  const uint8_t *g = got, *w = want;
  size_t first = bytes, differing = 0;
  for (size_t i = 0; i < bytes; i++) {
    if (g[i] != w[i]) {
      if (first == bytes)
        first = i;
      differing++;
    }
  }
  va_list ap;
  va_start(ap, fmt);
  int result = vreport(file, line, differing == 0, fmt, ap);
  va_end(ap);
  if (!result)
    diag("  %zu of %zu bytes differ; first at byte %zu: got 0x%02x, "
         "expected 0x%02x",
         differing, bytes, first, g[first], w[first]);
  return result;
}

int tap_check_at(const char *file, int line, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int result = vreport(file, line, status == DLRT_OK, fmt, ap);
  va_end(ap);
  if (!result)
    diag("  status: %s (%d): %s\n  last error: %s", dlrt_err_name(status), status,
         dlrt_strerror(status), dlrt_last_error());
  return result;
}

int tap_check_op_at(const char *file, int line, int status, const char *fmt, ...) {
  if (status == DLRT_OK)
    return 1;
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (status == DLRT_ERR_UNSUPPORTED && current_required)
    tap_ok(file, line, 0, "%s: unsupported on %s, a backend DLRT_TEST_REQUIRE=%s requires: %s",
           what, current_required, getenv("DLRT_TEST_REQUIRE"), dlrt_last_error());
  else if (status == DLRT_ERR_UNSUPPORTED)
    skip(1, "%s: unsupported: %s", what, dlrt_last_error());
  else
    tap_check_at(file, line, status, "%s", what);
  return 0;
}

uint8_t pattern_byte(size_t i, uint32_t seed) {
  /* murmur3's 32-bit finaliser over (index, seed). */
  uint32_t x = (uint32_t)i ^ (uint32_t)((uint64_t)i >> 32) * 0x9E3779B9u;
  x += seed * 0x85EBCA6Bu + 0x27D4EB2Fu;
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return (uint8_t)x;
}

void fill_pattern(void *dst, size_t bytes, uint32_t seed) {
  uint8_t *d = dst;
  for (size_t i = 0; i < bytes; i++)
    d[i] = pattern_byte(i, seed);
}

dlrt_buffer_t *upload_buffer(dlrt_device_t *dev, const void *host, size_t bytes) {
  dlrt_buffer_t *buf = NULL;
  if (dlrt_buffer_alloc(dev, bytes, NULL, &buf) != DLRT_OK)
    return NULL;
  if (dlrt_copy_h2d(buf, 0, host, bytes, NULL) != DLRT_OK) {
    dlrt_buffer_free(buf);
    return NULL;
  }
  return buf;
}

const char *tap_tempdir(const char *name, char *buf, size_t size) {
  const char *tmp = getenv("TMPDIR");
  snprintf(buf, size, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
  if (!mkdtemp(buf)) bail_out("mkdtemp %s: %s", buf, strerror(errno));
  return buf;
}

const char *tap_join(const char *dir, const char *rel) {
  static char bufs[8][4096];
  static int next;
  char *p = bufs[next++ % 8];
  snprintf(p, sizeof bufs[0], "%s/%s", dir, rel);
  return p;
}

void tap_write_file(const char *path, const void *bytes, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f || (len && fwrite(bytes, 1, len, f) != len) || fclose(f) != 0)
    bail_out("cannot write %s: %s", path, strerror(errno));
}

void tap_write_text(const char *path, const char *text) {
  tap_write_file(path, text, strlen(text));
}

unsigned char *tap_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  *len = 0;
  if (!f) return NULL;
  unsigned char *buf = NULL;
  size_t cap = 0;
  for (;;) {
    if (*len == cap) {
      unsigned char *grown = realloc(buf, cap = cap ? 2 * cap : 65536);
      if (!grown) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = grown;
    }
    size_t got = fread(buf + *len, 1, cap - *len, f);
    if (!got) break;
    *len += got;
  }
  fclose(f);
  return buf;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  if (remove(path) != 0) diag("cannot remove %s: %s", path, strerror(errno));
  return 0;
}

void tap_remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* The backends a test runs on, in the order tap_for_each_device visits them,
 * and the configure option that builds each one (cpu is always built). */
static const struct {
  const char *name;
  const char *configure;
} known_backends[] = {{"cpu", NULL}, {"opencl", "--with-opencl"}, {"cuda", "--with-cuda"}};
#define N_KNOWN_BACKENDS ((int)(sizeof known_backends / sizeof known_backends[0]))

/* The next name of a comma-separated list at *p (blanks around it dropped):
 * 1 with *name and *len set and *p moved past it, 0 at the end. */
static int next_list_name(const char **p, const char **name, size_t *len) {
  while (**p == ' ' || **p == ',') (*p)++;
  if (!**p) return 0;
  size_t n = strcspn(*p, ",");
  *name = *p;
  *len = n;
  while (*len > 0 && (*name)[*len - 1] == ' ') (*len)--;
  *p += n;
  return 1;
}

static int same_name(const char *name, size_t len, const char *backend) {
  return backend && len == strlen(backend) && strncasecmp(name, backend, len) == 0;
}

/* Whether $DLRT_TEST_REQUIRE (backends, comma-separated, any case) names
 * `backend`. */
static int backend_required(const char *backend) {
  const char *p = getenv("DLRT_TEST_REQUIRE"), *name;
  size_t len;
  while (p && next_list_name(&p, &name, &len))
    if (same_name(name, len, backend)) return 1;
  return 0;
}

/* A name in $DLRT_TEST_REQUIRE that is no backend of dlrt (a typo) must not
 * pass as "nothing required": one failed point per such name. */
static void check_required_names(void) {
  const char *list = getenv("DLRT_TEST_REQUIRE"), *p = list, *name;
  size_t len;
  while (p && next_list_name(&p, &name, &len)) {
    int known = 0;
    for (int k = 0; k < N_KNOWN_BACKENDS; k++)
      known |= same_name(name, len, known_backends[k].name);
    for (int b = 0; b < dlrt_backend_count(); b++)
      known |= same_name(name, len, dlrt_backend_name(b));
    if (!known)
      ok(0, "DLRT_TEST_REQUIRE=%s: %.*s is not a backend of dlrt (cpu, opencl, cuda)", list,
         (int)len, name);
  }
}

/* Runs fn on each device of one backend, or prints the SKIP point that says
 * why there is none (a failed point instead when $DLRT_TEST_REQUIRE names the
 * backend: a GPU check must not pass on the CPU alone); returns the devices
 * fn ran on. */
static int for_each_backend_device(const char *name, const char *configure, tap_device_fn *fn,
                                   void *ctx) {
  int required = backend_required(name);
  int n = dlrt_backend_device_count(name);
  if (n == DLRT_ERR_NOT_FOUND) {
    if (required)
      ok(0, "no %s device, which DLRT_TEST_REQUIRE=%s requires: the %s backend is not "
         "built%s%s%s", name, getenv("DLRT_TEST_REQUIRE"), name,
         configure ? " (configure " : "", configure ? configure : "", configure ? ")" : "");
    else
      skip(1, "no %s device: the %s backend is not built%s%s%s", name, name,
           configure ? " (configure " : "", configure ? configure : "", configure ? ")" : "");
    return 0;
  }
  if (n < 0) {
    tap_check(n, "the %s backend's devices can be counted", name);
    return 0;
  }
  if (n == 0) {
    /* The public API cannot tell a missing driver from a driver that found no
     * device (dlinfo says the same), so the reason names both. */
    const char *only = getenv("DLRT_BACKEND");
    char reason[512];
    snprintf(reason, sizeof reason, "the %s backend is built but found no driver, platform "
             "or device%s%s%s", name, only && *only ? " (or DLRT_BACKEND=" : "",
             only && *only ? only : "", only && *only ? " leaves it out)" : "");
    if (required)
      ok(0, "no %s device, which DLRT_TEST_REQUIRE=%s requires: %s", name,
         getenv("DLRT_TEST_REQUIRE"), reason);
    else
      skip(1, "no %s device: %s", name, reason);
    return 0;
  }
  int ran = 0;
  for (int i = 0; i < n; i++) {
    char spec[32];
    snprintf(spec, sizeof spec, "%s:%d", name, i);
    dlrt_device_t *dev = NULL;
    dlrt_device_props props;
    int rc = dlrt_device_open(spec, &dev);
    if (rc == DLRT_OK)
      rc = dlrt_device_props_get(dev, &props);
    /* A device the backend counted must open: a failure here is a point that
     * fails, never a skip. */
    if (!tap_check(rc, "%s opens: %s (%s)", spec, rc == DLRT_OK ? props.name : "?",
                   rc == DLRT_OK && props.driver[0] ? props.driver : "driver unknown"))
      continue;
    current_required = required ? name : NULL;
    fn(dev, dlrt_device_spec(dev), ctx);
    current_required = NULL;
    ran++;
  }
  return ran;
}

int tap_for_each_device(tap_device_fn *fn, void *ctx) {
  int ran = 0;
  check_required_names();
  for (int k = 0; k < N_KNOWN_BACKENDS; k++)
    ran += for_each_backend_device(known_backends[k].name, known_backends[k].configure, fn, ctx);
  /* A backend added to the library later still runs the tests, after these. */
  for (int b = 0; b < dlrt_backend_count(); b++) {
    const char *name = dlrt_backend_name(b);
    int known = 0;
    for (int k = 0; k < N_KNOWN_BACKENDS && name; k++)
      known |= strcmp(name, known_backends[k].name) == 0;
    if (name && !known)
      ran += for_each_backend_device(name, NULL, fn, ctx);
  }
  return ran;
}

int tap_device_is_cpu(dlrt_device_t *dev) {
  dlrt_device_props props;
  return dlrt_device_props_get(dev, &props) == DLRT_OK && strcmp(props.backend, "cpu") == 0;
}
