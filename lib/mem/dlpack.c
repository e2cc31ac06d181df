/* dlpack.c — DLPack export of buffers (github.com/dmlc/dlpack, ABI 1.0):
 * a managed tensor over a buffer, holding a reference to it that its deleter
 * drops, and the PyCapsule destructor the DLPack Python specification asks
 * of a producer, written in C so that it runs no Python code: a capsule a
 * consumer refused (and drops while its exception is pending) is freed
 * without touching that exception. */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mem/buffer.h"
#include "util/status.h"

/* DLPack's structures, as dlpack.h 1.0 lays them out (the ABI is fixed by
 * the specification; these are private so as not to clash with a caller's
 * own dlpack.h). */
typedef struct {
  int32_t device_type, device_id;
} dl_device;
typedef struct {
  uint8_t code, bits;
  uint16_t lanes;
} dl_dtype;
typedef struct {
  void *data;
  dl_device device;
  int32_t ndim;
  dl_dtype dtype;
  int64_t *shape, *strides; /* strides in elements */
  uint64_t byte_offset;
} dl_tensor;
typedef struct dl_managed {
  dl_tensor tensor;
  void *manager_ctx;
  void (*deleter)(struct dl_managed *self);
} dl_managed;
typedef struct dl_versioned {
  uint32_t major, minor;
  void *manager_ctx;
  void (*deleter)(struct dl_versioned *self);
  uint64_t flags;
  dl_tensor tensor;
} dl_versioned;

enum { DL_CPU = 1, DL_CUDA = 2, DL_OPENCL = 4 };
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4 };

/* One allocation per export: the managed tensor, then the buffer it holds
 * and its shape and strides. */
typedef struct {
  union {
    dl_managed legacy;
    dl_versioned versioned;
  } m;
  dlrt_buffer_t *buf;
  int64_t dims[2 * DLRT_MAX_DIMS]; /* shape, then strides */
} export_t;

static void legacy_deleter(dl_managed *self) {
  export_t *x = self->manager_ctx;
  dlrt_buffer_free(x->buf);
  free(x);
}

static void versioned_deleter(dl_versioned *self) {
  export_t *x = self->manager_ctx;
  dlrt_buffer_free(x->buf);
  free(x);
}

int dlrt_dlpack_device(dlrt_device_t *dev, int32_t *type, int32_t *id) {
  DLRT__CHECK_ARG(dev && type && id, "dlrt_dlpack_device: device, type or id is NULL");
  const char *be = dev->be->name;
  *type = strcmp(be, "cpu") == 0 ? DL_CPU : strcmp(be, "cuda") == 0 ? DL_CUDA
          : strcmp(be, "opencl") == 0 ? DL_OPENCL : 0;
  *id = strcmp(be, "cpu") == 0 ? 0 : dev->index;
  if (*type == 0)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s: DLPack names no device of backend %s",
                           dev->spec, be);
  return DLRT_OK;
}

static int dtype_of(dlrt_dtype dtype, dl_dtype *out) {
  static const dl_dtype map[] = {[DLRT_F32] = {DL_FLOAT, 32, 1}, [DLRT_F16] = {DL_FLOAT, 16, 1},
                                 [DLRT_BF16] = {DL_BFLOAT, 16, 1}, [DLRT_I32] = {DL_INT, 32, 1},
                                 [DLRT_U8] = {DL_UINT, 8, 1}};
  if ((int)dtype < 0 || (size_t)dtype >= sizeof map / sizeof *map)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "dlrt_dlpack_export: dtype %d is not a "
                           "dlrt dtype", (int)dtype);
  *out = map[dtype];
  return DLRT_OK;
}

int dlrt_dlpack_export(dlrt_buffer_t *buf, size_t offset, dlrt_dtype dtype, int ndim,
                       const int64_t *shape, int versioned, uint64_t flags, void **out) {
  DLRT__CHECK_ARG(buf && out && (shape || ndim == 0),
                  "dlrt_dlpack_export: buffer, shape or out is NULL");
  DLRT__CHECK_ARG(ndim >= 0 && ndim <= DLRT_MAX_DIMS, "dlrt_dlpack_export: %d dimensions "
                  "(0 to %d)", ndim, DLRT_MAX_DIMS);
  DLRT__CHECK_ARG(versioned || flags == 0, "dlrt_dlpack_export: flags need a versioned "
                  "tensor (DLPack 1.0)");
  dl_dtype dt;
  int rc = dtype_of(dtype, &dt);
  if (rc < 0) return rc;
  const dlrt__span *sp = dlrt__span_of(buf);
  size_t elem = dlrt_dtype_size(dtype), bytes = elem;
  for (int i = 0; i < ndim; i++) {
    DLRT__CHECK_ARG(shape[i] >= 0, "dlrt_dlpack_export: dimension %d is %lld", i,
                    (long long)shape[i]);
    if (shape[i] > 0 && bytes > SIZE_MAX / (size_t)shape[i])
      return dlrt__set_error(DLRT_ERR_OUT_OF_RANGE, "dlrt_dlpack_export: the shape overflows");
    bytes *= (size_t)shape[i];
  }
  if (offset > sp->size || bytes > sp->size - offset || offset % elem)
    return dlrt__set_error(DLRT_ERR_OUT_OF_RANGE, "dlrt_dlpack_export: %zu bytes at offset %zu "
                           "of a %zu-byte buffer on %s (the offset a multiple of %zu)", bytes,
                           offset, sp->size, sp->dev->spec, elem);
  dl_tensor t = {.ndim = ndim, .dtype = dt};
  if ((rc = dlrt_dlpack_device(sp->dev, &t.device.device_type, &t.device.device_id)) < 0)
    return rc;
  if (t.device.device_type == DL_OPENCL) { /* data is the cl_mem, the offset apart */
    t.data = sp->mem.handle;
    t.byte_offset = sp->offset + offset;
  } else {
    char *base = t.device.device_type == DL_CPU ? dlrt_buffer_host_ptr(buf)
                                                : dlrt__buffer_device_address(buf);
    if (!base)
      return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "%s: its buffers have no address to export",
                             sp->dev->spec);
    t.data = base + offset;
  }
  export_t *x = calloc(1, sizeof *x);
  if (!x) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  /* Compact row-major strides, in elements, always given (DLPack 1.2 no
   * longer allows NULL for them). */
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    x->dims[i] = shape[i];
    x->dims[DLRT_MAX_DIMS + i] = stride;
    stride *= shape[i] > 1 ? shape[i] : 1;
  }
  t.shape = x->dims;
  t.strides = x->dims + DLRT_MAX_DIMS;
  dlrt_buffer_retain(buf);
  x->buf = buf;
  if (versioned) {
    x->m.versioned = (dl_versioned){.major = 1, .minor = 0, .manager_ctx = x,
                                    .deleter = versioned_deleter, .flags = flags, .tensor = t};
  } else {
    x->m.legacy = (dl_managed){.tensor = t, .manager_ctx = x, .deleter = legacy_deleter};
  }
  *out = x; /* the union is the first member */
  return DLRT_OK;
}

/* PyCapsule_IsValid and PyCapsule_GetPointer, as the binding gives them. */
static int (*capsule_is_valid)(void *capsule, const char *name);
static void *(*capsule_pointer)(void *capsule, const char *name);

static const char legacy_name[] = "dltensor", versioned_name[] = "dltensor_versioned";

const char *dlrt_dlpack_capsule_name(int versioned) {
  return versioned ? versioned_name : legacy_name;
}

int dlrt_dlpack_capsule_calls(int (*is_valid)(void *capsule, const char *name),
                              void *(*get_pointer)(void *capsule, const char *name)) {
  DLRT__CHECK_ARG(is_valid && get_pointer, "dlrt_dlpack_capsule_calls: a call is NULL");
  __atomic_store_n(&capsule_pointer, get_pointer, __ATOMIC_RELEASE);
  __atomic_store_n(&capsule_is_valid, is_valid, __ATOMIC_RELEASE);
  return DLRT_OK;
}

/* A capsule still named as made was never consumed (a consumer renames it
 * "used_dltensor"): its tensor is freed here, by whatever deleter it has. */
void dlrt_dlpack_capsule_destructor(void *capsule) {
  int (*is_valid)(void *, const char *) = __atomic_load_n(&capsule_is_valid, __ATOMIC_ACQUIRE);
  void *(*pointer)(void *, const char *) = __atomic_load_n(&capsule_pointer, __ATOMIC_ACQUIRE);
  if (!capsule || !is_valid || !pointer) return;
  if (is_valid(capsule, legacy_name)) {
    dl_managed *m = pointer(capsule, legacy_name);
    if (m && m->deleter) m->deleter(m);
  } else if (is_valid(capsule, versioned_name)) {
    dl_versioned *m = pointer(capsule, versioned_name);
    if (m && m->deleter) m->deleter(m);
  }
}

_Static_assert(sizeof(dl_tensor) == 48 && sizeof(dl_managed) == 64 &&
                   sizeof(dl_versioned) == 80 && offsetof(dl_versioned, tensor) == 32,
               "DLPack 1.0's layout on a 64-bit machine");
