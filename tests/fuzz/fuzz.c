/* fuzz.c — the helpers of the fuzz harnesses (fuzz.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The sanitizers' own report: it reaches their output even where libFuzzer
 * has closed the harness's stderr (-close_fd_mask=2). Absent (NULL) in a
 * build without sanitizers. */
extern void __sanitizer_report_error_summary(const char *summary) __attribute__((weak));

void fuzz_fail(const char *fmt, ...) {
  char what[2048];
  va_list ap;
  va_start(ap, fmt);
  int len = snprintf(what, sizeof what, "fuzz: finding: ");
  vsnprintf(what + len, sizeof what - (size_t)len, fmt, ap);
  va_end(ap);
  if (__sanitizer_report_error_summary)
    __sanitizer_report_error_summary(what);
  else
    fprintf(stderr, "%s\n", what);
  abort();
}

/* ---------------------------------------------------------------- files */

static char scratch[4096];

static void remove_scratch(void) {
  DIR *d = opendir(scratch);
  if (d) {
    char path[sizeof scratch + 256];
    for (struct dirent *e; (e = readdir(d));) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      snprintf(path, sizeof path, "%s/%s", scratch, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(scratch);
}

const char *fuzz_scratch_dir(void) {
  if (scratch[0]) return scratch;
  struct stat st;
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
  snprintf(scratch, sizeof scratch, "%s/dlrt-fuzz-XXXXXX", tmp);
  if (!mkdtemp(scratch)) fuzz_fail("cannot create a folder in %s: %s", tmp, strerror(errno));
  atexit(remove_scratch);
  return scratch;
}

static void open_file(fuzz_file *f) {
  static int files;
  f->fd = memfd_create("dlrt-fuzz-input", MFD_CLOEXEC);
  if (f->fd >= 0) {
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
    int probe = open(f->path, O_RDONLY | O_CLOEXEC);
    if (probe >= 0) {
      close(probe);
      return;
    }
    close(f->fd); /* no /proc: a named file instead */
  }
  snprintf(f->path, sizeof f->path, "%s/input-%d", fuzz_scratch_dir(), files++);
  f->fd = open(f->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (f->fd < 0) fuzz_fail("cannot create %s: %s", f->path, strerror(errno));
}

const char *fuzz_file_set(fuzz_file *f, const void *data, size_t size) {
  if (!f->path[0]) open_file(f);
  if (ftruncate(f->fd, 0) != 0) fuzz_fail("cannot truncate %s: %s", f->path, strerror(errno));
  for (size_t done = 0; done < size;) {
    ssize_t w = pwrite(f->fd, (const char *)data + done, size - done, (off_t)done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fuzz_fail("cannot write %s: %s", f->path, strerror(errno));
    done += (size_t)w;
  }
  return f->path;
}

uint64_t fuzz_touch(const void *p, size_t n) {
  const volatile unsigned char *b = p;
  uint64_t sum = 0;
  for (size_t i = 0; i < n; i++) sum += b[i];
  return sum;
}

int fuzz_lowest_free_fd(void) {
  int fd = dup(0);
  if (fd < 0) fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd < 0) fuzz_fail("no file descriptor left: %s", strerror(errno));
  close(fd);
  return fd;
}

/* ---------------------------------------------------------------- argv */

int fuzz_args_split(fuzz_args *a, const char *argv0, const uint8_t *data, size_t size) {
  memset(a, 0, sizeof *a);
  size_t name = strlen(argv0) + 1;
  if (!(a->text = malloc(name + size + 1))) return -1;
  memcpy(a->text, argv0, name);
  char *args = a->text + name;
  memcpy(args, data, size);
  args[size] = '\0';
  a->text_size = name + size + 1;
  a->argv[a->argc++] = a->text;
  if (size > 0) {
    /* "a\nb" and "a\0b" are both {a, b}; a trailing separator ends the last one. */
    char *start = args;
    for (size_t i = 0; i <= size && a->argc <= FUZZ_MAX_ARGS; i++) {
      if (i < size && args[i] != '\n' && args[i] != '\0') continue;
      if (i == size && start == args + size) break;
      args[i] = '\0';
      a->argv[a->argc++] = start;
      start = args + i + 1;
    }
  }
  a->argv[a->argc] = NULL;
  memcpy(a->given, a->argv, sizeof a->given);
  if (!(a->given_text = malloc(a->text_size))) {
    fuzz_args_free(a);
    return -1;
  }
  memcpy(a->given_text, a->text, a->text_size);
  optind = 0; /* glibc: start a fresh scan, forgetting the last one's state */
  return 0;
}

void fuzz_args_free(fuzz_args *a) {
  free(a->text);
  free(a->given_text);
  memset(a, 0, sizeof *a);
}

int fuzz_args_intact(const fuzz_args *a) {
  return memcmp(a->argv, a->given, sizeof a->given) == 0 &&
         memcmp(a->text, a->given_text, a->text_size) == 0;
}

int fuzz_args_holds(const fuzz_args *a, const char *p) {
  /* Compared as addresses: p may point anywhere. */
  uintptr_t at = (uintptr_t)p, start = (uintptr_t)a->text;
  return p && at >= start && at < start + a->text_size;
}

int fuzz_same_string(const char *x, const char *y) {
  return (!x && !y) || (x && y && strcmp(x, y) == 0);
}
