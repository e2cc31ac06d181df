/*
 * dlrt/core.h — versions, status codes, devices, streams and events, device and
 * pinned memory, copies and compute ops (the device-abstraction layer).
 * Included by dlrt.h, which programs include (lib/dlrt.h tells the
 * conventions).
 */
#ifndef DLRT_CORE_H
#define DLRT_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if defined(DLRT_BUILDING) && defined(__GNUC__)
#define DLRT_API __attribute__((visibility("default")))
#else
#define DLRT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Versions                                                                  */
/* ------------------------------------------------------------------------ */

#define DLRT_VERSION_MAJOR 0
#define DLRT_VERSION_MINOR 1
#define DLRT_VERSION_PATCH 0

/* Version of the backend interface (lib/device/backend.h); the registry
 * refuses a backend built against another one. */
#define DLRT_BACKEND_API_VERSION 1

DLRT_API const char *dlrt_version_string(void);

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

/* X(name, value, message): the one table all codes come from. */
#define DLRT_STATUS_MAP(X)                                                     \
  X(OK, 0, "success")                                                          \
  X(ERR_INVALID_ARG, -1, "invalid argument")                                   \
  X(ERR_OOM, -2, "out of memory")                                              \
  X(ERR_NO_DEVICE, -3, "no such device")                                       \
  X(ERR_BAD_SPEC, -4, "malformed device spec")                                 \
  X(ERR_BACKEND, -5, "backend call failed")                                    \
  X(ERR_UNSUPPORTED, -6, "operation not supported by this device")             \
  X(ERR_OUT_OF_RANGE, -7, "offset or size outside the buffer")                 \
  X(ERR_WRONG_DEVICE, -8, "object belongs to another device")                  \
  X(ERR_NOT_FOUND, -9, "not found")                                            \
  X(ERR_API_VERSION, -10, "backend built for another API version")             \
  X(ERR_IO, -11, "input/output error")                                         \
  X(ERR_STATE, -12, "object in the wrong state for this call")                 \
  X(ERR_SYSTEM, -13, "operating-system call failed")                          \
  X(ERR_DIVERGED, -14, "training diverged: the loss is not finite")         \
  X(ERR_DEVICE_LOST, -15, "device lost: its context cannot be used again")

typedef enum {
#define DLRT__STATUS_ENUM(name, value, msg) DLRT_##name = (value),
  DLRT_STATUS_MAP(DLRT__STATUS_ENUM)
#undef DLRT__STATUS_ENUM
} dlrt_status;

/* "out of memory" for DLRT_ERR_OOM; "unknown status" for a value not in the table. */
DLRT_API const char *dlrt_strerror(int status);
/* "DLRT_ERR_OOM" for DLRT_ERR_OOM; "DLRT_UNKNOWN" otherwise. */
DLRT_API const char *dlrt_err_name(int status);
/* Detail of the last failure on the calling thread ("" if none). Valid until the
 * next failing dlrt call on this thread. */
DLRT_API const char *dlrt_last_error(void);
DLRT_API void dlrt_clear_error(void);

/* ------------------------------------------------------------------------ */
/* Library lifetime                                                          */
/* ------------------------------------------------------------------------ */

/* Initialises every compiled backend. Called implicitly by the first call that
 * needs it; safe to call more than once. A backend whose driver or platform is
 * missing contributes zero devices and is not an error.
 * DLRT_BACKEND=cpu,opencl restricts which backends start (names in any case,
 * blanks around them ignored); a name that is not a backend of this build
 * (a typo, "cuda" in a build without CUDA, an empty item) fails with
 * DLRT_ERR_INVALID_ARG naming it and the backends there are, and so does
 * every call that starts the library implicitly. A DLRT_MEM_LIMIT that is
 * not a size fails the same way. */
DLRT_API int dlrt_init(void);
/* Releases every device, cache and backend. Caller-owned objects must be freed
 * first. dlrt_init() may be called again afterwards. */
DLRT_API void dlrt_shutdown(void);

/* ------------------------------------------------------------------------ */
/* Backends and devices                                                      */
/* ------------------------------------------------------------------------ */

typedef struct dlrt_device dlrt_device_t;
typedef struct dlrt_stream dlrt_stream_t;
typedef struct dlrt_event dlrt_event_t;
typedef struct dlrt_buffer dlrt_buffer_t;

typedef enum {
  DLRT_DEVICE_CPU = 0,
  DLRT_DEVICE_INTEGRATED = 1, /* shares memory with the host */
  DLRT_DEVICE_DISCRETE = 2,   /* own memory behind a bus */
} dlrt_device_kind;

DLRT_API const char *dlrt_device_kind_name(dlrt_device_kind kind);

/* Backends compiled into this build, started or not ("cpu", "opencl", "cuda"). */
DLRT_API int dlrt_backend_count(void);
DLRT_API const char *dlrt_backend_name(int index);
/* 1 if the backend started (its driver/platform was found), 0 if not, <0 error. */
DLRT_API int dlrt_backend_available(const char *name);
/* Devices of one backend (0 when it did not start), or <0. */
DLRT_API int dlrt_backend_device_count(const char *name);

typedef struct {
  char name[128];        /* "NVIDIA H200", "pthread-haswell-AMD EPYC ..." */
  char vendor[64];       /* "NVIDIA", "AMD", "Intel", ... */
  char backend[16];      /* "cpu", "opencl", "cuda" */
  char driver[128];      /* driver/runtime version string, "" if unknown */
  char spec[32];         /* the spec that opens it: "opencl:0" */
  int index;             /* index within its backend */
  dlrt_device_kind kind;
  uint64_t total_memory; /* bytes */
  uint64_t free_memory;  /* bytes, as the driver reports it now; where the driver
                            cannot tell (OpenCL), total minus what this process
                            has reserved */
  size_t alignment;      /* preferred buffer alignment, bytes */
  int host_addressable;  /* 1: buffers are host pointers (CPU, some iGPUs) */
  int compute_units;
  int threads;           /* CPU backend: the threads its kernels run on now (0 elsewhere) */
} dlrt_device_props;

/* Number of devices across all started backends. */
DLRT_API int dlrt_device_count(void);
/* Device by global index [0, dlrt_device_count()). */
DLRT_API int dlrt_device_get(int index, dlrt_device_t **out);
/* Device by spec: "cpu", "cpu:0", "opencl:1", "cuda:0", "auto" (the best device:
 * discrete GPU over integrated over CPU, CUDA over OpenCL at equal kind), or
 * NULL/"" meaning $DLRT_DEVICE, or "auto" when that is unset. The backend's
 * name is case-insensitive ("CPU:0"). A backend left out by DLRT_BACKEND
 * fails with DLRT_ERR_NO_DEVICE saying so.
 * DLRT_ERR_BAD_SPEC for a malformed spec, DLRT_ERR_NO_DEVICE for a well-formed
 * spec that names no device here (the message lists the devices there are). */
DLRT_API int dlrt_device_open(const char *spec, dlrt_device_t **out);
/* Properties; free_memory is read fresh on each call. */
DLRT_API int dlrt_device_props_get(dlrt_device_t *dev, dlrt_device_props *props);
/* "cuda:0" etc.; never NULL for a valid device. */
DLRT_API const char *dlrt_device_spec(const dlrt_device_t *dev);
/* Waits for all work on all streams of the device. */
DLRT_API int dlrt_device_synchronize(dlrt_device_t *dev);

/* ------------------------------------------------------------------------ */
/* Streams and events                                                        */
/* ------------------------------------------------------------------------ */

/* An in-order queue of work on one device. Work on different streams may
 * overlap; order it with events. */
DLRT_API int dlrt_stream_create(dlrt_device_t *dev, dlrt_stream_t **out);
/* Waits for the stream's work, then releases it. NULL is a no-op. */
DLRT_API void dlrt_stream_destroy(dlrt_stream_t *stream);
/* The device's default stream (owned by the device; never destroy it). */
DLRT_API dlrt_stream_t *dlrt_device_default_stream(dlrt_device_t *dev);
DLRT_API dlrt_device_t *dlrt_stream_device(const dlrt_stream_t *stream);
/* Blocks until all work queued so far has finished. Returns the first error an
 * asynchronous command on this stream hit since the last synchronize. */
DLRT_API int dlrt_stream_synchronize(dlrt_stream_t *stream);

DLRT_API int dlrt_event_create(dlrt_device_t *dev, dlrt_event_t **out);
DLRT_API void dlrt_event_destroy(dlrt_event_t *event);
/* Marks the point in the stream after all work queued so far. */
DLRT_API int dlrt_event_record(dlrt_event_t *event, dlrt_stream_t *stream);
/* Work queued on the stream after this call starts after the event completes.
 * The event may belong to another device or backend (the host then waits). */
DLRT_API int dlrt_stream_wait_event(dlrt_stream_t *stream, dlrt_event_t *event);
/* Blocks until the event completes. DLRT_ERR_STATE if it was never recorded. */
DLRT_API int dlrt_event_synchronize(dlrt_event_t *event);
/* 1 if complete, 0 if still pending, <0 on error. */
DLRT_API int dlrt_event_query(dlrt_event_t *event);
/* Milliseconds between two completed events recorded on the same device. */
DLRT_API int dlrt_event_elapsed_ms(dlrt_event_t *start, dlrt_event_t *end,
                                   float *ms);

/* ------------------------------------------------------------------------ */
/* Device memory (through the per-device caching allocator)                   */
/* ------------------------------------------------------------------------ */

/* Allocates `bytes` (> 0) of device memory for use on `stream` (NULL: the
 * device's default stream). The memory may be recycled from the cache; its
 * contents are undefined. DLRT_ERR_OOM when the device or its budget
 * (DLRT_MEM_LIMIT / dlrt_mem_set_limit) cannot hold it even after the cache
 * was emptied. */
DLRT_API int dlrt_buffer_alloc(dlrt_device_t *dev, size_t bytes,
                               dlrt_stream_t *stream, dlrt_buffer_t **out);
/* Returns the buffer to the cache. Work already queued on its stream (and on
 * streams named by dlrt_buffer_record_stream) may still use it: the allocator
 * orders any reuse on another stream after that work with an event. NULL ok. */
DLRT_API void dlrt_buffer_free(dlrt_buffer_t *buf);
/* Declares that `stream` (not the allocation stream) uses the buffer, so that
 * freeing it waits for that stream's work too. */
DLRT_API int dlrt_buffer_record_stream(dlrt_buffer_t *buf, dlrt_stream_t *stream);
DLRT_API size_t dlrt_buffer_size(const dlrt_buffer_t *buf);
DLRT_API dlrt_device_t *dlrt_buffer_device(const dlrt_buffer_t *buf);
/* Host pointer to the buffer's first byte on host-addressable devices, else
 * NULL. Access through it is not ordered with streams: synchronize the streams
 * that use the buffer before reading or writing it from the host. */
DLRT_API void *dlrt_buffer_host_ptr(const dlrt_buffer_t *buf);

/* One more handle on the same memory: each dlrt_buffer_free drops one, and
 * the last returns the memory (what a DLPack export holds while another
 * framework uses the buffer). */
DLRT_API int dlrt_buffer_retain(dlrt_buffer_t *buf);
/* A buffer of the cpu device over `bytes` (> 0) of caller-owned host memory
 * at `ptr`, never freed by dlrt: dlrt_buffer_free releases the handle only,
 * and the memory must outlive it. How a NumPy array or a PyTorch CPU tensor
 * is used in place (dlrt_dlpack_export's converse). The allocator's
 * statistics and budget do not count it. DLRT_ERR_UNSUPPORTED on devices of
 * other backends: their memory is not the host's (wrap it on cpu, then
 * dlrt_copy_d2d). */
DLRT_API int dlrt_buffer_wrap_host(dlrt_device_t *dev, void *ptr, size_t bytes,
                                   dlrt_buffer_t **out);

/* Device budget for the caching allocator, in bytes (0 = the device's memory).
 * DLRT_MEM_LIMIT=256M (K, M, G, T suffixes; or a percentage "50%") sets it for
 * every device at start. Lowering it below what is reserved releases cache. */
DLRT_API int dlrt_mem_set_limit(dlrt_device_t *dev, uint64_t bytes);
DLRT_API uint64_t dlrt_mem_get_limit(dlrt_device_t *dev);
/* Returns cached, unused device memory to the driver. */
DLRT_API int dlrt_mem_empty_cache(dlrt_device_t *dev);
/* Parses "256M", "1.5G", "4096" into bytes; "50%" into 50% of `total`.
 * DLRT_ERR_INVALID_ARG for anything else. */
DLRT_API int dlrt_parse_size(const char *text, uint64_t total, uint64_t *out);

typedef struct {
  uint64_t current, peak;
} dlrt_mem_counter;

/* Allocator statistics, shaped like PyTorch's memory_stats(). */
typedef struct {
  dlrt_mem_counter allocated; /* bytes in live buffers (rounded to blocks) */
  dlrt_mem_counter requested; /* bytes callers asked for */
  dlrt_mem_counter reserved;  /* bytes held from the driver (segments) */
  dlrt_mem_counter active;    /* allocated + freed blocks still in use by a stream */
  dlrt_mem_counter segments;  /* driver allocations held */
  uint64_t alloc_count, free_count;
  uint64_t cache_hits;     /* allocations served without a driver call */
  uint64_t driver_allocs, driver_frees;
  uint64_t retries;        /* driver allocation retried after emptying the cache */
  uint64_t oom_count;      /* allocations that failed with DLRT_ERR_OOM */
  uint64_t cached_free;    /* bytes cached and free */
  uint64_t largest_free;   /* largest free cached block */
  double fragmentation;    /* 1 - largest_free / cached_free (0 with no cache) */
  uint64_t limit;          /* budget in bytes */
} dlrt_mem_stats;

DLRT_API int dlrt_mem_stats_get(dlrt_device_t *dev, dlrt_mem_stats *out);
DLRT_API int dlrt_mem_reset_peak(dlrt_device_t *dev);
/* Statistics of the device's pinned host pool. */
DLRT_API int dlrt_host_stats_get(dlrt_device_t *dev, dlrt_mem_stats *out);
/* Writes readable tables of the device's allocator and pinned-pool statistics
 * into `buf` (always NUL-terminated): for each, the bytes and segments,
 * current and peak; then the counts since the start (allocations, frees,
 * cache hits, driver calls, retries, OOMs) and the cache now, one value each;
 * and the device's spilling figures when it spilled. Returns the length the
 * full text needs, as snprintf does, or <0. */
DLRT_API int dlrt_mem_summary(dlrt_device_t *dev, char *buf, size_t size);

/* ------------------------------------------------------------------------ */
/* Processes: what every running dlrt program holds on each device           */
/* ------------------------------------------------------------------------ */

/* Each process keeps a small file of what its device allocators hold, in
 * $XDG_RUNTIME_DIR/dlrt/PID (else /tmp/dlrt-UID/PID; the folder 0700, used
 * only while it is a real folder of the user's own), rewritten whole at most
 * every 200 ms while the counters change and every 2 s regardless, and
 * removed by dlrt_shutdown(). DLRT_PROCESS_REGISTRY=0 turns it off. A device
 * is listed once its allocator has held memory; nothing about the registry
 * ever fails an allocation (an unusable folder is reported once on stderr). */
typedef struct {
  int pid;
  char process[64];   /* its name (/proc/PID/comm): "dltrain" */
  char backend[16];   /* "cpu", "opencl", "cuda" */
  char spec[32];      /* the device's spec in that process: "opencl:0" */
  char device[128];   /* the device's name, as dlrt_device_props.name */
  uint64_t reserved;  /* bytes its allocator holds from the driver now */
  uint64_t allocated; /* bytes in its live buffers now */
  uint64_t peak;      /* most bytes in live buffers at once, over the process's life */
  double updated;     /* when the process wrote these, Unix time in seconds */
} dlrt_process_usage;

/* Every running process's use of every device, ordered by pid, then spec:
 * *out is an array of *count entries (NULL and 0 when there are none), freed
 * with dlrt_process_list_free.
 * The files of processes that have gone (exited, killed, or a pid now taken
 * by a later process) are removed, not listed. DLRT_ERR_SYSTEM when the
 * folder cannot be trusted (a symbolic link, another user's, open to others),
 * with a message naming it and the fix; a folder that is absent is no
 * error (no process has written one). Needs no dlrt_init(). */
DLRT_API int dlrt_process_list(dlrt_process_usage **out, int *count);
DLRT_API void dlrt_process_list_free(dlrt_process_usage *list);
/* The registry's folder for this environment, NUL-terminated in buf.
 * DLRT_ERR_INVALID_ARG when it does not fit. */
DLRT_API int dlrt_process_registry_dir(char *buf, size_t size);

/* ------------------------------------------------------------------------ */
/* Pinned host memory                                                        */
/* ------------------------------------------------------------------------ */

/* Page-locked host memory that `dev` copies to and from asynchronously at full
 * speed (cudaHostAlloc, mapped CL_MEM_ALLOC_HOST_PTR, aligned memory on the CPU),
 * served from a per-device pool that is reused (cached) across allocations.
 * Pinned memory cannot be paged out, so the pool is bounded: by
 * DLRT_PINNED_LIMIT (a size as DLRT_MEM_LIMIT's; a percentage is of RAM),
 * by default half of RAM; DLRT_ERR_OOM past it (dlrt_host_stats_get's
 * `limit`). dlrt's own staging (spilling's host copies, the disk tier's
 * buffer) then goes on in pageable memory instead, with a note on stderr
 * once, never an OOM kill. Free it only when no queued copy uses it. */
DLRT_API int dlrt_host_alloc(dlrt_device_t *dev, size_t bytes, void **out);
/* DLRT_ERR_NOT_FOUND for a pointer dlrt_host_alloc did not return. NULL ok. */
DLRT_API int dlrt_host_free(void *ptr);
/* The staging dlrt placed in pageable memory because the pinned pool was at
 * its limit: bytes now, at most, and allocations so far. */
typedef struct {
  uint64_t current, peak, count;
} dlrt_pageable_stats;
DLRT_API int dlrt_pageable_stats_get(dlrt_device_t *dev, dlrt_pageable_stats *out);

/* ------------------------------------------------------------------------ */
/* Copies and memset                                                         */
/* ------------------------------------------------------------------------ */

/* With a stream the copy is queued and returns at once (host memory must stay
 * valid until the stream passes it; pinned memory makes it truly asynchronous).
 * With stream == NULL the copy is ordered on the device's default stream and
 * returns when finished. bytes == 0 is a valid no-op. */
DLRT_API int dlrt_copy_h2d(dlrt_buffer_t *dst, size_t dst_offset, const void *src,
                           size_t bytes, dlrt_stream_t *stream);
DLRT_API int dlrt_copy_d2h(void *dst, dlrt_buffer_t *src, size_t src_offset,
                           size_t bytes, dlrt_stream_t *stream);
/* Rows between strided host memory and packed device memory: `rows` rows of
 * `width` bytes, `pitch` bytes apart on the host (pitch >= width) and one
 * after another in the buffer from its offset (a slice of images of a
 * C x N x H x W tensor in one copy). As the copies above otherwise. */
DLRT_API int dlrt_copy_h2d_rows(dlrt_buffer_t *dst, size_t dst_offset, const void *src,
                                size_t pitch, size_t width, size_t rows, dlrt_stream_t *stream);
DLRT_API int dlrt_copy_d2h_rows(void *dst, size_t pitch, dlrt_buffer_t *src, size_t src_offset,
                                size_t width, size_t rows, dlrt_stream_t *stream);
/* Device to device, same or different devices, same or different backends.
 * `stream` (NULL: the destination's default stream) must belong to the source's
 * or the destination's device. Between two devices the host waits for the
 * copy before returning, and the copy waits for work queued on both devices'
 * streams: peer to peer within a backend (CUDA peer access where the
 * hardware has it), through pinned bounce buffers between backends. */
DLRT_API int dlrt_copy_d2d(dlrt_buffer_t *dst, size_t dst_offset,
                           dlrt_buffer_t *src, size_t src_offset, size_t bytes,
                           dlrt_stream_t *stream);
/* Sets `bytes` bytes to `value` (0..255). */
DLRT_API int dlrt_memset(dlrt_buffer_t *dst, size_t offset, int value,
                         size_t bytes, dlrt_stream_t *stream);

/* ------------------------------------------------------------------------ */
/* The host link model                                                       */
/* ------------------------------------------------------------------------ */

/* A device may carry a model of the link between host memory and its own:
 * then every copy between the two (dlrt_copy_h2d, _d2h, their _rows forms,
 * and each side of a dlrt_copy_d2d between two devices) takes the time the
 * model gives, bytes / rate + latency, on a copy engine of its own, one per
 * direction per device, as a GPU's DMA engines do: a copy starts when its
 * stream reaches it and its direction's engine is free, so copies in one
 * direction queue behind each other, the two directions overlap, and compute
 * on other streams goes on. Work queued on the copy's stream after it (and
 * events recorded there) waits until the copy's modelled end. The data and
 * the results are the same bit for bit; only time changes. A copy never ends
 * before the backend's own copy does. Copies within one device's memory
 * (dlrt_copy_d2d on one device) and dlrt_memset are not on the link.
 * Pinned and pageable host memory are modelled alike.
 *
 * A spec is "none" (no model), an absolute rate per direction with an
 * optional latency per copy ("12GB/s", "12GB/s:10us"; B/s with a decimal
 * K, M, G or T prefix, or a binary Ki, Mi, Gi, Ti; latency in ns, us, ms or
 * s), or a preset named after a GPU and its host link ("h200-pcie5",
 * optionally with ":LATENCY" replacing the preset's). A preset keeps that
 * GPU's ratio of compute to link bandwidth: the link's rate is this
 * device's GEMM rate (measured once per device and process, about a second
 * at most) divided by the preset's FLOP per byte, so a CPU or PoCL device
 * trains with the balance of the named machine. DLRT_LINK=SPEC sets it for
 * every device when it opens (a bad spec fails dlrt_init, as a bad
 * DLRT_MEM_LIMIT does). */

/* A named target machine: published figures, and what the model uses. */
typedef struct {
  const char *name;        /* "h200-pcie5" */
  const char *about;       /* "NVIDIA H200 SXM on PCIe 5.0 x16" */
  double peak_flops;       /* published dense bf16 tensor rate, FLOP/s */
  double flops;            /* what the ratio uses: 80% of the peak, what large
                              GEMMs reach */
  double link_peak_bytes_per_s; /* published link rate per direction, B/s */
  double bytes_per_s;      /* achievable per direction: what the ratio uses */
  double latency_s;        /* per copy */
  double flop_per_byte;    /* flops / bytes_per_s */
} dlrt_link_preset;

/* The presets, by index [0, dlrt_link_preset_count()); NULL past the end. */
DLRT_API int dlrt_link_preset_count(void);
DLRT_API const dlrt_link_preset *dlrt_link_preset_get(int index);

typedef struct {
  int none;                        /* "none": no model */
  const dlrt_link_preset *preset;  /* a preset, or NULL for an absolute rate */
  double bytes_per_s;              /* absolute: the rate; preset: 0 (per device) */
  double latency_s;                /* per copy (a preset's unless given) */
} dlrt_link_spec;

/* Reads a spec without a device. DLRT_ERR_INVALID_ARG naming the fault: an
 * unknown preset (the message lists them), a missing or unknown unit, a
 * rate that is not above zero, a negative latency. */
DLRT_API int dlrt_link_parse(const char *text, dlrt_link_spec *out);

/* Puts the model of `spec` on the device (NULL, "" or "none": takes it off).
 * Waits for the device's queued work first. For a preset, measures the
 * device's GEMM rate the first time. DLRT_ERR_UNSUPPORTED for a backend
 * that cannot hold its streams until a modelled time. */
DLRT_API int dlrt_link_set(dlrt_device_t *dev, const char *spec);

/* The device's model and what went over it since it was set (opening the
 * device first, as any use of it does, so that DLRT_LINK's is there). Index 0
 * of the arrays is host to device, 1 device to host. */
typedef struct {
  int active;              /* 0: no model (the rest is zero) */
  char spec[64];           /* as given */
  const dlrt_link_preset *preset; /* or NULL */
  double bytes_per_s;      /* the modelled rate per direction */
  double latency_s;
  double device_flops;     /* presets: the device's measured GEMM rate, FLOP/s (0 else) */
  char flops_how[64];      /* how it was measured: "fp32 GEMM 1024^3, best of 3" */
  uint64_t copies[2];      /* copies on each engine */
  uint64_t bytes[2];
  double busy_s[2];        /* the sum of their modelled durations */
  double queued_s[2];      /* the time they waited behind earlier copies */
} dlrt_link_info;

DLRT_API int dlrt_link_get(dlrt_device_t *dev, dlrt_link_info *out);
/* Seconds the device's model gives a copy of `bytes` (0 without a model). */
DLRT_API double dlrt_link_seconds(dlrt_device_t *dev, uint64_t bytes);
/* One line: "12 GB/s + 10 us per copy" or "h200-pcie5: 6.9 MB/s + 10 us
 * (14391 FLOP/B of 99.2 GFLOP/s measured)", or "none". The length it needs,
 * or <0. */
DLRT_API int dlrt_link_describe(dlrt_device_t *dev, char *buf, size_t size);

/* ------------------------------------------------------------------------ */
/* Compute                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum {
  DLRT_F32 = 0,
  DLRT_F16 = 1,
  DLRT_BF16 = 2,
  DLRT_I32 = 3,
  DLRT_U8 = 4,
} dlrt_dtype;

DLRT_API size_t dlrt_dtype_size(dlrt_dtype dtype);
DLRT_API const char *dlrt_dtype_name(dlrt_dtype dtype);

/* C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] for b in [0, batch), all
 * row-major. op(A) is m x k, op(B) is k x n, C is m x n. Leading dimensions and
 * batch strides are in elements; offsets (in dlrt_gemm) in bytes. A stride of 0
 * broadcasts one matrix over the batch (A and B only). */
typedef struct {
  dlrt_dtype dtype; /* of A, B and C; accumulation is fp32 */
  int trans_a, trans_b;
  int64_t m, n, k;
  float alpha, beta;
  int64_t lda, ldb, ldc;
  int64_t stride_a, stride_b, stride_c;
  int64_t batch; /* >= 1 */
  /* 1: C is fp32 while A and B are `dtype` (F16 or BF16): the fp32 sums are
   * stored as they are, and beta adds fp32 C, so a sum over several GEMMs
   * (beta 1) is rounded to fp32 only, never to 16 bits. 0: C is `dtype`. */
  int c_f32;
} dlrt_gemm_desc;

/* Fills a descriptor for a plain (batch 1) GEMM with tight leading dimensions. */
DLRT_API dlrt_gemm_desc dlrt_gemm_desc_make(dlrt_dtype dtype, int trans_a,
                                            int trans_b, int64_t m, int64_t n,
                                            int64_t k, float alpha, float beta);
DLRT_API int dlrt_gemm(dlrt_stream_t *stream, const dlrt_gemm_desc *desc,
                       dlrt_buffer_t *a, size_t a_offset, dlrt_buffer_t *b,
                       size_t b_offset, dlrt_buffer_t *c, size_t c_offset);

/* Kernels of kernels/ (written once, compiled for every backend). Storage
 * types F32, F16 and BF16; arithmetic is fp32 without fused multiply-add
 * contraction, stores round to nearest even, so elementwise results agree
 * bit for bit between backends.
 * Offsets are in bytes and must be multiples of the element size. */

/* Elementwise over `n` elements of `dtype`. */
typedef enum {
  DLRT_EW_FILL,  /* y = alpha */
  DLRT_EW_SCALE, /* y = alpha * x */
  DLRT_EW_AXPY,  /* y = alpha * x + y */
  DLRT_EW_ADD,   /* y = x + z */
  DLRT_EW_MUL,   /* y = x * z */
  DLRT_EW_RELU,  /* y = max(x, 0); NaN stays NaN */
  DLRT_EW_COUNT_
} dlrt_ew_op;

DLRT_API const char *dlrt_ew_op_name(dlrt_ew_op op);
/* Operands an op does not read may be NULL. Operands may alias exactly (in place). */
DLRT_API int dlrt_elementwise(dlrt_stream_t *stream, dlrt_ew_op op, dlrt_dtype dtype,
                              int64_t n, float alpha, dlrt_buffer_t *y, size_t y_offset,
                              dlrt_buffer_t *x, size_t x_offset, dlrt_buffer_t *z,
                              size_t z_offset);

/* y (y_dtype) = x (x_dtype) for n elements, any of F32, F16, BF16; the same
 * type copies. Narrowing rounds to nearest even; overflow gives inf. */
DLRT_API int dlrt_cast(dlrt_stream_t *stream, int64_t n, dlrt_buffer_t *y, size_t y_offset,
                       dlrt_dtype y_dtype, dlrt_buffer_t *x, size_t x_offset,
                       dlrt_dtype x_dtype);

typedef enum {
  DLRT_REDUCE_SUM,
  DLRT_REDUCE_MAX, /* NaN if any element is NaN */
  DLRT_REDUCE_COUNT_
} dlrt_reduce_op;

DLRT_API const char *dlrt_reduce_op_name(dlrt_reduce_op op);
/* y[r] = op over c of x[r * cols + c]: x is rows x cols row-major, y holds
 * rows elements, both of `dtype`; accumulation in fp32. A whole-array
 * reduction is rows = 1. The order of operations depends only on rows and
 * cols, so a device gives bitwise identical results from run to run; the
 * sum of zero columns is 0, the max -inf. y must not overlap x. */
DLRT_API int dlrt_reduce(dlrt_stream_t *stream, dlrt_reduce_op op, dlrt_dtype dtype,
                         int64_t rows, int64_t cols, dlrt_buffer_t *y, size_t y_offset,
                         dlrt_buffer_t *x, size_t x_offset);

/* y[b] = x[b]^T for b in [0, batch): x is batch x rows x cols, y is batch x
 * cols x rows, both row-major and contiguous, of `dtype` (F32, F16, BF16, I32).
 * y must not overlap x. */
DLRT_API int dlrt_transpose(dlrt_stream_t *stream, dlrt_dtype dtype, int64_t batch,
                            int64_t rows, int64_t cols, dlrt_buffer_t *y, size_t y_offset,
                            dlrt_buffer_t *x, size_t x_offset);

/* ------------------------------------------------------------------------ */
/* DLPack: buffers shared with other frameworks (github.com/dmlc/dlpack)      */
/* ------------------------------------------------------------------------ */

/* DLPack's device of `dev`: type 1 (kDLCPU, id 0), 2 (kDLCUDA, id its index)
 * or 4 (kDLOpenCL). */
DLRT_API int dlrt_dlpack_device(dlrt_device_t *dev, int32_t *type, int32_t *id);
/* A DLPack tensor of `ndim` dimensions `shape` of `dtype`, compact and
 * row-major (strides given), over the buffer from byte `offset`: with
 * `versioned` a DLManagedTensorVersioned of version 1.0 carrying `flags`
 * (DLPack's: 1 read-only, 2 copied), else a legacy DLManagedTensor (flags
 * 0), as dlpack.h defines them, in *out. It holds a reference to the buffer
 * (dlrt_buffer_retain) until its deleter runs, from any thread. data is the
 * host pointer on cpu, the device address on cuda; on OpenCL the cl_mem,
 * with the offset in byte_offset. Synchronize the buffer's streams before
 * handing it over. */
DLRT_API int dlrt_dlpack_export(dlrt_buffer_t *buf, size_t offset, dlrt_dtype dtype, int ndim,
                                const int64_t *shape, int versioned, uint64_t flags,
                                void **out);
/* For Python bindings. The capsule names, "dltensor" (versioned 0) and
 * "dltensor_versioned" (1), static strings that outlive any capsule. */
DLRT_API const char *dlrt_dlpack_capsule_name(int versioned);
/* A PyCapsule destructor for capsules of those names holding a DLPack
 * tensor: a capsule a consumer did not rename (to "used_dltensor...") was
 * never consumed, and its tensor's deleter runs, as the DLPack Python
 * specification asks of a producer. Written in C so that it runs no Python
 * code: a consumer that refuses a tensor drops the capsule while its own
 * exception is pending, which a Python destructor would replace. It calls
 * only the two functions given once by dlrt_dlpack_capsule_calls
 * (PyCapsule_IsValid and PyCapsule_GetPointer); before that it does
 * nothing. */
DLRT_API void dlrt_dlpack_capsule_destructor(void *capsule);
DLRT_API int dlrt_dlpack_capsule_calls(int (*is_valid)(void *capsule, const char *name),
                                       void *(*get_pointer)(void *capsule, const char *name));

#ifdef __cplusplus
}
#endif

#endif /* DLRT_CORE_H */
