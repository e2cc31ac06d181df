/* opencl_kernels.c — the kernels of kernels/ on OpenCL: the program is built
 * from the source embedded at build time, once per device per process, and
 * its binary is cached on disk so that the next process skips compilation.
 *
 * Cache: $DLRT_CACHE_DIR, else $XDG_CACHE_HOME/dlrt, else ~/.cache/dlrt; one
 * file per (device, vendor, driver, build options, source) under opencl/,
 * named by a 64-bit FNV-1a hash of all of them and holding that hash again,
 * so a file from another driver or source is never used. Files are replaced
 * atomically (util/replace.h), so a kill leaves no half file and no
 * temporary files that pile up. A cache that cannot be read or written is
 * skipped (DLRT_CACHE_DIR=off turns it off); it never fails a launch. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dialect.h"
#include "opencl_internal.h"
#include "util/file.h"
#include "util/replace.h"
#include "util/status.h"

/* kernels/dialect.h and the kernel files, embedded by kernels/embed.sh. */
extern const char dlrt__opencl_source[];

#define CACHE_MAGIC "DLRTCLB1"

/* ---------------------------------------------------------------- disk cache */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

static uint64_t cache_key(const ocl_device *dev, const char *options) {
  uint64_t h = 0xcbf29ce484222325ULL;
  h = fnv1a(h, dev->driver, strlen(dev->driver) + 1);
  h = fnv1a(h, options, strlen(options) + 1);
  return fnv1a(h, dlrt__opencl_source, strlen(dlrt__opencl_source));
}

/* mkdir -p for the cache folder; 0 on success. */
static int make_dirs(char *path) {
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    int err = mkdir(path, 0755) != 0 && errno != EEXIST;
    *p = '/';
    if (err) return -1;
  }
  return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* The cache folder, or 0 when caching is off or no folder can be named. */
static int cache_dir(char *out, size_t n) {
  const char *dir = getenv("DLRT_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
             *home = getenv("HOME");
  int len;
  if (dir && strcmp(dir, "off") == 0) return 0;
  if (dir && *dir) len = snprintf(out, n, "%s/opencl", dir);
  else if (xdg && *xdg) len = snprintf(out, n, "%s/dlrt/opencl", xdg);
  else if (home && *home) len = snprintf(out, n, "%s/.cache/dlrt/opencl", home);
  else return 0;
  return len > 0 && (size_t)len < n;
}

static int cache_path(uint64_t key, char *out, size_t n) {
  char dir[768];
  if (!cache_dir(dir, sizeof dir)) return 0;
  int len = snprintf(out, n, "%s/%016llx.bin", dir, (unsigned long long)key);
  return len > 0 && (size_t)len < n;
}

/* Reads a cached binary; NULL when absent or not this key's. */
static unsigned char *cache_read(uint64_t key, size_t *size) {
  char path[1024];
  if (!cache_path(key, path, sizeof path)) return NULL;
  /* A FIFO or device planted in the cache must not block the start. */
  struct stat st;
  int fd = dlrt__open_regular_fd(path, &st);
  if (fd < 0) return NULL;
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    return NULL;
  }
  char magic[8];
  uint64_t stored_key = 0, n = 0;
  unsigned char *data = NULL;
  if (fread(magic, 1, 8, f) == 8 && memcmp(magic, CACHE_MAGIC, 8) == 0 &&
      fread(&stored_key, sizeof stored_key, 1, f) == 1 && stored_key == key &&
      fread(&n, sizeof n, 1, f) == 1 && n > 0 && n < ((uint64_t)1 << 31) &&
      (data = malloc(n)) && fread(data, 1, n, f) == n) {
    fclose(f);
    *size = n;
    return data;
  }
  free(data);
  fclose(f);
  return NULL;
}

/* Best effort: a failure leaves the cache as it was (a message in
 * dlrt_last_error, which the launch that goes on does not report). */
static void cache_write(uint64_t key, const unsigned char *data, size_t size) {
  char dir[768], path[1024];
  if (!cache_dir(dir, sizeof dir) || make_dirs(dir) != 0) return;
  if (!cache_path(key, path, sizeof path)) return;
  unsigned char head[8 + sizeof key + sizeof(uint64_t)];
  uint64_t n = size;
  memcpy(head, CACHE_MAGIC, 8);
  memcpy(head + 8, &key, sizeof key);
  memcpy(head + 8 + sizeof key, &n, sizeof n);
  dlrt__replace r;
  if (dlrt__replace_open(&r, path) < 0) return;
  if (dlrt__write_all(r.fd, path, head, sizeof head) < 0 ||
      dlrt__write_all(r.fd, path, data, size) < 0) {
    dlrt__replace_abort(&r);
    return;
  }
  (void)dlrt__replace_commit(&r);
}

/* ---------------------------------------------------------------- program */

static void save_binary(ocl_device *dev, uint64_t key) {
  size_t size = 0;
  if (clGetProgramInfo(dev->program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) !=
          CL_SUCCESS || size == 0)
    return;
  unsigned char *binary = malloc(size);
  if (!binary) return;
  if (clGetProgramInfo(dev->program, CL_PROGRAM_BINARIES, sizeof binary, &binary, NULL) ==
      CL_SUCCESS)
    cache_write(key, binary, size);
  free(binary);
}

/* Tries the cached binary; 1 when it built. */
static int load_cached(ocl_device *dev, uint64_t key, const char *options) {
  size_t size;
  unsigned char *binary = cache_read(key, &size);
  if (!binary) return 0;
  cl_int err, status;
  const unsigned char *bins[1] = {binary};
  cl_program p = clCreateProgramWithBinary(dev->context, 1, &dev->device, &size, bins,
                                           &status, &err);
  free(binary);
  if (!p) return 0;
  if (status != CL_SUCCESS || clBuildProgram(p, 1, &dev->device, options, NULL, NULL) != CL_SUCCESS) {
    clReleaseProgram(p); /* stale or foreign: rebuild from source */
    return 0;
  }
  dev->program = p;
  return 1;
}

/* Builds the program; the caller holds dev->lock. On failure the error
 * carries the device's build log. */
static int build_program(ocl_device *dev) {
  const char *extra = getenv("DLRT_OPENCL_BUILD_OPTIONS");
  char options[512];
  snprintf(options, sizeof options, "-cl-std=CL1.2 %s", extra ? extra : "");
  uint64_t key = cache_key(dev, options);
  if (load_cached(dev, key, options)) return DLRT_OK;

  cl_program p;
  int rc = ocl_build_program(dev, dlrt__opencl_source, options, "dlrt's OpenCL kernels",
                             extra != NULL, &p);
  if (rc < 0) return rc;
  dev->program = p;
  save_binary(dev, key);
  return DLRT_OK;
}

int ocl_build_program(ocl_device *dev, const char *src, const char *options, const char *what,
                      int user_options, cl_program *out) {
  cl_int err;
  cl_program p = clCreateProgramWithSource(dev->context, 1, &src, NULL, &err);
  if (!p) return ocl_fail(dev, "clCreateProgramWithSource", err);
  err = clBuildProgram(p, 1, &dev->device, options, NULL, NULL);
  if (err != CL_SUCCESS) {
    char log[3072] = "";
    clGetProgramBuildInfo(p, dev->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    log[sizeof log - 1] = '\0';
    clReleaseProgram(p);
    return dlrt__set_error(DLRT_ERR_BACKEND, "%s: building %s failed (%s) with options "
                           "\"%s\"%s; build log:\n%s", dev->name, what, ocl_error_name(err),
                           options, user_options ? " (check DLRT_OPENCL_BUILD_OPTIONS)" : "",
                           log);
  }
  *out = p;
  return DLRT_OK;
}

void ocl_kernels_release(ocl_device *dev) {
  for (int i = 0; i < DLRT__K_COUNT; i++)
    if (dev->kernels[i]) clReleaseKernel(dev->kernels[i]);
  memset(dev->kernels, 0, sizeof dev->kernels);
  if (dev->program) clReleaseProgram(dev->program);
  dev->program = NULL;
}

/* The kernel, created on first use; the caller holds dev->lock. */
static int get_kernel(ocl_device *dev, int id, cl_kernel *out) {
  int rc;
  if (!dev->program && (rc = build_program(dev)) < 0) return rc;
  if (!dev->kernels[id]) {
    const char *name = dlrt__kernel_table[id].name;
    cl_int err;
    cl_kernel k = clCreateKernel(dev->program, name, &err);
    if (!k) return ocl_fail(dev, name, err);
    size_t wg = 0;
    clGetKernelWorkGroupInfo(k, dev->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    if (wg < DLRT_WG) {
      clReleaseKernel(k);
      return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s: kernel %s needs work-groups of %d, "
                             "the device allows %zu", dev->name, name, DLRT_WG, wg);
    }
    dev->kernels[id] = k;
  }
  *out = dev->kernels[id];
  return DLRT_OK;
}

/* ---------------------------------------------------------------- launch */

static cl_int set_args(cl_kernel k, const dlrt__launch *l) {
  cl_uint index = 0;
  cl_int err = CL_SUCCESS;
  for (int i = 0; i < l->n_args && err == CL_SUCCESS; i++) {
    const dlrt__arg *a = &l->args[i];
    switch (a->kind) {
    case DLRT__ARG_BUFFER: {
      /* (buffer, element offset): see DLRT_PTR in kernels/dialect.h. */
      cl_long offset = (cl_long)(a->offset / a->elem_size);
      err = clSetKernelArg(k, index++, sizeof(cl_mem), &a->mem.handle);
      if (err == CL_SUCCESS) err = clSetKernelArg(k, index++, sizeof offset, &offset);
      break;
    }
    case DLRT__ARG_F32: err = clSetKernelArg(k, index++, sizeof(cl_float), &a->f); break;
    case DLRT__ARG_I64: {
      cl_long v = a->i;
      err = clSetKernelArg(k, index++, sizeof v, &v);
      break;
    }
    }
  }
  return err;
}

int ocl_launch(void *ps, const dlrt__launch *l) {
  ocl_stream *s = ps;
  ocl_device *dev = s->dev;
  int grouped = l->items == 0;
  cl_kernel k = NULL;
  pthread_mutex_lock(&dev->lock);
  int rc = get_kernel(dev, l->kernel, &k);
  if (rc < 0) goto out;
  cl_int err = set_args(k, l);
  if (err != CL_SUCCESS) {
    rc = ocl_fail(dev, "clSetKernelArg", err);
    goto out;
  }
  /* One work-item per item (the kernels' grid-stride loops then run once):
   * capping the launch at a few groups per compute unit and striding made
   * PoCL 30x slower on elementwise kernels (each work-item's loop defeats
   * its work-group vectorisation); GPUs are built for many groups. */
  size_t groups = grouped ? (size_t)l->groups : ((size_t)l->items + DLRT_WG - 1) / DLRT_WG;
  if (groups == 0) groups = 1;
  /* A fixed local size for every launch: drivers such as PoCL compile a
   * kernel once per local size, so letting them choose costs a compile per
   * global size. */
  size_t local = DLRT_WG, global = groups * DLRT_WG;
  err = clEnqueueNDRangeKernel(s->queue, k, 1, NULL, &global, &local, 0, NULL, NULL);
  if (err != CL_SUCCESS) rc = ocl_fail(dev, dlrt__kernel_table[l->kernel].name, err);
  else clFlush(s->queue);
out:
  pthread_mutex_unlock(&dev->lock);
  return rc;
}
