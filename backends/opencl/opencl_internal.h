/* opencl_internal.h — the OpenCL backend's objects, shared by its files. */
#ifndef DLRT_BACKENDS_OPENCL_INTERNAL_H
#define DLRT_BACKENDS_OPENCL_INTERNAL_H

#include <pthread.h>

#ifdef __APPLE__
#include <OpenCL/cl.h>
#else
#include <CL/cl.h>
#endif

#include "device/backend.h"

typedef struct {
  cl_platform_id platform;
  cl_device_id device;
} ocl_entry;

typedef struct {
  int n;
  ocl_entry *entries;
} ocl_backend;

typedef struct {
  cl_context context;
  cl_device_id device;
  cl_command_queue io_queue; /* maps and unmaps of pinned host memory */
  char name[32];             /* "opencl:N" for messages */
  pthread_mutex_t lock;
  uint64_t allocated;        /* bytes in live cl_mem buffers (free-memory estimate) */
  uint64_t max_alloc;        /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
  cl_uint compute_units;
  int is_cpu;                /* CL_DEVICE_TYPE_CPU (PoCL): fp32 GEMM in opencl.c's kernel */
  char driver[128];          /* platform and driver version: part of the cache key */
  /* The kernels of kernels/, built (or loaded from the disk cache) on first
   * use. The lock also covers setting kernel arguments and enqueueing:
   * cl_kernel arguments are shared state. */
  cl_program program;
  cl_kernel kernels[DLRT__K_COUNT];
  /* opencl.c's tiled GEMM (fp16 and bf16 always; fp32 on CPU devices and
   * without CLBlast): its own small program, built on first use under the
   * lock like the one above; kernels [type: f16, bf16, f32][trans_a][trans_b],
   * created on first use. */
  cl_program hgemm_program;
  cl_kernel hgemm_kernels[3][2][2];
  cl_kernel hgemm_reduce[3]; /* sums of a GEMM split along k, by type */
  size_t hgemm_local[2], hgemm_tile[2]; /* work-group and C tile (x: n, y: m) */
} ocl_device;

typedef struct {
  ocl_device *dev;
  cl_command_queue queue;
  /* The partial sums of GEMMs split along k (opencl_gemm.c), reused by
   * every GEMM on this in-order queue; grown on demand. */
  cl_mem gemm_scratch;
  size_t gemm_scratch_bytes;
} ocl_stream;

typedef struct {
  ocl_device *dev;
  cl_event event; /* the last recorded marker, NULL before the first */
} ocl_event;

/* "CL_OUT_OF_RESOURCES" for an error code. */
const char *ocl_error_name(cl_int err);
/* Sets the detail message for a failed OpenCL call and returns the status
 * (DLRT_ERR_OOM for allocation failures, DLRT_ERR_BACKEND otherwise). */
int ocl_fail(const ocl_device *dev, const char *call, cl_int err);

/* Builds `src` for the device; a failed build gives DLRT_ERR_BACKEND with
 * `what`, the options and the build log (opencl_kernels.c). */
int ocl_build_program(ocl_device *dev, const char *src, const char *options, const char *what,
                      int user_options, cl_program *out);

/* opencl_gemm.c: the backend's GEMM, and the release of its program. */
int ocl_gemm(void *stream, const dlrt_gemm_desc *d, dlrt_mem a, size_t a_off, dlrt_mem b,
             size_t b_off, dlrt_mem c, size_t c_off);
void ocl_gemm_release(ocl_device *dev);

/* opencl_kernels.c: runs a kernel of kernels/ on a stream. */
int ocl_launch(void *stream, const dlrt__launch *launch);
/* Releases the device's program and kernels. */
void ocl_kernels_release(ocl_device *dev);

#endif
