/* cuda.c — the CUDA backend through the runtime API (cudart, linked
 * statically so that a machine without the NVIDIA driver loads libdlrt and
 * sees zero CUDA devices). Memory, pinned host memory, streams, events and
 * copies here; GEMM (cuBLAS) and the kernels of kernels/ in cuda_compute.c.
 * Every entry point selects its device first: CUDA state is per host thread. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "util/host_gate.h"
#include "util/status.h"

typedef struct {
  cuda_device *dev;
  cudaEvent_t event;
} cuda_event;

int cuda_error_is_sticky(cudaError_t err) {
  /* driver_types.h: "This leaves the process in an inconsistent state and
   * any further CUDA work will return the same error." */
  switch (err) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchTimeout:
  case cudaErrorAssert:
  case cudaErrorHardwareStackError:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorLaunchFailure:
  case cudaErrorTensorMemoryLeak:
  case cudaErrorContained:
  case cudaErrorExternalDevice:
  case cudaErrorMpsClientTerminated:
  case cudaErrorECCUncorrectable:
    return 1;
  default:
    return 0;
  }
}

int cuda_check_live(const cuda_device *dev) {
  if (!dev || !__atomic_load_n(&dev->lost, __ATOMIC_ACQUIRE)) return DLRT_OK;
  return dlrt__set_error(DLRT_ERR_DEVICE_LOST, "%s is lost: %s; its CUDA context cannot be "
                         "used again and every buffer on it is gone: restart the process "
                         "(the first error is the one to debug, e.g. under compute-sanitizer)",
                         dev->name, dev->lost_reason);
}

int cuda_fail(cuda_device *dev, const char *call, cudaError_t err) {
  if (cuda_error_is_sticky(err)) {
    /* An asynchronous fault surfaces at whatever call comes next: keep the
     * first one, and fail everything after it the same way. */
    if (dev && !__atomic_load_n(&dev->lost, __ATOMIC_ACQUIRE)) {
      snprintf(dev->lost_reason, sizeof dev->lost_reason, "%s failed: %s (%s)", call,
               cudaGetErrorString(err), cudaGetErrorName(err));
      __atomic_store_n(&dev->lost, 1, __ATOMIC_RELEASE);
    }
    if (dev) return cuda_check_live(dev);
    return dlrt__set_error(DLRT_ERR_DEVICE_LOST, "cuda: %s failed: %s (%s); the CUDA context "
                           "cannot be used again: restart the process", call,
                           cudaGetErrorString(err), cudaGetErrorName(err));
  }
  int status = err == cudaErrorMemoryAllocation ? DLRT_ERR_OOM : DLRT_ERR_BACKEND;
  cudaGetLastError(); /* clear a non-sticky error, so that it is not reported twice */
  return dlrt__set_error(status, "%s: %s failed: %s (%s)", dev ? dev->name : "cuda", call,
                         cudaGetErrorString(err), cudaGetErrorName(err));
}

#define CUDA_TRY(dev, call)                                                    \
  do {                                                                         \
    cudaError_t err_ = (call);                                                 \
    if (err_ != cudaSuccess) return cuda_fail((dev), #call, err_);             \
  } while (0)

/* Selects the device of this entry point (CUDA state is per host thread),
 * after refusing one that a sticky error has lost. */
#define CUDA_ENTER(dev)                                                        \
  do {                                                                         \
    int live_ = cuda_check_live(dev);                                          \
    if (live_ < 0) return live_;                                               \
    CUDA_TRY((dev), cudaSetDevice((dev)->ordinal));                            \
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

/* The registry calls this for every backend whose init succeeded, whatever
 * its ctx (NULL here): NCCL communicators and NVML are process-wide. */
static void cuda_shutdown(void *ctx) {
  (void)ctx;
#ifdef DLRT_HAVE_NCCL
  cuda_nccl_release();
#endif
  cuda_nvml_release();
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
  /* Not cudaMemGetInfo: it needs a context, and making one costs device
   * memory on a GPU this process may never use (cuda_nvml.c). */
  uint64_t free_b = 0;
  p->free_memory = cuda_nvml_free_memory(&prop, &free_b) == DLRT_OK ? free_b
                                                                     : DLRT__FREE_MEMORY_UNKNOWN;
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
  const char *call = "cudaSetDevice";
  cudaError_t err = cudaSetDevice(index);
  if (err == cudaSuccess) {
    call = "cudaFree(NULL)"; /* creates the primary context now */
    err = cudaFree(NULL);
  }
  int max_pitch = 0;
  if (err == cudaSuccess) {
    call = "cudaDeviceGetAttribute";
    err = cudaDeviceGetAttribute(&dev->multiprocessors, cudaDevAttrMultiProcessorCount, index);
  }
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&dev->compute_major, cudaDevAttrComputeCapabilityMajor, index);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, index);
  dev->max_pitch = max_pitch > 0 ? (size_t)max_pitch : 0;
  if (err != cudaSuccess) {
    int rc = cuda_fail(dev, call, err);
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
  CUDA_ENTER(dev);
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
  CUDA_ENTER(dev);
  /* Portable: usable for copies with every CUDA device, not just this one. */
  CUDA_TRY(dev, cudaHostAlloc(ptr, bytes, cudaHostAllocPortable));
  return DLRT_OK;
}

static void cuda_host_free(void *p, void *ptr, void *handle) {
  cuda_device *dev = p;
  (void)handle;
  /* On a thread with no current device, cudaFreeHost would make a context
   * on device 0 to free it. */
  cudaSetDevice(dev->ordinal);
  cudaFreeHost(ptr);
}

/* ---------------------------------------------------------------- streams */

static int cuda_stream_create(void *p, void **out) {
  cuda_device *dev = p;
  cuda_stream *s = calloc(1, sizeof *s);
  if (!s) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  s->dev = dev;
  int live = cuda_check_live(dev);
  if (live < 0) {
    free(s);
    return live;
  }
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
  cuda_compute_stream_release(s);
  cudaStreamDestroy(s->stream);
  free(s);
}

static int cuda_stream_synchronize(void *p) {
  cuda_stream *s = p;
  CUDA_ENTER(s->dev);
  CUDA_TRY(s->dev, cudaStreamSynchronize(s->stream));
  return DLRT_OK;
}

static int cuda_event_create(void *p, void **out) {
  cuda_device *dev = p;
  cuda_event *e = calloc(1, sizeof *e);
  if (!e) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  e->dev = dev;
  int live = cuda_check_live(dev);
  if (live < 0) {
    free(e);
    return live;
  }
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
  cudaSetDevice(e->dev->ordinal);
  cudaEventDestroy(e->event);
  free(e);
}

static int cuda_event_record(void *pe, void *ps) {
  cuda_event *e = pe;
  cuda_stream *s = ps;
  CUDA_ENTER(s->dev);
  CUDA_TRY(s->dev, cudaEventRecord(e->event, s->stream));
  return DLRT_OK;
}

static int cuda_stream_wait_event(void *ps, void *pe) {
  cuda_stream *s = ps;
  cuda_event *e = pe;
  CUDA_ENTER(s->dev);
  CUDA_TRY(s->dev, cudaStreamWaitEvent(s->stream, e->event, 0));
  return DLRT_OK;
}

static int cuda_event_synchronize(void *pe) {
  cuda_event *e = pe;
  CUDA_ENTER(e->dev);
  CUDA_TRY(e->dev, cudaEventSynchronize(e->event));
  return DLRT_OK;
}

static int cuda_event_query(void *pe) {
  cuda_event *e = pe;
  CUDA_ENTER(e->dev);
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
  CUDA_ENTER(a->dev);
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
  CUDA_ENTER(s->dev);
  CUDA_TRY(s->dev, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s->stream));
  return DLRT_OK;
}

static int cuda_copy_h2d(void *ps, dlrt_mem dst, size_t off, const void *src, size_t bytes) {
  return copy_async(ps, (char *)dst.handle + off, src, bytes);
}

static int cuda_copy_d2h(void *ps, void *dst, dlrt_mem src, size_t off, size_t bytes) {
  return copy_async(ps, dst, (char *)src.handle + off, bytes);
}

/* Rows: one 2-D copy, packed on the device side; a copy per row where a
 * pitch is past what cudaMemcpy2DAsync takes (cudaDevAttrMaxPitch, about
 * 2 GiB: a column of a wide row-major matrix), which it would refuse. */
static int copy_rows_async(cuda_stream *s, void *dst, size_t dst_pitch, const void *src,
                           size_t src_pitch, size_t width, size_t rows) {
  CUDA_ENTER(s->dev);
  size_t max_pitch = s->dev->max_pitch;
  if (max_pitch && (dst_pitch > max_pitch || src_pitch > max_pitch)) {
    for (size_t r = 0; r < rows; r++)
      CUDA_TRY(s->dev, cudaMemcpyAsync((char *)dst + r * dst_pitch,
                                       (const char *)src + r * src_pitch, width,
                                       cudaMemcpyDefault, s->stream));
    return DLRT_OK;
  }
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

/* Peer access from `from` to `to`, enabled once per pair where the hardware
 * has it (NVLink, or PCIe peer-to-peer): then a peer copy goes straight
 * between the devices; without it the runtime stages it through the host.
 * Enabling is best effort: a pair without peer access still copies. */
static void enable_peer_access(cuda_device *from, const cuda_device *to) {
  if (to->ordinal >= 64 || from == to) return;
  uint64_t bit = (uint64_t)1 << to->ordinal;
  pthread_mutex_lock(&from->lock);
  if (!(from->peers_enabled & bit)) {
    int can = 0;
    from->peers_enabled |= bit; /* tried: not asked again */
    if (cudaDeviceCanAccessPeer(&can, from->ordinal, to->ordinal) == cudaSuccess && can &&
        cudaSetDevice(from->ordinal) == cudaSuccess)
      cudaDeviceEnablePeerAccess(to->ordinal, 0);
    cudaGetLastError(); /* cudaErrorPeerAccessAlreadyEnabled and friends */
  }
  pthread_mutex_unlock(&from->lock);
}

static int cuda_copy_peer(void *ps, void *pdst, dlrt_mem dst, size_t doff, void *psrc,
                          dlrt_mem src, size_t soff, size_t bytes) {
  cuda_stream *s = ps;
  cuda_device *dd = pdst, *sd = psrc;
  int live = cuda_check_live(dd);
  if (live == DLRT_OK) live = cuda_check_live(sd);
  if (live < 0) return live;
  enable_peer_access(sd, dd);
  enable_peer_access(dd, sd);
  CUDA_ENTER(s->dev);
  CUDA_TRY(s->dev, cudaMemcpyPeerAsync((char *)dst.handle + doff, dd->ordinal,
                                       (char *)src.handle + soff, sd->ordinal, bytes, s->stream));
  return DLRT_OK;
}

static int cuda_memset(void *ps, dlrt_mem dst, size_t off, int value, size_t bytes) {
  cuda_stream *s = ps;
  CUDA_ENTER(s->dev);
  CUDA_TRY(s->dev, cudaMemsetAsync((char *)dst.handle + off, value, bytes, s->stream));
  return DLRT_OK;
}

/* ---------------------------------------------------------------- link gates */

/* The link model's notice and gate (backend.h) as host functions on the
 * stream. The gate's blocks until it opens; CUDA runs a process's host
 * functions on one thread of its own, so while one stream waits at a gate
 * another stream's notice is late: on CUDA the two directions' engines do
 * not overlap, and a modelled link there is for trying a slower one than
 * the real link, whose own time comes on top. */
static int cuda_stream_notify(void *ps, void (*fn)(void *arg), void *arg) {
  cuda_stream *s = ps;
  CUDA_ENTER(s->dev);
  CUDA_TRY(s->dev, cudaLaunchHostFunc(s->stream, fn, arg));
  return DLRT_OK;
}

static int cuda_gate_create(void *dev, void **out) {
  (void)dev;
  return dlrt__host_gate_create((dlrt__host_gate **)out);
}

static void CUDART_CB run_gate_wait(void *gate) { dlrt__host_gate_wait(gate); }

static int cuda_stream_wait_gate(void *ps, void *gate) {
  cuda_stream *s = ps;
  int rc = cuda_check_live(s->dev);
  if (rc < 0) {
    dlrt__host_gate_drop(gate);
    return rc;
  }
  cudaError_t err = cudaSetDevice(s->dev->ordinal);
  if (err == cudaSuccess) err = cudaLaunchHostFunc(s->stream, run_gate_wait, gate);
  if (err != cudaSuccess) {
    dlrt__host_gate_drop(gate);
    return cuda_fail(s->dev, "cudaLaunchHostFunc", err);
  }
  return DLRT_OK;
}

static void cuda_gate_open(void *gate) { dlrt__host_gate_open(gate); }
static void cuda_gate_open_at(void *gate, double when) { dlrt__host_gate_open_at(gate, when); }

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
    .stream_notify = cuda_stream_notify,
    .gate_create = cuda_gate_create,
    .stream_wait_gate = cuda_stream_wait_gate,
    .gate_open = cuda_gate_open,
    .gate_open_at = cuda_gate_open_at,
    .gemm = cuda_gemm,
    .launch = cuda_launch,
#ifdef DLRT_HAVE_NCCL
    .allreduce_sum_f32 = cuda_allreduce_sum_f32,
#endif
};
