/* cuda.c — the CUDA backend through the runtime API (cudart, linked
 * statically so that a machine without the NVIDIA driver loads libdlrt and
 * sees zero CUDA devices). Memory, pinned host memory, streams, events and
 * copies here; GEMM (cuBLAS) and the kernels of kernels/ in cuda_compute.c.
 * Every entry point selects its device first: CUDA state is per host thread. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "util/status.h"

typedef struct {
  cuda_device *dev;
  cudaEvent_t event;
} cuda_event;

int cuda_fail(const cuda_device *dev, const char *call, cudaError_t err) {
  int status = err == cudaErrorMemoryAllocation ? DLRT_ERR_OOM : DLRT_ERR_BACKEND;
  cudaGetLastError(); /* clear the sticky non-fatal error */
  return dlrt__set_error(status, "%s: %s failed: %s (%s)", dev ? dev->name : "cuda", call,
                         cudaGetErrorString(err), cudaGetErrorName(err));
}

#define CUDA_TRY(dev, call)                                                    \
  do {                                                                         \
    cudaError_t err_ = (call);                                                 \
    if (err_ != cudaSuccess) return cuda_fail((dev), #call, err_);             \
  } while (0)

/* ---------------------------------------------------------------- enumeration */

static int cuda_init(void **ctx, int *n_devices) {
  int n = 0;
  *ctx = NULL;
  /* No driver, too old a driver, no GPU: all mean zero devices. */
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  *n_devices = n;
  return DLRT_OK;
}

static void cuda_shutdown(void *ctx) {
  (void)ctx;
#ifdef DLRT_HAVE_NCCL
  cuda_nccl_release();
#endif
}

static int cuda_device_props(void *ctx, int index, dlrt_device_props *p) {
  struct cudaDeviceProp prop;
  cuda_device tmp = {.ordinal = index, .name = "cuda"};
  (void)ctx;
  CUDA_TRY(&tmp, cudaGetDeviceProperties(&prop, index));
  snprintf(p->name, sizeof p->name, "%.127s", prop.name);
  snprintf(p->vendor, sizeof p->vendor, "NVIDIA");
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  snprintf(p->driver, sizeof p->driver, "CUDA driver %d.%d, runtime %d.%d", driver / 1000,
           driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
  p->kind = prop.integrated ? DLRT_DEVICE_INTEGRATED : DLRT_DEVICE_DISCRETE;
  p->total_memory = prop.totalGlobalMem;
  p->free_memory = prop.totalGlobalMem;
  size_t free_b = 0, total_b = 0;
  int current = 0;
  cudaGetDevice(&current);
  if (cudaSetDevice(index) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
    p->free_memory = free_b;
  cudaGetLastError();
  cudaSetDevice(current);
  p->alignment = 256; /* cudaMalloc's guarantee, and what coalesced loads want */
  p->host_addressable = 0;
  p->compute_units = prop.multiProcessorCount;
  return DLRT_OK;
}

static int cuda_device_open(void *ctx, int index, void **out) {
  (void)ctx;
  cuda_device *dev = calloc(1, sizeof *dev);
  if (!dev) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  dev->ordinal = index;
  snprintf(dev->name, sizeof dev->name, "cuda:%d", index);
  cudaError_t err = cudaSetDevice(index);
  if (err == cudaSuccess) err = cudaFree(NULL); /* create the primary context now */
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&dev->multiprocessors, cudaDevAttrMultiProcessorCount, index);
  if (err != cudaSuccess) {
    int rc = cuda_fail(dev, "cudaSetDevice", err);
    free(dev);
    return rc;
  }
  pthread_mutex_init(&dev->lock, NULL);
  *out = dev;
  return DLRT_OK;
}

static void cuda_device_close(void *p) {
  cuda_device *dev = p;
  cudaSetDevice(dev->ordinal);
  cudaDeviceSynchronize();
  cuda_compute_release(dev);
  pthread_mutex_destroy(&dev->lock);
  free(dev);
}

/* ---------------------------------------------------------------- memory */

static int cuda_mem_alloc(void *p, size_t bytes, dlrt_mem *out) {
  cuda_device *dev = p;
  CUDA_TRY(dev, cudaSetDevice(dev->ordinal));
  CUDA_TRY(dev, cudaMalloc(&out->handle, bytes));
  out->host = NULL;
  return DLRT_OK;
}

static void cuda_mem_free(void *p, dlrt_mem mem) {
  cuda_device *dev = p;
  cudaSetDevice(dev->ordinal);
  cudaFree(mem.handle);
}

static int cuda_host_alloc(void *p, size_t bytes, void **ptr, void **handle) {
  cuda_device *dev = p;
  *handle = NULL;
  CUDA_TRY(dev, cudaSetDevice(dev->ordinal));
  /* Portable: usable for copies with every CUDA device, not just this one. */
  CUDA_TRY(dev, cudaHostAlloc(ptr, bytes, cudaHostAllocPortable));
  return DLRT_OK;
}

static void cuda_host_free(void *p, void *ptr, void *handle) {
  (void)p;
  (void)handle;
  cudaFreeHost(ptr);
}

/* ---------------------------------------------------------------- streams */

static int cuda_stream_create(void *p, void **out) {
  cuda_device *dev = p;
  cuda_stream *s = calloc(1, sizeof *s);
  if (!s) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  s->dev = dev;
  cudaError_t err = cudaSetDevice(dev->ordinal);
  /* Non-blocking: no implicit synchronization with the legacy default stream. */
  if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    free(s);
    return cuda_fail(dev, "cudaStreamCreateWithFlags", err);
  }
  *out = s;
  return DLRT_OK;
}

static void cuda_stream_destroy(void *p) {
  cuda_stream *s = p;
  cudaSetDevice(s->dev->ordinal);
  cudaStreamSynchronize(s->stream);
  cudaStreamDestroy(s->stream);
  free(s);
}

static int cuda_stream_synchronize(void *p) {
  cuda_stream *s = p;
  CUDA_TRY(s->dev, cudaStreamSynchronize(s->stream));
  return DLRT_OK;
}

static int cuda_event_create(void *p, void **out) {
  cuda_device *dev = p;
  cuda_event *e = calloc(1, sizeof *e);
  if (!e) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  e->dev = dev;
  cudaError_t err = cudaSetDevice(dev->ordinal);
  if (err == cudaSuccess) err = cudaEventCreate(&e->event);
  if (err != cudaSuccess) {
    free(e);
    return cuda_fail(dev, "cudaEventCreate", err);
  }
  *out = e;
  return DLRT_OK;
}

static void cuda_event_destroy(void *p) {
  cuda_event *e = p;
  cudaEventDestroy(e->event);
  free(e);
}

static int cuda_event_record(void *pe, void *ps) {
  cuda_event *e = pe;
  cuda_stream *s = ps;
  CUDA_TRY(s->dev, cudaSetDevice(s->dev->ordinal));
  CUDA_TRY(s->dev, cudaEventRecord(e->event, s->stream));
  return DLRT_OK;
}

static int cuda_stream_wait_event(void *ps, void *pe) {
  cuda_stream *s = ps;
  cuda_event *e = pe;
  CUDA_TRY(s->dev, cudaStreamWaitEvent(s->stream, e->event, 0));
  return DLRT_OK;
}

static int cuda_event_synchronize(void *pe) {
  cuda_event *e = pe;
  CUDA_TRY(e->dev, cudaEventSynchronize(e->event));
  return DLRT_OK;
}

static int cuda_event_query(void *pe) {
  cuda_event *e = pe;
  cudaError_t err = cudaEventQuery(e->event);
  if (err == cudaSuccess) return 1;
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return 0;
  }
  return cuda_fail(e->dev, "cudaEventQuery", err);
}

static int cuda_event_elapsed_ms(void *pa, void *pb, float *ms) {
  cuda_event *a = pa, *b = pb;
  cudaError_t err = cudaEventElapsedTime(ms, a->event, b->event);
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return dlrt__set_error(DLRT_ERR_STATE, "%s: elapsed time of events that have not "
                           "completed: synchronize the later event first", a->dev->name);
  }
  if (err != cudaSuccess) return cuda_fail(a->dev, "cudaEventElapsedTime", err);
  return DLRT_OK;
}

/* ---------------------------------------------------------------- copies */

/* With unified addressing the runtime infers each side's kind. */
static int copy_async(cuda_stream *s, void *dst, const void *src, size_t bytes) {
  CUDA_TRY(s->dev, cudaSetDevice(s->dev->ordinal));
  CUDA_TRY(s->dev, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s->stream));
  return DLRT_OK;
}

static int cuda_copy_h2d(void *ps, dlrt_mem dst, size_t off, const void *src, size_t bytes) {
  return copy_async(ps, (char *)dst.handle + off, src, bytes);
}

static int cuda_copy_d2h(void *ps, void *dst, dlrt_mem src, size_t off, size_t bytes) {
  return copy_async(ps, dst, (char *)src.handle + off, bytes);
}

/* Rows: one 2-D copy, packed on the device side. */
static int copy_rows_async(cuda_stream *s, void *dst, size_t dst_pitch, const void *src,
                           size_t src_pitch, size_t width, size_t rows) {
  CUDA_TRY(s->dev, cudaSetDevice(s->dev->ordinal));
  CUDA_TRY(s->dev, cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows,
                                     cudaMemcpyDefault, s->stream));
  return DLRT_OK;
}

static int cuda_copy_h2d_rows(void *ps, dlrt_mem dst, size_t off, const void *src, size_t pitch,
                              size_t width, size_t rows) {
  return copy_rows_async(ps, (char *)dst.handle + off, width, src, pitch, width, rows);
}

static int cuda_copy_d2h_rows(void *ps, void *dst, size_t pitch, dlrt_mem src, size_t off,
                              size_t width, size_t rows) {
  return copy_rows_async(ps, dst, pitch, (char *)src.handle + off, width, width, rows);
}

static int cuda_copy_d2d(void *ps, dlrt_mem dst, size_t doff, dlrt_mem src, size_t soff,
                         size_t bytes) {
  return copy_async(ps, (char *)dst.handle + doff, (char *)src.handle + soff, bytes);
}

static int cuda_copy_peer(void *ps, void *pdst, dlrt_mem dst, size_t doff, void *psrc,
                          dlrt_mem src, size_t soff, size_t bytes) {
  cuda_stream *s = ps;
  cuda_device *dd = pdst, *sd = psrc;
  CUDA_TRY(s->dev, cudaSetDevice(s->dev->ordinal));
  CUDA_TRY(s->dev, cudaMemcpyPeerAsync((char *)dst.handle + doff, dd->ordinal,
                                       (char *)src.handle + soff, sd->ordinal, bytes, s->stream));
  return DLRT_OK;
}

static int cuda_memset(void *ps, dlrt_mem dst, size_t off, int value, size_t bytes) {
  cuda_stream *s = ps;
  CUDA_TRY(s->dev, cudaSetDevice(s->dev->ordinal));
  CUDA_TRY(s->dev, cudaMemsetAsync((char *)dst.handle + off, value, bytes, s->stream));
  return DLRT_OK;
}

const dlrt_backend_iface dlrt__backend_cuda = {
    .api_version = DLRT_BACKEND_API_VERSION,
    .name = "cuda",
    .device_addresses = 1,
    .init = cuda_init,
    .shutdown = cuda_shutdown,
    .device_props = cuda_device_props,
    .device_open = cuda_device_open,
    .device_close = cuda_device_close,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_synchronize = cuda_stream_synchronize,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait_event = cuda_stream_wait_event,
    .event_synchronize = cuda_event_synchronize,
    .event_query = cuda_event_query,
    .event_elapsed_ms = cuda_event_elapsed_ms,
    .copy_h2d = cuda_copy_h2d,
    .copy_d2h = cuda_copy_d2h,
    .copy_h2d_rows = cuda_copy_h2d_rows,
    .copy_d2h_rows = cuda_copy_d2h_rows,
    .copy_d2d = cuda_copy_d2d,
    .copy_peer = cuda_copy_peer,
    .memset = cuda_memset,
    .gemm = cuda_gemm,
    .launch = cuda_launch,
#ifdef DLRT_HAVE_NCCL
    .allreduce_sum_f32 = cuda_allreduce_sum_f32,
#endif
};
