/* opencl.c — the OpenCL backend: every platform and device the ICD loader
 * finds becomes a dlrt device. Buffers are cl_mem objects addressed with byte
 * offsets, streams are in-order profiling queues, events are markers, pinned
 * host memory is a mapped CL_MEM_ALLOC_HOST_PTR buffer; GEMM is in
 * opencl_gemm.c (a tiled kernel of dlrt's own, and CLBlast).
 * Needs OpenCL 1.2 (markers, barriers with wait lists, fill). */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "opencl_internal.h"
#ifdef DLRT_HAVE_CLBLAST
#include <clblast_c.h>
#endif

#include "util/status.h"

/* ---------------------------------------------------------------- errors */

const char *ocl_error_name(cl_int err) {
  switch (err) {
#define E(x) case x: return #x;
    E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE) E(CL_COMPILER_NOT_AVAILABLE)
    E(CL_MEM_OBJECT_ALLOCATION_FAILURE) E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY)
    E(CL_PROFILING_INFO_NOT_AVAILABLE) E(CL_MEM_COPY_OVERLAP) E(CL_BUILD_PROGRAM_FAILURE)
    E(CL_MAP_FAILURE) E(CL_MISALIGNED_SUB_BUFFER_OFFSET) E(CL_INVALID_VALUE)
    E(CL_INVALID_DEVICE_TYPE) E(CL_INVALID_PLATFORM) E(CL_INVALID_DEVICE) E(CL_INVALID_CONTEXT)
    E(CL_INVALID_QUEUE_PROPERTIES) E(CL_INVALID_COMMAND_QUEUE) E(CL_INVALID_HOST_PTR)
    E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_BUFFER_SIZE) E(CL_INVALID_EVENT_WAIT_LIST)
    E(CL_INVALID_EVENT) E(CL_INVALID_OPERATION) E(CL_INVALID_WORK_GROUP_SIZE)
    E(CL_INVALID_KERNEL_ARGS) E(CL_INVALID_BINARY) E(CL_INVALID_BUILD_OPTIONS)
    E(CL_INVALID_KERNEL_NAME) E(CL_INVALID_PROGRAM_EXECUTABLE)
#ifdef CL_PLATFORM_NOT_FOUND_KHR /* cl_ext.h, which only CLBlast's header brings in */
    E(CL_PLATFORM_NOT_FOUND_KHR)
#endif
#undef E
  }
  return "unknown OpenCL error";
}

int ocl_fail(const ocl_device *dev, const char *call, cl_int err) {
  int status = err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
                       err == CL_OUT_OF_HOST_MEMORY
                   ? DLRT_ERR_OOM
                   : DLRT_ERR_BACKEND;
  return dlrt__set_error(status, "%s: %s failed: %s (%d)", dev ? dev->name : "opencl", call,
                         ocl_error_name(err), (int)err);
}

/* ---------------------------------------------------------------- enumeration */

static int ocl_init(void **ctx, int *n_devices) {
  cl_uint n_platforms = 0;
  *ctx = NULL;
  *n_devices = 0;
  /* No ICD, no platform: the backend is simply absent. */
  if (clGetPlatformIDs(0, NULL, &n_platforms) != CL_SUCCESS || n_platforms == 0) return DLRT_OK;
  cl_platform_id *platforms = calloc(n_platforms, sizeof *platforms);
  ocl_backend *b = calloc(1, sizeof *b);
  if (!platforms || !b) goto oom;
  if (clGetPlatformIDs(n_platforms, platforms, NULL) != CL_SUCCESS) n_platforms = 0;
  for (cl_uint p = 0; p < n_platforms; p++) {
    cl_uint n = 0;
    if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, NULL, &n) != CL_SUCCESS || !n)
      continue;
    cl_device_id *ids = calloc(n, sizeof *ids);
    ocl_entry *grown = realloc(b->entries, (b->n + n) * sizeof *grown);
    if (!ids || !grown) {
      free(ids);
      if (grown) b->entries = grown;
      goto oom;
    }
    b->entries = grown;
    if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, n, ids, NULL) == CL_SUCCESS)
      for (cl_uint d = 0; d < n; d++) b->entries[b->n++] = (ocl_entry){platforms[p], ids[d]};
    free(ids);
  }
  free(platforms);
  *ctx = b;
  *n_devices = b->n;
  return DLRT_OK;
oom:
  free(platforms);
  if (b) free(b->entries);
  free(b);
  return dlrt__set_error(DLRT_ERR_OOM, "out of host memory enumerating OpenCL devices");
}

static void ocl_shutdown(void *ctx) {
  ocl_backend *b = ctx;
  if (!b) return;
  free(b->entries);
  free(b);
}

static void info_string(cl_device_id d, cl_device_info what, char *out, size_t n) {
  out[0] = '\0';
  if (clGetDeviceInfo(d, what, n, out, NULL) != CL_SUCCESS) out[0] = '\0';
  out[n - 1] = '\0';
}

static const char *short_vendor(const char *vendor) {
  static const struct { const char *match, *name; } known[] = {
      {"NVIDIA", "NVIDIA"}, {"Advanced Micro Devices", "AMD"}, {"AMD", "AMD"},
      {"Intel", "Intel"},   {"Apple", "Apple"},                {"ARM", "ARM"},
      {"Qualcomm", "Qualcomm"}};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strstr(vendor, known[i].match)) return known[i].name;
  return vendor;
}

static int ocl_device_props(void *ctx, int index, dlrt_device_props *p) {
  ocl_backend *b = ctx;
  cl_device_id d = b->entries[index].device;
  char vendor[128], platform[64], driver[64];
  info_string(d, CL_DEVICE_NAME, p->name, sizeof p->name);
  info_string(d, CL_DEVICE_VENDOR, vendor, sizeof vendor);
  snprintf(p->vendor, sizeof p->vendor, "%s", short_vendor(vendor));
  info_string(d, CL_DRIVER_VERSION, driver, sizeof driver);
  if (clGetPlatformInfo(b->entries[index].platform, CL_PLATFORM_NAME, sizeof platform,
                        platform, NULL) != CL_SUCCESS)
    platform[0] = '\0';
  platform[sizeof platform - 1] = '\0';
  snprintf(p->driver, sizeof p->driver, "%.60s %.60s", platform, driver);
  cl_device_type type = 0;
  cl_bool unified = CL_FALSE;
  cl_ulong mem = 0;
  cl_uint align_bits = 0, units = 0;
  clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  clGetDeviceInfo(d, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
  clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
  clGetDeviceInfo(d, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, NULL);
  clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
  p->kind = (type & CL_DEVICE_TYPE_CPU)  ? DLRT_DEVICE_CPU
            : unified                    ? DLRT_DEVICE_INTEGRATED
                                         : DLRT_DEVICE_DISCRETE;
  p->total_memory = mem;
  /* OpenCL has no portable free-memory query: lib/device estimates it from
   * what this process has reserved. */
  p->free_memory = DLRT__FREE_MEMORY_UNKNOWN;
  p->alignment = align_bits >= 512 ? align_bits / 8 : 64;
  p->host_addressable = 0;
  p->compute_units = (int)units;
  return DLRT_OK;
}

/* ---------------------------------------------------------------- devices */

static int ocl_device_open(void *ctx, int index, void **out) {
  ocl_backend *b = ctx;
  ocl_device *dev = calloc(1, sizeof *dev);
  cl_int err;
  if (!dev) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  snprintf(dev->name, sizeof dev->name, "opencl:%d", index);
  dev->device = b->entries[index].device;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                   (cl_context_properties)b->entries[index].platform, 0};
  dev->context = clCreateContext(props, 1, &dev->device, NULL, NULL, &err);
  if (!dev->context) {
    int rc = ocl_fail(dev, "clCreateContext", err);
    free(dev);
    return rc;
  }
  dev->io_queue = clCreateCommandQueue(dev->context, dev->device, 0, &err);
  if (!dev->io_queue) {
    int rc = ocl_fail(dev, "clCreateCommandQueue", err);
    clReleaseContext(dev->context);
    free(dev);
    return rc;
  }
  cl_ulong max_alloc = 0;
  clGetDeviceInfo(dev->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
  dev->max_alloc = max_alloc;
  {
    dlrt_device_props p;
    ocl_device_props(ctx, index, &p);
    snprintf(dev->driver, sizeof dev->driver, "%.60s|%.20s|%.40s", p.name, p.vendor, p.driver);
  }
  clGetDeviceInfo(dev->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof dev->compute_units,
                  &dev->compute_units, NULL);
  cl_device_type type = 0;
  clGetDeviceInfo(dev->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  dev->is_cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
  pthread_mutex_init(&dev->lock, NULL);
  *out = dev;
  return DLRT_OK;
}

static void ocl_device_close(void *p) {
  ocl_device *dev = p;
  ocl_kernels_release(dev);
  ocl_gemm_release(dev);
  clFinish(dev->io_queue);
  clReleaseCommandQueue(dev->io_queue);
  clReleaseContext(dev->context);
  pthread_mutex_destroy(&dev->lock);
  free(dev);
}

/* ---------------------------------------------------------------- memory */

static int ocl_mem_alloc(void *p, size_t bytes, dlrt_mem *out) {
  ocl_device *dev = p;
  cl_int err;
  if (dev->max_alloc && bytes > dev->max_alloc)
    return dlrt__set_error(DLRT_ERR_OOM, "%s: %zu bytes exceed the device's largest single "
                           "allocation (%llu bytes, CL_DEVICE_MAX_MEM_ALLOC_SIZE)", dev->name,
                           bytes, (unsigned long long)dev->max_alloc);
  cl_mem m = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (!m) return ocl_fail(dev, "clCreateBuffer", err);
  pthread_mutex_lock(&dev->lock);
  dev->allocated += bytes;
  pthread_mutex_unlock(&dev->lock);
  out->handle = m;
  out->host = NULL;
  return DLRT_OK;
}

static void ocl_mem_free(void *p, dlrt_mem mem) {
  ocl_device *dev = p;
  size_t bytes = 0;
  clGetMemObjectInfo(mem.handle, CL_MEM_SIZE, sizeof bytes, &bytes, NULL);
  clReleaseMemObject(mem.handle);
  pthread_mutex_lock(&dev->lock);
  dev->allocated -= bytes;
  pthread_mutex_unlock(&dev->lock);
}

/* Pinned host memory: a host-allocated buffer, mapped once for its lifetime.
 * Drivers transfer from it by DMA without staging. */
static int ocl_host_alloc(void *p, size_t bytes, void **ptr, void **handle) {
  ocl_device *dev = p;
  cl_int err;
  cl_mem m = clCreateBuffer(dev->context, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes,
                            NULL, &err);
  if (!m) return ocl_fail(dev, "clCreateBuffer(CL_MEM_ALLOC_HOST_PTR)", err);
  void *host = clEnqueueMapBuffer(dev->io_queue, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                  bytes, 0, NULL, NULL, &err);
  if (!host) {
    clReleaseMemObject(m);
    return ocl_fail(dev, "clEnqueueMapBuffer", err);
  }
  *ptr = host;
  *handle = m;
  return DLRT_OK;
}

static void ocl_host_free(void *p, void *ptr, void *handle) {
  ocl_device *dev = p;
  clEnqueueUnmapMemObject(dev->io_queue, handle, ptr, 0, NULL, NULL);
  clFinish(dev->io_queue);
  clReleaseMemObject(handle);
}

/* ---------------------------------------------------------------- streams */

static int ocl_stream_create(void *p, void **out) {
  ocl_device *dev = p;
  cl_int err;
  ocl_stream *s = calloc(1, sizeof *s);
  if (!s) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  s->dev = dev;
  s->queue = clCreateCommandQueue(dev->context, dev->device, CL_QUEUE_PROFILING_ENABLE, &err);
  if (!s->queue) {
    free(s);
    return ocl_fail(dev, "clCreateCommandQueue", err);
  }
  *out = s;
  return DLRT_OK;
}

static void ocl_stream_destroy(void *p) {
  ocl_stream *s = p;
  clFinish(s->queue);
  if (s->gemm_scratch) clReleaseMemObject(s->gemm_scratch);
  clReleaseCommandQueue(s->queue);
  free(s);
}

static int ocl_stream_synchronize(void *p) {
  ocl_stream *s = p;
  cl_int err = clFinish(s->queue);
  return err == CL_SUCCESS ? DLRT_OK : ocl_fail(s->dev, "clFinish", err);
}

static int ocl_event_create(void *p, void **out) {
  ocl_event *e = calloc(1, sizeof *e);
  if (!e) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  e->dev = p;
  *out = e;
  return DLRT_OK;
}

static void ocl_event_destroy(void *p) {
  ocl_event *e = p;
  if (e->event) clReleaseEvent(e->event);
  free(e);
}

static int ocl_event_record(void *pe, void *ps) {
  ocl_event *e = pe;
  ocl_stream *s = ps;
  cl_event ev;
  cl_int err = clEnqueueMarkerWithWaitList(s->queue, 0, NULL, &ev);
  if (err != CL_SUCCESS) return ocl_fail(s->dev, "clEnqueueMarkerWithWaitList", err);
  /* Submit now, so that a host or another queue waiting on it makes progress. */
  clFlush(s->queue);
  if (e->event) clReleaseEvent(e->event);
  e->event = ev;
  return DLRT_OK;
}

static int ocl_stream_wait_event(void *ps, void *pe) {
  ocl_stream *s = ps;
  ocl_event *e = pe;
  if (!e->event) return DLRT_OK;
  cl_int err = clEnqueueBarrierWithWaitList(s->queue, 1, &e->event, NULL);
  return err == CL_SUCCESS ? DLRT_OK : ocl_fail(s->dev, "clEnqueueBarrierWithWaitList", err);
}

static int ocl_event_synchronize(void *pe) {
  ocl_event *e = pe;
  if (!e->event) return DLRT_OK;
  cl_int err = clWaitForEvents(1, &e->event);
  return err == CL_SUCCESS ? DLRT_OK : ocl_fail(e->dev, "clWaitForEvents", err);
}

static int ocl_event_query(void *pe) {
  ocl_event *e = pe;
  cl_int status;
  if (!e->event) return 1;
  cl_int err = clGetEventInfo(e->event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status,
                              &status, NULL);
  if (err != CL_SUCCESS) return ocl_fail(e->dev, "clGetEventInfo", err);
  if (status < 0) return ocl_fail(e->dev, "a command before the event", status);
  return status == CL_COMPLETE;
}

static int ocl_event_elapsed_ms(void *pa, void *pb, float *ms) {
  ocl_event *a = pa, *b = pb;
  cl_ulong t0, t1;
  if (ocl_event_query(a) != 1 || ocl_event_query(b) != 1)
    return dlrt__set_error(DLRT_ERR_STATE, "%s: elapsed time of events that have not "
                           "completed: synchronize the later event first", a->dev->name);
  cl_int err = clGetEventProfilingInfo(a->event, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL);
  if (err == CL_SUCCESS)
    err = clGetEventProfilingInfo(b->event, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
  if (err != CL_SUCCESS) return ocl_fail(a->dev, "clGetEventProfilingInfo", err);
  *ms = (float)((double)((int64_t)(t1 - t0)) / 1e6);
  return DLRT_OK;
}

/* ---------------------------------------------------------------- copies */

static int ocl_copy_h2d(void *ps, dlrt_mem dst, size_t off, const void *src, size_t bytes) {
  ocl_stream *s = ps;
  cl_int err = clEnqueueWriteBuffer(s->queue, dst.handle, CL_FALSE, off, bytes, src, 0, NULL, NULL);
  if (err == CL_SUCCESS) clFlush(s->queue);
  return err == CL_SUCCESS ? DLRT_OK : ocl_fail(s->dev, "clEnqueueWriteBuffer", err);
}

static int ocl_copy_d2h(void *ps, void *dst, dlrt_mem src, size_t off, size_t bytes) {
  ocl_stream *s = ps;
  cl_int err = clEnqueueReadBuffer(s->queue, src.handle, CL_FALSE, off, bytes, dst, 0, NULL, NULL);
  if (err == CL_SUCCESS) clFlush(s->queue);
  return err == CL_SUCCESS ? DLRT_OK : ocl_fail(s->dev, "clEnqueueReadBuffer", err);
}

/* Rows: the rectangle copies of OpenCL 1.1, packed on the device side. */
static int ocl_copy_h2d_rows(void *ps, dlrt_mem dst, size_t off, const void *src, size_t pitch,
                             size_t width, size_t rows) {
  ocl_stream *s = ps;
  size_t buffer_origin[3] = {off, 0, 0}, host_origin[3] = {0, 0, 0}, region[3] = {width, rows, 1};
  cl_int err = clEnqueueWriteBufferRect(s->queue, dst.handle, CL_FALSE, buffer_origin,
                                        host_origin, region, width, 0, pitch, 0, src, 0, NULL,
                                        NULL);
  if (err == CL_SUCCESS) clFlush(s->queue);
  return err == CL_SUCCESS ? DLRT_OK : ocl_fail(s->dev, "clEnqueueWriteBufferRect", err);
}

static int ocl_copy_d2h_rows(void *ps, void *dst, size_t pitch, dlrt_mem src, size_t off,
                             size_t width, size_t rows) {
  ocl_stream *s = ps;
  size_t buffer_origin[3] = {off, 0, 0}, host_origin[3] = {0, 0, 0}, region[3] = {width, rows, 1};
  cl_int err = clEnqueueReadBufferRect(s->queue, src.handle, CL_FALSE, buffer_origin,
                                       host_origin, region, width, 0, pitch, 0, dst, 0, NULL,
                                       NULL);
  if (err == CL_SUCCESS) clFlush(s->queue);
  return err == CL_SUCCESS ? DLRT_OK : ocl_fail(s->dev, "clEnqueueReadBufferRect", err);
}

static int ocl_copy_d2d(void *ps, dlrt_mem dst, size_t doff, dlrt_mem src, size_t soff,
                        size_t bytes) {
  ocl_stream *s = ps;
  cl_int err;
  if (dst.handle == src.handle && (doff < soff + bytes && soff < doff + bytes)) {
    /* clEnqueueCopyBuffer refuses overlapping ranges of one buffer: go
     * through a temporary buffer instead. */
    cl_mem tmp = clCreateBuffer(s->dev->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (!tmp) return ocl_fail(s->dev, "clCreateBuffer", err);
    err = clEnqueueCopyBuffer(s->queue, src.handle, tmp, soff, 0, bytes, 0, NULL, NULL);
    if (err == CL_SUCCESS)
      err = clEnqueueCopyBuffer(s->queue, tmp, dst.handle, 0, doff, bytes, 0, NULL, NULL);
    clReleaseMemObject(tmp); /* freed by the driver once the copies finish */
  } else {
    err = clEnqueueCopyBuffer(s->queue, src.handle, dst.handle, soff, doff, bytes, 0, NULL, NULL);
  }
  if (err == CL_SUCCESS) clFlush(s->queue);
  return err == CL_SUCCESS ? DLRT_OK : ocl_fail(s->dev, "clEnqueueCopyBuffer", err);
}

static int ocl_memset(void *ps, dlrt_mem dst, size_t off, int value, size_t bytes) {
  ocl_stream *s = ps;
  cl_uchar pattern = (cl_uchar)value;
  cl_int err = clEnqueueFillBuffer(s->queue, dst.handle, &pattern, 1, off, bytes, 0, NULL, NULL);
  if (err == CL_SUCCESS) clFlush(s->queue);
  return err == CL_SUCCESS ? DLRT_OK : ocl_fail(s->dev, "clEnqueueFillBuffer", err);
}

/* ---------------------------------------------------------------- link gates */

/* The link model's notice and gate (backend.h): a marker whose completion
 * calls back (on the OpenCL runtime's thread), and a user event that a
 * barrier holds the queue at. */
typedef struct {
  void (*fn)(void *arg);
  void *arg;
} ocl_notice;

static void CL_CALLBACK notice_reached(cl_event ev, cl_int status, void *p) {
  /* status < 0: a command before it failed, which the stream reports; the
   * notice is given all the same, so that its gate opens. */
  (void)status;
  ocl_notice *n = p;
  n->fn(n->arg);
  free(n);
  clReleaseEvent(ev);
}

static int ocl_stream_notify(void *ps, void (*fn)(void *arg), void *arg) {
  ocl_stream *s = ps;
  ocl_notice *n = malloc(sizeof *n);
  if (!n) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  *n = (ocl_notice){fn, arg};
  cl_event ev;
  cl_int err = clEnqueueMarkerWithWaitList(s->queue, 0, NULL, &ev);
  if (err != CL_SUCCESS) {
    free(n);
    return ocl_fail(s->dev, "clEnqueueMarkerWithWaitList", err);
  }
  if ((err = clSetEventCallback(ev, CL_COMPLETE, notice_reached, n)) != CL_SUCCESS) {
    clReleaseEvent(ev);
    free(n);
    return ocl_fail(s->dev, "clSetEventCallback", err);
  }
  clFlush(s->queue); /* submitted, so that it is reached without a flush of ours */
  return DLRT_OK;
}

static int ocl_gate_create(void *p, void **out) {
  ocl_device *dev = p;
  cl_int err;
  cl_event ev = clCreateUserEvent(dev->context, &err);
  if (!ev) return ocl_fail(dev, "clCreateUserEvent", err);
  clRetainEvent(ev); /* the wait's reference beside the opener's */
  *out = ev;
  return DLRT_OK;
}

static int ocl_stream_wait_gate(void *ps, void *gate) {
  ocl_stream *s = ps;
  cl_event ev = gate;
  cl_int err = clEnqueueBarrierWithWaitList(s->queue, 1, &ev, NULL);
  if (err == CL_SUCCESS) clFlush(s->queue);
  clReleaseEvent(ev); /* the queued barrier holds its own */
  return err == CL_SUCCESS ? DLRT_OK : ocl_fail(s->dev, "clEnqueueBarrierWithWaitList", err);
}

static void ocl_gate_open(void *gate) {
  clSetUserEventStatus(gate, CL_COMPLETE);
  clReleaseEvent(gate);
}

const dlrt_backend_iface dlrt__backend_opencl = {
    .api_version = DLRT_BACKEND_API_VERSION,
    .name = "opencl",
    .init = ocl_init,
    .shutdown = ocl_shutdown,
    .device_props = ocl_device_props,
    .device_open = ocl_device_open,
    .device_close = ocl_device_close,
    .mem_alloc = ocl_mem_alloc,
    .mem_free = ocl_mem_free,
    .host_alloc = ocl_host_alloc,
    .host_free = ocl_host_free,
    .stream_create = ocl_stream_create,
    .stream_destroy = ocl_stream_destroy,
    .stream_synchronize = ocl_stream_synchronize,
    .event_create = ocl_event_create,
    .event_destroy = ocl_event_destroy,
    .event_record = ocl_event_record,
    .stream_wait_event = ocl_stream_wait_event,
    .event_synchronize = ocl_event_synchronize,
    .event_query = ocl_event_query,
    .event_elapsed_ms = ocl_event_elapsed_ms,
    .copy_h2d = ocl_copy_h2d,
    .copy_d2h = ocl_copy_d2h,
    .copy_h2d_rows = ocl_copy_h2d_rows,
    .copy_d2h_rows = ocl_copy_d2h_rows,
    .copy_d2d = ocl_copy_d2d,
    .copy_peer = NULL,
    .memset = ocl_memset,
    .stream_notify = ocl_stream_notify,
    .gate_create = ocl_gate_create,
    .stream_wait_gate = ocl_stream_wait_gate,
    .gate_open = ocl_gate_open,
    .gemm = ocl_gemm,
    .launch = ocl_launch,
};
