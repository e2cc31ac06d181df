/* test-opencl-program.c — the OpenCL backend's program handling: kernels are
 * built from the embedded source once, cached on disk under $DLRT_CACHE_DIR
 * and loaded from there by the next run, and a failed build reports the
 * device's build log. Each scenario restarts the library, since programs are
 * built once per device per process. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

/* Runs one fill kernel on opencl:0; returns its status (DLRT_OK or the error). */
static int run_fill(void) {
  dlrt_device_t *dev;
  dlrt_buffer_t *y = NULL;
  int rc = dlrt_device_open("opencl:0", &dev);
  if (rc == DLRT_OK) rc = dlrt_buffer_alloc(dev, 64 * sizeof(float), NULL, &y);
  if (rc == DLRT_OK)
    rc = dlrt_elementwise(dlrt_device_default_stream(dev), DLRT_EW_FILL, DLRT_F32, 64, 3.0f, y,
                          0, NULL, 0, NULL, 0);
  if (rc == DLRT_OK) rc = dlrt_device_synchronize(dev);
  float back[64] = {0};
  if (rc == DLRT_OK) rc = dlrt_copy_d2h(back, y, 0, sizeof back, NULL);
  if (rc == DLRT_OK && (back[0] != 3.0f || back[63] != 3.0f)) rc = DLRT_ERR_BACKEND;
  dlrt_buffer_free(y);
  return rc;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The single cache file under dir/opencl, or "" (counting files in *count). */
static void cache_file(const char *dir, char *out, size_t n, int *count) {
  char sub[512];
  snprintf(sub, sizeof sub, "%s/opencl", dir);
  *count = 0;
  out[0] = '\0';
  DIR *d = opendir(sub);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    (*count)++;
    snprintf(out, n, "%s/%s", sub, e->d_name);
  }
  closedir(d);
}

int main(void) {
  unsetenv("DLRT_OPENCL_BUILD_OPTIONS");
  unsetenv("DLRT_BACKEND");
  if (dlrt_backend_device_count("opencl") <= 0) {
    skip(1, "no OpenCL device (or the backend is not compiled in)");
    dlrt_shutdown();
    return done_testing();
  }
  char dir[512];
  tap_tempdir("dlrt-cache", dir, sizeof dir);
  setenv("DLRT_CACHE_DIR", dir, 1);

  /* First run: built from source, binary written to the cache. */
  dlrt_shutdown();
  double t0 = now_ms();
  tap_check(run_fill(), "first run: fill on opencl:0");
  double built_ms = now_ms() - t0;
  char file[768];
  int count;
  cache_file(dir, file, sizeof file, &count);
  is_int(count, 1, "one program binary cached under %s/opencl", dir);
  struct stat first, second;
  int have_first = stat(file, &first) == 0;
  ok(have_first && first.st_size > 16, "the cached binary is not empty (%lld bytes)",
     have_first ? (long long)first.st_size : -1LL);

  /* Second run: loaded from the cache, so the file is not rewritten (a
   * rebuild writes a new file and renames it over the old one). */
  dlrt_shutdown();
  t0 = now_ms();
  tap_check(run_fill(), "second run: fill on opencl:0");
  /* Printed, not asserted: timings belong to benchmarks. */
  diag("first kernel launch: %.0f ms building from source, %.0f ms from the cache",
       built_ms, now_ms() - t0);
  ok(stat(file, &second) == 0 && have_first && second.st_ino == first.st_ino &&
         second.st_mtime == first.st_mtime,
     "the second run used the cached binary (file untouched)");

  /* A corrupt cache file is ignored and replaced. */
  FILE *f = fopen(file, "r+b");
  if (f) {
    fseek(f, 8, SEEK_SET);
    fputs("garbage!", f);
    fclose(f);
  }
  dlrt_shutdown();
  tap_check(run_fill(), "a corrupt cache file falls back to building from source");
  ok(stat(file, &second) == 0 && second.st_ino != first.st_ino,
     "the corrupt file was replaced by a fresh binary");

  /* A build that fails reports the build log, and no binary is cached. */
  setenv("DLRT_OPENCL_BUILD_OPTIONS", "-Dfloat=undeclared_type", 1);
  dlrt_shutdown();
  int rc = run_fill();
  is_status(rc, DLRT_ERR_BACKEND, "a failed kernel build is DLRT_ERR_BACKEND");
  const char *msg = dlrt_last_error();
  ok(strstr(msg, "build log") && strstr(msg, "undeclared_type"),
     "the error carries the build log naming the problem");
  ok(strstr(msg, "DLRT_OPENCL_BUILD_OPTIONS") != NULL, "and points at DLRT_OPENCL_BUILD_OPTIONS");
  cache_file(dir, file, sizeof file, &count);
  is_int(count, 1, "the failed build cached nothing");
  unsetenv("DLRT_OPENCL_BUILD_OPTIONS");

  /* DLRT_CACHE_DIR=off: nothing written anywhere. */
  char off_dir[512];
  tap_tempdir("dlrt-cache-off", off_dir, sizeof off_dir);
  setenv("XDG_CACHE_HOME", off_dir, 1);
  setenv("DLRT_CACHE_DIR", "off", 1);
  dlrt_shutdown();
  tap_check(run_fill(), "with DLRT_CACHE_DIR=off the kernels still build");
  char sub[600];
  snprintf(sub, sizeof sub, "%s/dlrt", off_dir);
  struct stat st;
  ok(stat(sub, &st) != 0, "and nothing is written under $XDG_CACHE_HOME");

  dlrt_shutdown();
  tap_remove_tree(dir);
  tap_remove_tree(off_dir);
  return done_testing();
}
