/*
 * backend.h — the interface every backend implements (internal).
 *
 * One table of function pointers per backend, ggml-style: objects are opaque
 * `void *` contexts owned by the backend. A backend sees memory handles,
 * offsets, shapes and strides; never tensors, graphs or policy. Members marked
 * optional may be NULL; lib/device checks before calling and reports
 * DLRT_ERR_UNSUPPORTED.
 *
 * Every function returns DLRT_OK or a negative dlrt_status, and sets the
 * detail message (dlrt__set_error) when it fails.
 */
#ifndef DLRT_DEVICE_BACKEND_H
#define DLRT_DEVICE_BACKEND_H

#include "dlrt.h"
#include "kernel_table.h"

/* A raw device allocation. `handle` is what the backend addresses memory by
 * (a host pointer on the CPU, a device pointer on CUDA, a cl_mem on OpenCL);
 * `host` is a host pointer to the same bytes where the device has one, else NULL. */
typedef struct {
  void *handle;
  void *host;
} dlrt_mem;

/* One argument of a kernel launch, in the order of the kernel's signature
 * (dlrt__arg_kind and DLRT__MAX_ARGS are the kernel table's). */
typedef struct {
  dlrt__arg_kind kind;
  dlrt_mem mem;      /* buffer: its memory ... */
  size_t offset;     /* ... the byte offset of element 0 ... */
  size_t elem_size;  /* ... and the size of one element, bytes */
  float f;
  int64_t i;
} dlrt__arg;

/* A launch of one kernel of kernels/kernel_table.h, whose entry lib/device
 * checks its arguments against before the backend sees it. Item kernels cover
 * `items` indices; group kernels (items == 0) run `groups` work-groups of
 * DLRT_WG work-items. Backends may launch fewer threads or groups: the
 * kernels stride over the whole range. */
typedef struct {
  int kernel; /* dlrt__kernel_id */
  int64_t items;
  int64_t groups;
  /* Elements of work per item, for kernels whose items are rows (0: 1). The
   * CPU backend sizes its slices by it; GPUs ignore it. */
  int64_t item_cost;
  int n_args;
  dlrt__arg args[DLRT__MAX_ARGS];
} dlrt__launch;

#define DLRT__FREE_MEMORY_UNKNOWN UINT64_MAX

typedef struct dlrt_backend_iface {
  int api_version; /* DLRT_BACKEND_API_VERSION */
  const char *name; /* "cpu", "opencl", "cuda" */
  /* 1: a dlrt_mem handle is an address in device memory that device-aware
   * libraries take (CUDA-aware MPI); 0 where it is host memory or an object
   * (cl_mem). */
  int device_addresses;

  /* Starts the backend. A missing driver or platform is not an error: return
   * DLRT_OK with *n_devices = 0 (and *ctx may be NULL). */
  int (*init)(void **ctx, int *n_devices);
  void (*shutdown)(void *ctx);
  /* Fills everything but `spec`; free_memory read now, or
   * DLRT__FREE_MEMORY_UNKNOWN when the driver cannot tell (lib/device then
   * reports total minus what this process reserved). */
  int (*device_props)(void *ctx, int index, dlrt_device_props *props);
  int (*device_open)(void *ctx, int index, void **dev);
  void (*device_close)(void *dev);

  /* Raw memory: no caching here (lib/mem caches above it). */
  int (*mem_alloc)(void *dev, size_t bytes, dlrt_mem *out);
  void (*mem_free)(void *dev, dlrt_mem mem);
  /* Pinned host memory this device copies from at full speed. `*handle` is any
   * backend bookkeeping needed to free it. */
  int (*host_alloc)(void *dev, size_t bytes, void **ptr, void **handle);
  void (*host_free)(void *dev, void *ptr, void *handle);

  /* In-order streams. */
  int (*stream_create)(void *dev, void **stream);
  void (*stream_destroy)(void *stream); /* waits for queued work first */
  int (*stream_synchronize)(void *stream);

  /* Events recorded on streams of the same device. */
  int (*event_create)(void *dev, void **event);
  void (*event_destroy)(void *event);
  int (*event_record)(void *event, void *stream);
  int (*stream_wait_event)(void *stream, void *event);
  int (*event_synchronize)(void *event);
  int (*event_query)(void *event); /* 1 done, 0 pending, <0 error */
  int (*event_elapsed_ms)(void *start, void *end, float *ms);

  /* Asynchronous copies on a stream (the generic layer synchronizes for the
   * blocking forms). */
  int (*copy_h2d)(void *stream, dlrt_mem dst, size_t dst_off, const void *src,
                  size_t bytes);
  int (*copy_d2h)(void *stream, void *dst, dlrt_mem src, size_t src_off,
                  size_t bytes);
  /* optional: `rows` rows of `width` bytes, packed on the device from the
   * offset, `pitch` bytes apart on the host (else one copy per row). */
  int (*copy_h2d_rows)(void *stream, dlrt_mem dst, size_t dst_off, const void *src,
                       size_t pitch, size_t width, size_t rows);
  int (*copy_d2h_rows)(void *stream, void *dst, size_t pitch, dlrt_mem src, size_t src_off,
                       size_t width, size_t rows);
  /* Both buffers on this stream's device. */
  int (*copy_d2d)(void *stream, dlrt_mem dst, size_t dst_off, dlrt_mem src,
                  size_t src_off, size_t bytes);
  /* optional: between two devices of this backend (peer access). */
  int (*copy_peer)(void *stream, void *dst_dev, dlrt_mem dst, size_t dst_off,
                   void *src_dev, dlrt_mem src, size_t src_off, size_t bytes);
  int (*memset)(void *stream, dlrt_mem dst, size_t off, int value, size_t bytes);

  /* optional (all four or none): holds for the link model (lib/device/link.c),
   * which times copies on the host and keeps a stream from going past one
   * before its modelled end.
   * stream_notify: fn(arg) runs on some host thread once the stream's earlier
   * work is done; fn returns at once and calls no backend function.
   * gate_create: a gate, shut. stream_wait_gate: the stream's later work waits
   * until the gate opens. lib/device calls both stream_wait_gate and gate_open
   * exactly once per gate, in either order, gate_open from any thread; the
   * backend frees the gate once it is open and its wait has passed (a wait
   * that fails to queue counts as passed). */
  int (*stream_notify)(void *stream, void (*fn)(void *arg), void *arg);
  int (*gate_create)(void *dev, void **gate);
  int (*stream_wait_gate)(void *stream, void *gate);
  void (*gate_open)(void *gate);
  /* optional, in place of gate_open: opens the gate at `when` (seconds on
   * CLOCK_MONOTONIC, lib/util/clock.h), the waiter waiting for the time
   * itself; lib/device then calls it from the notice's fn, so it takes no
   * driver call and does not block. Without it a timer thread of lib/device
   * calls gate_open at the time. */
  void (*gate_open_at)(void *gate, double when);

  /* Compute (optional). Arguments are validated by lib/device beforehand. */
  int (*gemm)(void *stream, const dlrt_gemm_desc *desc, dlrt_mem a, size_t a_off,
              dlrt_mem b, size_t b_off, dlrt_mem c, size_t c_off);
  /* optional: runs a kernel of kernels/ (arguments validated beforehand). */
  int (*launch)(void *stream, const dlrt__launch *launch);
  /* optional: sums `count` floats at mems[i] + offsets[i] over n devices of
   * this backend, in place on each, every one queued on its streams[i]
   * (NCCL on CUDA). DLRT_ERR_UNSUPPORTED when the library is missing. */
  int (*allreduce_sum_f32)(void *const *streams, const dlrt_mem *mems, const size_t *offsets,
                           int64_t count, int n);
  /* optional (the cpu backend): runs a kernel at once, on the calling
   * thread and the backend's pool, over host memory (each buffer argument's
   * mem.host), as a launch on one of its streams would: the host-side
   * optimizer of offloaded state (dlrt__host_launch). */
  int (*host_launch)(const dlrt__launch *launch);
} dlrt_backend_iface;

/* The compiled-in backends (each defined in backends/<name>/). */
extern const dlrt_backend_iface dlrt__backend_cpu;
#ifdef DLRT_HAVE_OPENCL
extern const dlrt_backend_iface dlrt__backend_opencl;
#endif
#ifdef DLRT_HAVE_CUDA
extern const dlrt_backend_iface dlrt__backend_cuda;
#endif

#endif /* DLRT_DEVICE_BACKEND_H */
