/*
 * dlrt.h — the public API of dlrt, a runtime for training neural networks on
 * heterogeneous machines (CUDA, OpenCL, CPU).
 *
 * Conventions
 *  - Every call that can fail returns int: DLRT_OK (0) or a negative dlrt_status.
 *    dlrt_strerror() names the code; dlrt_last_error() gives a thread-local detail
 *    message for the last failure on this thread (what went wrong and how to fix it).
 *  - No call aborts or exits the process.
 *  - Devices are owned by the library and live until dlrt_shutdown(); buffers,
 *    streams and events are owned by the caller and released with their _free /
 *    _destroy calls.
 *  - Sizes and offsets are in bytes unless a name says otherwise. Matrices are
 *    row-major.
 *  - Thread safety: every call may be made from any thread. One stream should be
 *    fed by one thread at a time (as with CUDA streams).
 */
#ifndef DLRT_H
#define DLRT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DLRT_BUILDING) && defined(__GNUC__)
#define DLRT_API __attribute__((visibility("default")))
#else
#define DLRT_API
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
  X(ERR_SYSTEM, -13, "operating-system call failed")

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
 * DLRT_BACKEND=cpu,opencl restricts which backends start. */
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
} dlrt_device_props;

/* Number of devices across all started backends. */
DLRT_API int dlrt_device_count(void);
/* Device by global index [0, dlrt_device_count()). */
DLRT_API int dlrt_device_get(int index, dlrt_device_t **out);
/* Device by spec: "cpu", "cpu:0", "opencl:1", "cuda:0", "auto" (the best device:
 * discrete GPU over integrated over CPU, CUDA over OpenCL at equal kind), or
 * NULL/"" meaning $DLRT_DEVICE, or "auto" when that is unset.
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
/* Writes a readable table of the device's allocator and pinned-pool statistics
 * into `buf` (always NUL-terminated). Returns the length the full table needs,
 * as snprintf does, or <0. */
DLRT_API int dlrt_mem_summary(dlrt_device_t *dev, char *buf, size_t size);

/* ------------------------------------------------------------------------ */
/* Pinned host memory                                                        */
/* ------------------------------------------------------------------------ */

/* Page-locked host memory that `dev` copies to and from asynchronously at full
 * speed (cudaHostAlloc, mapped CL_MEM_ALLOC_HOST_PTR, aligned memory on the CPU),
 * served from a per-device pool. Free it only when no queued copy uses it. */
DLRT_API int dlrt_host_alloc(dlrt_device_t *dev, size_t bytes, void **out);
/* DLRT_ERR_NOT_FOUND for a pointer dlrt_host_alloc did not return. NULL ok. */
DLRT_API int dlrt_host_free(void *ptr);

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
/* Device to device, same or different devices, same or different backends.
 * `stream` (NULL: the destination's default stream) must belong to the source's
 * or the destination's device. Between backends the data goes through pinned
 * bounce buffers; the host then waits for the copy before returning. */
DLRT_API int dlrt_copy_d2d(dlrt_buffer_t *dst, size_t dst_offset,
                           dlrt_buffer_t *src, size_t src_offset, size_t bytes,
                           dlrt_stream_t *stream);
/* Sets `bytes` bytes to `value` (0..255). */
DLRT_API int dlrt_memset(dlrt_buffer_t *dst, size_t offset, int value,
                         size_t bytes, dlrt_stream_t *stream);

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
/* Data sets: MNIST-family IDX files and dlrt record files                  */
/* ------------------------------------------------------------------------ */

/* Labelled images in host memory (or mapped from a record file). */
typedef struct {
  int64_t count;        /* samples */
  int64_t channels, height, width;
  int classes;          /* 1 + the largest label (10 for the MNIST family) */
  dlrt_dtype image_dtype; /* DLRT_U8 (pixels 0..255) or DLRT_F32 (used as they are) */
  /* count x channels x height x width samples of image_dtype, row-major
   * (bytes; cast to const float * for DLRT_F32). */
  uint8_t *images;
  int32_t *labels;      /* count, each in [0, classes) */
  char source[512];     /* the folder or files it came from, or "generated" */
  void *mapping;        /* private: the mapped record file, or NULL */
  size_t mapping_bytes;
} dlrt_dataset;

/* Folder Debian's dataset-fashion-mnist package installs. */
#define DLRT_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* How dlrt_dataset_load and dlrt_dataset_open_records read record files. */
#define DLRT_DATASET_MMAP 1 /* map the images instead of reading them: the page
                               cache streams them from disk, so a set larger
                               than RAM trains */

/* Loads the training (test = 0) or test (test = 1) split of a data set:
 * `where` is "fashion-mnist" (DLRT_FASHION_MNIST_DIR), a record file, or a
 * folder holding train.dlrec / test.dlrec (record files, preferred) or
 * train-images-idx3-ubyte and train-labels-idx1-ubyte (t10k-... for the test
 * split), each optionally gzip-compressed (.gz). A record file given as
 * `where` is the training split (its test split is DLRT_ERR_NOT_FOUND).
 * DLRT_ERR_NOT_FOUND when the files are absent, DLRT_ERR_IO for unreadable,
 * truncated or corrupt files (wrong magic, wrong dimensions, image count !=
 * label count); the message names the file and what is wrong. `flags`:
 * DLRT_DATASET_MMAP or 0 (IDX files are always read into memory). */
DLRT_API int dlrt_dataset_load(const char *where, int test, dlrt_dataset *out);
DLRT_API int dlrt_dataset_load_flags(const char *where, int test, int flags,
                                     dlrt_dataset *out);
/* Loads one images file and one labels file (IDX, plain or gzip). */
DLRT_API int dlrt_dataset_load_idx(const char *images_path, const char *labels_path,
                                   dlrt_dataset *out);
/* A generated stand-in of `count` 28 x 28 images in `classes` classes, each
 * class a distinct learnable pattern plus noise, reproducible from `seed`;
 * source is "generated". */
DLRT_API int dlrt_dataset_generate(int64_t count, int classes, uint64_t seed,
                                   dlrt_dataset *out);
/* Releases the arrays (or the mapping); the struct may be reused. NULL is a
 * no-op. */
DLRT_API void dlrt_dataset_free(dlrt_dataset *d);

/* Record files (".dlrec"): a fixed 64-byte header, then the images, then the
 * labels, all little-endian, so a user can write one from their own data
 * with a few lines of any language:
 *   offset size  field
 *   0      8     magic "DLRTREC1"
 *   8      4     u32 header bytes (64)
 *   12     4     u32 image dtype: 1 = u8 (0..255), 2 = f32
 *   16     8     u64 count (samples)
 *   24     4     u32 channels
 *   28     4     u32 height
 *   32     4     u32 width
 *   36     4     u32 label dtype: 1 = u8, 2 = i32
 *   40     4     u32 classes (every label is below it)
 *   44     20    zero
 *   64     count x channels x height x width images of the image dtype
 *   ...    count labels of the label dtype
 * and nothing after. Writing is atomic (a temporary file, flushed, renamed). */
DLRT_API int dlrt_dataset_save_records(const char *path, const dlrt_dataset *d);
DLRT_API int dlrt_dataset_open_records(const char *path, int flags, dlrt_dataset *out);

/* ------------------------------------------------------------------------ */
/* Data pipeline: disk -> RAM -> workers -> pinned staging -> device         */
/* ------------------------------------------------------------------------ */

/* Augmentation, on the CPU, per sample; each sample's randomness comes from
 * (seed, epoch, sample index) alone, so the batches are the same for any
 * number of workers. Applied in this order. */
typedef struct {
  int crop_padding;  /* random crop back to the original size after zero
                        padding each side by this many pixels; 0: off */
  int flip;          /* horizontal flip with probability 1/2 */
  float mean, std;   /* (x - mean) / std on pixels scaled to [0, 1] (u8) or
                        taken as they are (f32); std 0: leave as is */
  float erase_p;     /* random erasing (torchvision's RandomErasing: 2-33%
                        of the area, aspect 0.3-3.3, value 0) with this
                        probability; 0: off */
} dlrt_augment;

typedef struct {
  int64_t batch;     /* samples per batch */
  int workers;       /* threads that decode and augment; 0: the calling thread */
  int prefetch;      /* batches made ready ahead (pinned staging and device
                        buffers); 0: none, each batch is loaded and copied
                        when asked for */
  uint64_t seed;     /* shuffling and augmentation */
  int shuffle;       /* a new order every epoch from (seed, epoch) */
  int pad_last;      /* 0: drop the last partial batch; 1: keep it, filled
                        up from the start of the epoch's order */
  int rank, world;   /* this shard: rank r of world (0 and 1 for all) */
  int augment;       /* 0: none of aug's random parts (crop, flip, erasing):
                        for evaluation; its normalisation still applies */
  dlrt_augment aug;
  int host_only;     /* batches in pinned host memory only, no device copy
                        (images, labels and ready are NULL): for consumers
                        that take rows from the host (replicas, stages) */
  dlrt_dtype image_type; /* the images' type: DLRT_F32 (0, the default), or
                        DLRT_F16 / DLRT_BF16 for a mixed-precision consumer:
                        rounded to nearest even after augmentation, which
                        halves the staging, the device buffers and the copies
                        (not with host_only) */
} dlrt_loader_config;

typedef struct dlrt_loader dlrt_loader_t;

/* One batch, on the device, ready once `ready` has passed. */
typedef struct {
  dlrt_buffer_t *images;       /* batch x channels x height x width, in image_type */
  dlrt_buffer_t *labels;       /* batch, i32 */
  const float *host_images;    /* the same in pinned host memory (f32 loaders; NULL
                                  for 16-bit ones) */
  dlrt_dtype image_type;       /* the loader's (dlrt_loader_config) */
  const int32_t *host_labels;  /* (valid until the batch is released) */
  dlrt_event_t *ready;         /* recorded after the copy to the device */
  int64_t count;               /* real samples; later rows repeat earlier ones */
  int64_t index;               /* batch number within the epoch */
  int slot;                    /* private */
} dlrt_batch;

typedef struct {
  double stall_s;             /* time dlrt_loader_next waited for a batch */
  double work_s;              /* worker time spent decoding and augmenting */
  double first_s, last_s;     /* (monotonic) first batch asked for, last one handed out */
  int64_t batches, images;
  double images_per_s;        /* loader throughput: images / worker time per worker */
} dlrt_loader_stats;

/* A loader of `data` (which must outlive it) onto `dev`. Uses its own copy
 * stream; the staging ring holds max(prefetch, 1) batches. */
DLRT_API int dlrt_loader_create(dlrt_device_t *dev, const dlrt_dataset *data,
                                const dlrt_loader_config *config, dlrt_loader_t **out);
/* Stops the workers (waiting for nothing the device still reads). */
DLRT_API void dlrt_loader_destroy(dlrt_loader_t *l);
/* Batches per epoch for this shard. */
DLRT_API int64_t dlrt_loader_batches(const dlrt_loader_t *l);
/* Begins epoch `epoch` (its order and augmentation), abandoning what is left
 * of the previous one, and starts the workers on its first batches. */
DLRT_API int dlrt_loader_start(dlrt_loader_t *l, int epoch);
/* The next batch: 1 with *out filled, 0 at the end of the epoch, negative on
 * an error (a failing worker's message). Every batch must be released. */
DLRT_API int dlrt_loader_next(dlrt_loader_t *l, dlrt_batch *out);
/* Gives the batch back once the work queued on `consumer` that reads it is
 * done (an event on that stream; nothing blocks); NULL: at once. */
DLRT_API int dlrt_loader_release(dlrt_loader_t *l, dlrt_batch *b, dlrt_stream_t *consumer);
DLRT_API int dlrt_loader_stats_get(const dlrt_loader_t *l, dlrt_loader_stats *out);
DLRT_API int dlrt_loader_stats_reset(dlrt_loader_t *l);

/* ------------------------------------------------------------------------ */
/* Host tensors and safetensors files (checkpoints PyTorch can read)          */
/* ------------------------------------------------------------------------ */

#define DLRT_MAX_DIMS 8

typedef struct {
  char name[128];
  dlrt_dtype dtype;
  int ndim;
  int64_t shape[DLRT_MAX_DIMS];
  void *data;   /* host bytes: product(shape) elements of dtype */
  size_t bytes;
} dlrt_host_tensor;

/* Writes `n` tensors and string metadata (`metadata` holds key, value, key,
 * value, ..., NULL; may be NULL) to `path` in the safetensors format: the
 * file is written under a temporary name in the same folder, flushed to
 * disk, and renamed over `path`, so a crash leaves the old file or the new
 * one, never half of one. */
DLRT_API int dlrt_safetensors_save(const char *path, const dlrt_host_tensor *tensors, int n,
                                   const char *const *metadata);
/* Reads a safetensors file. *tensors is an array of *n tensors whose data
 * the library allocated; *metadata (may be NULL if not wanted) holds key,
 * value, ..., NULL. A truncated or corrupt file fails with DLRT_ERR_IO and a
 * message naming the file and the defect; nothing is returned then. */
DLRT_API int dlrt_safetensors_load(const char *path, dlrt_host_tensor **tensors, int *n,
                                   char ***metadata);
/* Frees what dlrt_safetensors_load returned. */
DLRT_API void dlrt_safetensors_free(dlrt_host_tensor *tensors, int n, char **metadata);

/* ------------------------------------------------------------------------ */
/* Static graphs with automatic differentiation                               */
/* ------------------------------------------------------------------------ */

/* A graph is built once and run every step (as in ggml): build the forward
 * pass from inputs and parameters, call dlrt_graph_backward() to append the
 * gradient nodes and dlrt_graph_optimize() to append fused parameter
 * updates, then create an executor on a device and run it.
 *
 * Builders return a tensor, or NULL after an error; an error sticks to the
 * graph (later builders given NULL return NULL) and dlrt_graph_status()
 * reports the first one with its message. Tensors are fp32 (I32 for class
 * labels), row-major and contiguous; images are N x C x H x W. Tensors belong
 * to their graph. */
typedef struct dlrt_graph dlrt_graph_t;
typedef struct dlrt_tensor dlrt_tensor_t;
typedef struct dlrt_exec dlrt_exec_t;

/* Initial values of a parameter, drawn from the executor's seed. */
typedef enum {
  DLRT_INIT_ZEROS,
  DLRT_INIT_ONES,
  /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's default for Linear and
   * Conv2d weights (kaiming_uniform with a = sqrt(5)) and biases. */
  DLRT_INIT_FAN_IN_UNIFORM,
  /* Kaiming (He) normal for ReLU: N(0, 2 / fan_in). */
  DLRT_INIT_KAIMING_NORMAL,
  /* Xavier (Glorot) uniform: U(-a, a), a = sqrt(6 / (fan_in + fan_out)). */
  DLRT_INIT_XAVIER_UNIFORM,
} dlrt_init_kind;

DLRT_API int dlrt_graph_create(dlrt_graph_t **out);
DLRT_API void dlrt_graph_destroy(dlrt_graph_t *g);
/* DLRT_OK, or the first error met while building (its message is restored
 * as this thread's dlrt_last_error()). */
DLRT_API int dlrt_graph_status(dlrt_graph_t *g);

/* A tensor the caller fills before each run (dlrt_exec_write): f32 or i32,
 * or f16 / bf16 when it is the graph's compute type (dlrt_graph_set_precision
 * called first; ops take it as already cast). */
DLRT_API dlrt_tensor_t *dlrt_input(dlrt_graph_t *g, const char *name, dlrt_dtype dtype,
                                   int ndim, const int64_t *shape);
/* A trained parameter (fp32). fan_in / fan_out feed the initialiser. */
DLRT_API dlrt_tensor_t *dlrt_param(dlrt_graph_t *g, const char *name, int ndim,
                                   const int64_t *shape, dlrt_init_kind init, int64_t fan_in,
                                   int64_t fan_out);
/* Keeps a tensor's value after a run so that dlrt_exec_read can return it
 * (other intermediates are freed after their last use). Returns t. */
DLRT_API dlrt_tensor_t *dlrt_keep(dlrt_graph_t *g, dlrt_tensor_t *t);

/* y = x W^T + b: x is N x in, W is out x in (PyTorch's layout), b is out or NULL. */
DLRT_API dlrt_tensor_t *dlrt_linear(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt_tensor_t *w,
                                    dlrt_tensor_t *b);
/* op(A) op(B) for 2-D A, B; batched for 3-D A, B (batch x rows x cols, one
 * batch size); and a 3-D A (not transposed) times a 2-D B, as one GEMM. */
DLRT_API dlrt_tensor_t *dlrt_matmul(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b,
                                    int trans_a, int trans_b);
DLRT_API dlrt_tensor_t *dlrt_relu(dlrt_graph_t *g, dlrt_tensor_t *x);
/* Elementwise a (op) b of one shape, or with b broadcast over a's leading
 * dimensions when b's shape is a's trailing one (a N x D plus b D). */
DLRT_API dlrt_tensor_t *dlrt_add(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b);
DLRT_API dlrt_tensor_t *dlrt_mul(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b);
DLRT_API dlrt_tensor_t *dlrt_scale(dlrt_graph_t *g, dlrt_tensor_t *x, float alpha);
DLRT_API dlrt_tensor_t *dlrt_sub(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b);
DLRT_API dlrt_tensor_t *dlrt_div(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b);
DLRT_API dlrt_tensor_t *dlrt_tanh(dlrt_graph_t *g, dlrt_tensor_t *x);
DLRT_API dlrt_tensor_t *dlrt_sigmoid(dlrt_graph_t *g, dlrt_tensor_t *x);
/* The exact GELU, x * Phi(x) (PyTorch's default, with erf). */
DLRT_API dlrt_tensor_t *dlrt_gelu(dlrt_graph_t *g, dlrt_tensor_t *x);
/* Softmax over the last axis. */
DLRT_API dlrt_tensor_t *dlrt_softmax(dlrt_graph_t *g, dlrt_tensor_t *x);
/* Mean squared error of two tensors of one shape: a tensor of shape [1]. */
DLRT_API dlrt_tensor_t *dlrt_mse(dlrt_graph_t *g, dlrt_tensor_t *a, dlrt_tensor_t *b);
/* Inverted dropout with drop probability p in [0, 1): in training runs each
 * element is zeroed with probability p and the rest scaled by 1 / (1 - p);
 * forward-only runs pass x through. The mask is drawn from the executor's
 * seed, the step and the node, so it is the same on every device. */
DLRT_API dlrt_tensor_t *dlrt_dropout(dlrt_graph_t *g, dlrt_tensor_t *x, float p);
/* The sum of all elements, a tensor of shape [1]. */
DLRT_API dlrt_tensor_t *dlrt_sum(dlrt_graph_t *g, dlrt_tensor_t *x);
/* 2-D convolution: x is N x C x H x W, w is O x C x kh x kw, b is O or NULL. */
DLRT_API dlrt_tensor_t *dlrt_conv2d(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt_tensor_t *w,
                                    dlrt_tensor_t *b, int stride, int padding, int dilation);
/* Layer normalisation over the last axis, with scale and shift parameters
 * gamma, beta of that axis's size (PyTorch's LayerNorm; eps 1e-5 there). */
DLRT_API dlrt_tensor_t *dlrt_layer_norm(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt_tensor_t *gamma,
                                        dlrt_tensor_t *beta, float eps);
/* Batch normalisation of N x C or N x C x H x W per channel, with parameters
 * gamma, beta of C elements: training runs use the batch's statistics and
 * update running ones (momentum 0.1 in PyTorch, unbiased variance);
 * forward-only runs use the running ones. The running statistics are named
 * GAMMA.running_mean and GAMMA.running_var and saved in checkpoints. */
DLRT_API dlrt_tensor_t *dlrt_batch_norm(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt_tensor_t *gamma,
                                        dlrt_tensor_t *beta, float momentum, float eps);
/* Max (or mean) over k x k windows moved by `stride`, no padding. */
DLRT_API dlrt_tensor_t *dlrt_max_pool2d(dlrt_graph_t *g, dlrt_tensor_t *x, int k, int stride);
DLRT_API dlrt_tensor_t *dlrt_avg_pool2d(dlrt_graph_t *g, dlrt_tensor_t *x, int k, int stride);
/* A view with another shape of the same number of elements. */
DLRT_API dlrt_tensor_t *dlrt_reshape(dlrt_graph_t *g, dlrt_tensor_t *x, int ndim,
                                     const int64_t *shape);
/* N x ... -> N x (product of the rest). */
DLRT_API dlrt_tensor_t *dlrt_flatten(dlrt_graph_t *g, dlrt_tensor_t *x);
/* x with axes axis0 and axis1 exchanged (torch.transpose): a view, the
 * same storage with their strides swapped. A matmul reads a transposed 2-D
 * view in place; other ops read a dense copy the executor makes once. */
DLRT_API dlrt_tensor_t *dlrt_transpose_axes(dlrt_graph_t *g, dlrt_tensor_t *x, int axis0,
                                            int axis1);
/* The transpose of a 2-D tensor: dlrt_transpose_axes(g, x, 0, 1). */
DLRT_API dlrt_tensor_t *dlrt_transpose2d(dlrt_graph_t *g, dlrt_tensor_t *x);
/* n (1 to 6) tensors joined along `axis`; other dimensions must agree. */
DLRT_API dlrt_tensor_t *dlrt_concat(dlrt_graph_t *g, int n, dlrt_tensor_t *const *xs,
                                    int axis);
/* Elements [start, start + length) of `axis`: a view at an offset with x's
 * strides, on any axis (nothing is copied; ops that need dense input read a
 * copy). */
DLRT_API dlrt_tensor_t *dlrt_slice(dlrt_graph_t *g, dlrt_tensor_t *x, int axis, int64_t start,
                                   int64_t length);
/* Sum or mean over one axis, which disappears from the shape. */
DLRT_API dlrt_tensor_t *dlrt_sum_axis(dlrt_graph_t *g, dlrt_tensor_t *x, int axis);
DLRT_API dlrt_tensor_t *dlrt_mean_axis(dlrt_graph_t *g, dlrt_tensor_t *x, int axis);
/* Rows of `table` (vocab x dim) picked by I32 ids: shape ids.shape + [dim];
 * an id outside [0, vocab) gives a row of zeros. */
DLRT_API dlrt_tensor_t *dlrt_embedding(dlrt_graph_t *g, dlrt_tensor_t *ids, dlrt_tensor_t *table);
/* Mean cross-entropy of logits (N x classes) against I32 labels (N), with
 * label smoothing in [0, 1): a tensor of shape [1]. Fused log-softmax; it
 * must be the loss given to dlrt_graph_backward. */
DLRT_API dlrt_tensor_t *dlrt_cross_entropy(dlrt_graph_t *g, dlrt_tensor_t *logits,
                                           dlrt_tensor_t *labels, float smoothing);

/* Shape of a tensor: returns ndim (or <0) and fills shape[0..ndim). */
DLRT_API int dlrt_tensor_shape(const dlrt_tensor_t *t, int64_t shape[DLRT_MAX_DIMS]);
DLRT_API int64_t dlrt_tensor_numel(const dlrt_tensor_t *t);
/* Its storage type (after dlrt_graph_backward: the one mixed precision chose). */
DLRT_API dlrt_dtype dlrt_tensor_dtype(const dlrt_tensor_t *t);
/* Where t's elements lie in the storage it uses: element [i0, i1, ...] is at
 * offset + sum(i_k * strides[k]) (in elements). Returns 1 when t is a view
 * of another tensor's storage (a reshape, a 2-D transpose: strides
 * swapped, a slice along the leading axis: an offset), 0 when it owns its
 * storage (dense, offset 0), negative on a NULL argument. Matmuls read
 * transposed views in place; other ops read a dense copy made for them. */
DLRT_API int dlrt_tensor_layout(const dlrt_tensor_t *t, int64_t strides[DLRT_MAX_DIMS],
                                int64_t *offset);
DLRT_API const char *dlrt_tensor_name(const dlrt_tensor_t *t);

/* Mixed precision: `compute` is DLRT_F16, DLRT_BF16 or DLRT_F32 (off, the
 * default); call it before dlrt_graph_backward and dlrt_exec_create (a
 * graph without a backward pass is rewritten when its first executor is
 * made), and before making inputs of the compute type. Parameters and optimizer
 * state stay fp32 (the master weights); each step casts the weights to the
 * compute type for the matmuls and convolutions, which take both operands
 * in it and accumulate in fp32 (tensor cores on CUDA, fp32 math around
 * 16-bit storage where a device has no 16-bit GEMM). Activations and their
 * gradients are stored in the compute type through ops that have kernels
 * in every type (bias, ReLU, pooling, permutes, add, mul, scale); losses,
 * softmax, normalisation and the other ops compute and store fp32, with
 * casts around them, as torch.autocast does. Parameter gradients arrive in
 * fp32. With fp16, use dynamic loss scaling (dlrt_exec_set_loss_scaler). */
DLRT_API int dlrt_graph_set_precision(dlrt_graph_t *g, dlrt_dtype compute);
/* The compute type set by dlrt_graph_set_precision (DLRT_F32 when off). */
DLRT_API dlrt_dtype dlrt_graph_precision(const dlrt_graph_t *g);
/* Appends the nodes that compute the gradient of `loss` (shape [1]) with
 * respect to every parameter (and every tensor on the way). */
DLRT_API int dlrt_graph_backward(dlrt_graph_t *g, dlrt_tensor_t *loss);
/* The gradient tensor of t after dlrt_graph_backward, or NULL. Keep it with
 * dlrt_keep to read it after a run. A ReLU's output that only a max-pool
 * reads has none: the pool's backward pass gives the ReLU's input its
 * gradient directly (the output need not live until then); keep the ReLU's
 * output with dlrt_keep before the backward pass to have its gradient. */
DLRT_API dlrt_tensor_t *dlrt_grad(dlrt_graph_t *g, dlrt_tensor_t *t);

typedef enum { DLRT_OPT_SGD, DLRT_OPT_ADAM, DLRT_OPT_ADAMW } dlrt_optimizer_kind;

typedef struct {
  dlrt_optimizer_kind kind;
  float lr;
  float momentum;     /* SGD */
  int nesterov;       /* SGD */
  float weight_decay; /* L2 for SGD and Adam, decoupled for AdamW */
  float beta1, beta2, eps; /* Adam, AdamW */
} dlrt_optimizer;

/* torch.optim's defaults: SGD lr 0.01, momentum 0; Adam lr 1e-3, betas
 * (0.9, 0.999), eps 1e-8; AdamW the same with weight decay 0.01. */
DLRT_API dlrt_optimizer dlrt_optimizer_defaults(dlrt_optimizer_kind kind);
DLRT_API const char *dlrt_optimizer_name(dlrt_optimizer_kind kind);
/* Appends one fused update per parameter (after dlrt_graph_backward). */
DLRT_API int dlrt_graph_optimize(dlrt_graph_t *g, const dlrt_optimizer *opt);

/* Plans memory, allocates parameters and optimizer state on `dev`, and
 * initialises the parameters from `seed` (the same seed gives the same
 * values on every device). */
DLRT_API int dlrt_exec_create(dlrt_graph_t *g, dlrt_device_t *dev, uint64_t seed,
                              dlrt_exec_t **out);
DLRT_API void dlrt_exec_destroy(dlrt_exec_t *e);

typedef enum {
  DLRT_RUN_FORWARD, /* the forward pass only (evaluation) */
  DLRT_RUN_TRAIN,   /* forward, backward and the parameter updates */
  DLRT_RUN_GRADIENTS, /* forward and backward; the gradients are kept for
                         dlrt_exec_gradients_read and no update is made
                         (data parallelism: combine, write back, apply) */
} dlrt_run_mode;

/* Queues one pass on the device's stream; returns once queued. */
DLRT_API int dlrt_exec_run(dlrt_exec_t *e, dlrt_run_mode mode);
/* Copies host data into an input or parameter (bytes must match). */
DLRT_API int dlrt_exec_write(dlrt_exec_t *e, dlrt_tensor_t *t, const void *src, size_t bytes);
/* Waits for queued work and copies out a kept tensor, an input or a parameter. */
DLRT_API int dlrt_exec_read(dlrt_exec_t *e, dlrt_tensor_t *t, void *dst, size_t bytes);
/* Queues, on the executor's stream, a copy of device buffer `src` (from
 * `src_offset`, the tensor's size, its shape's layout) into input `t` after
 * `wait` (NULL: nothing to wait for) has passed: how a loader's batch enters
 * the graph without a trip through the host. `src` must be on the
 * executor's device. */
DLRT_API int dlrt_exec_copy_in(dlrt_exec_t *e, dlrt_tensor_t *t, dlrt_buffer_t *src,
                               size_t src_offset, dlrt_event_t *wait);
/* The stream the executor queues its work on. */
DLRT_API dlrt_stream_t *dlrt_exec_stream(dlrt_exec_t *e);
/* Gradient accumulation: each update follows `steps` training runs (micro-
 * batches) and applies the mean of their gradients, summed in fp32 in one
 * running sum per parameter (param_bytes more device memory). With a mean
 * loss per micro-batch of B samples, `steps` runs equal one run on steps x B
 * samples (batch-norm statistics follow each micro-batch, as in PyTorch).
 * 1: every run updates (the default). DLRT_ERR_STATE while an update is
 * half-way. */
DLRT_API int dlrt_exec_set_accumulation(dlrt_exec_t *e, int steps);
/* Gradient checkpointing: the forward nodes are cut into segments of
 * `every`; a segment's intermediates (all but its last node's output, and
 * those later segments read) are freed after the forward pass and computed
 * again just before the backward pass needs them: less memory for more
 * compute (Chen et al. 2016). A segment also ends at each max-pool and
 * is not cut just before a bias, ReLU or max-pool, so that a convolution
 * block stays in one segment. A segment made only of per-image ops
 * (convolution, its bias, ReLU, max pooling; fp32) also runs a chunk of
 * images at a time, in the forward pass, the evaluation pass and the
 * backward nodes that start from its pooling's gradient, so only its
 * boundary tensors hold the whole batch. 0: off; DLRT_CHECKPOINT_SQRT:
 * segments of ceil(sqrt(forward nodes)). The gradients are the same bit for
 * bit. */
#define DLRT_CHECKPOINT_SQRT (-1)
DLRT_API int dlrt_exec_set_checkpointing(dlrt_exec_t *e, int every);
/* Unified-memory emulation: the executor's storages (parameters, optimizer
 * state, activations, gradients) live on the device while its budget lasts
 * and spill to pinned host memory, past the host budget to a disk file
 * ($DLRT_SPILL_DIR, else $TMPDIR or /tmp; removed when the process ends).
 * Before a node runs its storages are made resident and locked; to make
 * room the executor evicts the storage whose next use in the schedule is
 * furthest away, writing back only what changed; `prefetch` nodes ahead it
 * copies what they need back on a copy stream, so transfers overlap
 * compute. The policies also move storages off ahead of need: saved
 * activations after their last forward use, optimizer state after its
 * update. Results are the same bit for bit as without a budget. */
typedef enum {
  DLRT_OFFLOAD_NONE,        /* only when the budget needs room */
  DLRT_OFFLOAD_ACTIVATIONS, /* also activations from the forward pass to the backward pass */
  DLRT_OFFLOAD_OPTIMIZER,   /* also optimizer state between updates (ZeRO-Offload) */
  DLRT_OFFLOAD_ALL,         /* both */
} dlrt_offload_policy;

typedef struct {
  uint64_t device_budget;   /* bytes of the executor's storages on the device; 0: off */
  uint64_t host_budget;     /* bytes of host copies; past it, disk; 0: no bound */
  int prefetch;             /* nodes of look-ahead for prefetching (0: on demand) */
  dlrt_offload_policy policy;
} dlrt_spill_config;

typedef struct {
  uint64_t spilled_bytes;       /* device -> host or disk write-backs */
  uint64_t fetched_bytes;       /* host or disk -> device */
  uint64_t disk_written_bytes, disk_read_bytes;
  uint64_t evictions;           /* storages moved off to make room */
  uint64_t dropped_clean;       /* of the moves, without a write-back (clean copy kept) */
  uint64_t offloads;            /* moved off ahead of need by the policy */
  uint64_t prefetch_hits;       /* needed when already copied (or on the way) */
  uint64_t prefetch_misses;     /* needed and copied at once, the compute waiting */
  double transfer_ms;           /* compute-stream time in those waiting copies */
  uint64_t peak_resident;       /* bytes on the device at most */
  uint64_t peak_host;           /* bytes of host copies at most (within host_budget) */
  uint64_t min_budget;          /* the smallest budget that would have fitted */
} dlrt_spill_stats;

/* Turns spilling on (device_budget > 0) or off for the next runs. Storages
 * are moved to the host first; DLRT_ERR_OOM later, when one node alone
 * needs more than the budget, with the smallest budget that fits. */
DLRT_API int dlrt_exec_set_spill(dlrt_exec_t *e, const dlrt_spill_config *config);
DLRT_API int dlrt_exec_spill_stats(dlrt_exec_t *e, dlrt_spill_stats *out);
/* The gradients of the DLRT_RUN_GRADIENTS runs since the last update (their
 * sum: several runs are micro-batches) as one vector of `count` floats: each
 * parameter's in the order of dlrt_exec_export, one after the other (count =
 * the parameter elements, dlrt_exec_info.params); write replaces them (with
 * a combination of replicas', say); apply makes one update from their mean
 * over those runs, as a training run would have (clipping included). */
DLRT_API int dlrt_exec_gradients_read(dlrt_exec_t *e, float *dst, int64_t count);
DLRT_API int dlrt_exec_gradients_write(dlrt_exec_t *e, const float *src, int64_t count);
DLRT_API int dlrt_exec_apply_gradients(dlrt_exec_t *e);
/* Learning rate for the next updates (schedules call this every step). */
DLRT_API int dlrt_exec_set_lr(dlrt_exec_t *e, float lr);
/* Clips the gradients of each training run to a global L2 norm of at most
 * `max_norm` before the updates (torch.nn.utils.clip_grad_norm_); 0: off.
 * Costs one device-to-host read of the norm per step. */
DLRT_API int dlrt_exec_set_clip_norm(dlrt_exec_t *e, float max_norm);

/* Dynamic loss scaling for fp16 training (torch.cuda.amp.GradScaler's
 * rule): the backward pass starts from `scale` instead of 1 so that small
 * gradients survive fp16; the updates divide it out. A step whose gradients
 * hold inf or NaN is skipped (parameters, optimizer state and step count
 * unchanged) and the scale multiplied by backoff_factor; after
 * growth_interval clean steps in a row it is multiplied by growth_factor.
 * Checking costs one device-to-host read per update. */
typedef struct {
  int enabled;
  float init_scale;      /* 65536 */
  float growth_factor;   /* 2 */
  float backoff_factor;  /* 0.5 */
  int growth_interval;   /* 2000 */
} dlrt_loss_scaler;

/* The defaults above, enabled. */
DLRT_API dlrt_loss_scaler dlrt_loss_scaler_defaults(void);
/* Turns loss scaling on (or off: NULL or enabled 0) for the executor's
 * training runs; the scale starts again from init_scale. */
DLRT_API int dlrt_exec_set_loss_scaler(dlrt_exec_t *e, const dlrt_loss_scaler *scaler);

typedef struct {
  float scale;            /* the scale of the next step (1 when off) */
  int64_t skipped_steps;  /* updates skipped for inf / NaN gradients */
  int last_skipped;       /* the last update was skipped */
} dlrt_loss_scale_state;

DLRT_API int dlrt_exec_loss_scale(const dlrt_exec_t *e, dlrt_loss_scale_state *out);

typedef struct {
  uint64_t planned_peak_bytes;  /* the planner's peak for a training step */
  uint64_t measured_peak_bytes; /* the allocator's peak since the executor began */
  uint64_t param_bytes;         /* parameters */
  uint64_t state_bytes;         /* optimizer state */
  int64_t params;               /* parameter elements */
  int64_t steps;                /* training steps run */
  int nodes;                    /* nodes in the graph */
} dlrt_exec_info;

DLRT_API int dlrt_exec_info_get(dlrt_exec_t *e, dlrt_exec_info *out);
/* Parameters (and, when `with_state`, optimizer state and the step count)
 * as named host tensors, for checkpoints; and back. */
DLRT_API int dlrt_exec_export(dlrt_exec_t *e, int with_state, dlrt_host_tensor **tensors,
                              int *n);
DLRT_API int dlrt_exec_import(dlrt_exec_t *e, const dlrt_host_tensor *tensors, int n);

/* ------------------------------------------------------------------------ */
/* Models and training                                                       */
/* ------------------------------------------------------------------------ */

/* Builds a sequential model on `input` (N x C x H x W) into `g` and returns
 * its logits (N x classes) in *logits. `spec` is a preset or a model file:
 *   "mlp": flatten, linear 512, relu, linear 512, relu, linear classes;
 *   "cnn": conv2d 32 3, relu, maxpool 2, conv2d 64 3 pad=1, relu, maxpool 2,
 *          flatten, linear 128, relu, linear classes;
 *   FILE: one layer per line ('#' starts a comment):
 *     conv2d OUT K [stride=S] [pad=P] [dilation=D]
 *     maxpool K [stride=S]        (stride defaults to K)
 *     avgpool K [stride=S]
 *     linear OUT                  (flattens its input when needed)
 *     relu | tanh | sigmoid | gelu
 *     dropout P                   (drop probability in [0, 1))
 *     batchnorm                   (per channel or feature; momentum 0.1, eps 1e-5)
 *     flatten
 *   A final "linear classes" is appended when the file does not end in one.
 * A bad file gives DLRT_ERR_INVALID_ARG with "FILE:LINE: what is wrong". */
DLRT_API int dlrt_model_build(dlrt_graph_t *g, const char *spec, dlrt_tensor_t *input,
                              int64_t classes, dlrt_tensor_t **logits);

typedef struct dlrt_trainer dlrt_trainer_t;

/* Learning-rate schedules, per step, after an optional linear warm-up. */
typedef enum {
  DLRT_LR_CONSTANT,
  DLRT_LR_STEP,   /* lr * gamma^(floor(step / step_size)) */
  DLRT_LR_COSINE, /* lr * (1 + cos(pi * step / total_steps)) / 2, 0 after the end */
} dlrt_lr_schedule;

typedef struct {
  const char *model;     /* "mlp", "cnn" or a model file */
  int64_t batch;         /* images per step */
  dlrt_optimizer opt;
  uint64_t seed;         /* parameters and shuffling */
  float label_smoothing; /* 0 for none */
  dlrt_lr_schedule schedule;
  int64_t warmup_steps;  /* lr rises linearly from lr / warmup_steps over these */
  int64_t step_size;     /* DLRT_LR_STEP */
  float gamma;           /* DLRT_LR_STEP */
  int64_t total_steps;   /* DLRT_LR_COSINE: the steps of the whole run */
  float clip_norm;       /* clip gradients to this global L2 norm (0: off) */
  int64_t channels;      /* image channels (0: 1) */
  /* The data pipeline (dlrt_loader_*): worker threads, batches prefetched
   * (both 0: each batch loaded in the calling thread when needed), the
   * augmentation of training batches (evaluation gets its normalisation
   * only) and this process's shard (rank of world; 0 and 0: the whole set). */
  int workers, prefetch;
  int augment;
  dlrt_augment aug;
  int rank, world;
  int accum;             /* micro-batches of `batch` per update (0 or 1: none) */
  /* Gradient checkpointing: 0 none, N forward nodes per segment,
   * DLRT_CHECKPOINT_SQRT, or DLRT_CHECKPOINT_AUTO: the longest segments
   * (least recompute) whose planned peak fits 85% of the device's budget
   * (dlrt_mem_get_limit, else its memory; the rest is slack for the
   * allocator's segments). */
  int checkpoint;
  /* Spilling (dlrt_exec_set_spill): spill.device_budget bounds all the
   * trainer's device memory (its loader and accumulators included). 0: off,
   * unless the device has a budget (dlrt_mem_get_limit, DLRT_MEM_LIMIT) that
   * the plan exceeds; spilling then keeps to 85% of it. */
  dlrt_spill_config spill;
  /* Mixed precision (dlrt_graph_set_precision): DLRT_F32 (0, off), DLRT_F16
   * or DLRT_BF16. With fp16, loss scaling is on: loss_scaler's fields that
   * are 0 take dlrt_loss_scaler_defaults' values, and enabled < 0 turns it
   * off. bf16 needs none (enabled > 0 turns it on). */
  dlrt_dtype precision;
  dlrt_loss_scaler loss_scaler;
} dlrt_trainer_config;
#define DLRT_CHECKPOINT_AUTO (-2)

/* The learning rate of step `step` (0-based) under the config's schedule. */
DLRT_API float dlrt_lr_at(const dlrt_trainer_config *config, int64_t step);

/* What one epoch (or an evaluation) measured. */
typedef struct {
  float loss;           /* mean over the batches */
  float accuracy;       /* fraction of images classified right */
  double images_per_s;  /* steady state: the first 10% of steps are warm-up */
  double seconds;
  int64_t steps;
  int64_t images;
  double transfer_ms;         /* spilling: compute time spent waiting for copies */
  uint64_t spilled_bytes, fetched_bytes; /* spilling, during the epoch */
  uint64_t disk_bytes;        /* of spilled_bytes, those written to the disk tier */
  double stall_s;             /* time the steps waited for data */
  double stall_fraction;      /* stall_s / seconds */
  double loader_images_per_s; /* what the loader's workers can deliver */
  float loss_scale;           /* loss scaling: the scale after the epoch (1: off) */
  int64_t skipped_steps;      /* updates skipped for inf / NaN gradients, this epoch */
} dlrt_epoch_stats;

/* Called every few steps during an epoch with the running figures. */
typedef void (*dlrt_progress_fn)(void *user, int64_t step, int64_t steps,
                                 const dlrt_epoch_stats *so_far);

/* A classifier for images of height x width (one channel) in `classes`
 * classes, trained on `dev`. */
DLRT_API int dlrt_trainer_create(dlrt_device_t *dev, const dlrt_trainer_config *config,
                                 int64_t height, int64_t width, int classes,
                                 dlrt_trainer_t **out);
DLRT_API void dlrt_trainer_destroy(dlrt_trainer_t *t);
/* One pass over `data` (pixels scaled to [0, 1]) in an order shuffled from
 * (seed, epoch); the last partial batch is dropped, and with accumulation
 * the micro-batches that do not fill a last update. out->steps counts
 * updates, out->loss is the mean of the micro-batch losses. `progress` may be
 * NULL. */
DLRT_API int dlrt_trainer_epoch(dlrt_trainer_t *t, const dlrt_dataset *data, int epoch,
                                dlrt_progress_fn progress, void *user, dlrt_epoch_stats *out);
/* Loss and accuracy over all of `data` (the last partial batch included). */
DLRT_API int dlrt_trainer_evaluate(dlrt_trainer_t *t, const dlrt_dataset *data,
                                   dlrt_epoch_stats *out);
/* Checkpoint: parameters, optimizer state, step, and `epochs_done` in the
 * metadata, in safetensors (written atomically). */
DLRT_API int dlrt_trainer_save(dlrt_trainer_t *t, const char *path, int epochs_done);
/* Restores a checkpoint of the same model; *epochs_done says where to go on. */
DLRT_API int dlrt_trainer_load(dlrt_trainer_t *t, const char *path, int *epochs_done);
DLRT_API int dlrt_trainer_info(dlrt_trainer_t *t, dlrt_exec_info *out);
/* The loss scale of the executor that makes the updates (scale 1 when off). */
DLRT_API int dlrt_trainer_loss_scale(dlrt_trainer_t *t, dlrt_loss_scale_state *out);
/* Data parallelism over `n` devices of any backends (the same device may be
 * named twice): a replica of the model on each takes `split[i]` rows of
 * every batch (NULL: even shares for the first 4 steps, timed, then shares
 * in proportion to each device's measured rows per second); each computes
 * the gradient of the mean loss over its rows, the host combines them
 * weighted by rows / batch, and every replica makes the same update, so
 * training equals the single-device run with the same batch (to fp32
 * rounding; batch-norm statistics and dropout masks are per replica).
 * Without accumulation, spilling or checkpointing in this version. */
DLRT_API int dlrt_trainer_set_devices(dlrt_trainer_t *t, dlrt_device_t *const *devs, int n,
                                      const int64_t *split);
/* Data parallelism across processes (and machines): each process trains on
 * its shard (config.rank of config.world) with its own batch; after each
 * step's backward pass the trainer hands `reduce` one vector of
 * count = parameter elements + 2 floats, [gradients / world, loss / world,
 * correct predictions], to be replaced in place by its sum over all the
 * processes (an MPI all-reduce, say); every process then makes the same
 * update. Equals one process with a batch of world x batch (to fp32
 * rounding). `reduce` returns 0, or a negative dlrt status with the reason
 * set (dlrt stops the epoch with it). NULL: off. */
typedef int (*dlrt_allreduce_fn)(void *user, float *values, int64_t count);
DLRT_API int dlrt_trainer_set_allreduce(dlrt_trainer_t *t, dlrt_allreduce_fn reduce,
                                        void *user);
/* The same, overlapped with the backward pass (as PyTorch DDP's buckets):
 * the gradients are handed over in buckets of about 1 MiB as the backward
 * pass finishes them, last layers first, each to `start`, which begins a
 * non-blocking sum over the processes (MPI_Iallreduce, say) of `values` in
 * place and sets *request; the loss and correct predictions follow as one
 * last vector of 2. `wait` then completes each request in turn. Both return
 * 0, or a negative dlrt status with the reason set. Gradients arrive
 * already divided by the world size. */
typedef int (*dlrt_allreduce_start_fn)(void *user, float *values, int64_t count,
                                       void **request);
typedef int (*dlrt_allreduce_wait_fn)(void *user, void *request);
DLRT_API int dlrt_trainer_set_allreduce_async(dlrt_trainer_t *t, dlrt_allreduce_start_fn start,
                                              dlrt_allreduce_wait_fn wait, void *user);
/* The same with device pointers, for an MPI that reads device memory
 * (CUDA-aware): each parameter's summed gradient is handed over where it
 * lies on the training device, already divided by the world size, after
 * the backward pass (no copy through the host); the loss and correct
 * predictions follow in host memory as before. CUDA devices only
 * (DLRT_ERR_UNSUPPORTED elsewhere). */
DLRT_API int dlrt_trainer_set_allreduce_device(dlrt_trainer_t *t, dlrt_allreduce_start_fn start,
                                               dlrt_allreduce_wait_fn wait, void *user);
/* Pipeline parallelism: the model's layers cut into n stages on the given
 * devices (any backends), where activations are matrices (after a flatten
 * or linear layer), balancing their parameters; each batch goes through in
 * `micro` micro-batches on the GPipe schedule (all forward, then all
 * backward, each stage recomputing its forward), activations and gradients
 * passing between stages through the host, and every stage updates from
 * the mean over the micro-batches: equal to one device with the same batch
 * (to fp32 rounding). Not with accumulation, spilling, --devices, MPI,
 * checkpointing or clipping in this version. */
DLRT_API int dlrt_trainer_set_pipeline(dlrt_trainer_t *t, dlrt_device_t *const *devs, int n,
                                       int micro);
/* The layers [first[s], last[s]) of each stage s (*n stages; 0: none). */
DLRT_API int dlrt_trainer_stages(const dlrt_trainer_t *t, int *first, int *last, int *n);
/* The rows of each batch each device takes now (*n devices). */
DLRT_API int dlrt_trainer_split(const dlrt_trainer_t *t, int64_t *split, int *n);

/* ------------------------------------------------------------------------ */
/* Memory planning                                                           */
/* ------------------------------------------------------------------------ */

/* What one training step of a classifier (dlrt_trainer_create's model) holds
 * on the device at its peak, in allocator bytes: the executor's own plan,
 * made without a device, so it matches the measured peak. */
typedef struct {
  int64_t batch;
  int64_t param_count;
  uint64_t params, grads, optimizer_state;
  uint64_t activations;   /* intermediates live at the peak */
  uint64_t inputs;        /* the batch in the graph, and kept outputs (logits) */
  uint64_t accumulators;  /* gradient accumulation's running sums */
  uint64_t loader;        /* the loader's device slots (prefetch x a batch) */
  uint64_t peak;          /* all of it */
  /* The least device memory training can do with spilling and the
   * optimizer on the host (--mem-limit --offload optimizer): what one
   * operation holds at once, plus the loaders. */
  uint64_t spill_least;
} dlrt_memory_plan;

/* Plans `cfg` (model, batch, optimizer, accum, prefetch) for images of
 * channels x height x width in `classes` classes. */
DLRT_API int dlrt_plan_memory(const dlrt_trainer_config *cfg, int64_t channels, int64_t height,
                              int64_t width, int classes, dlrt_memory_plan *out);
/* The largest batch whose planned peak fits `budget` bytes, and its plan
 * (out->batch 0: not even a batch of 1 fits; out then plans a batch of 1).
 * With cfg->spill.policy DLRT_OFFLOAD_OPTIMIZER or _ALL the batch whose
 * spill_least fits instead. */
DLRT_API int dlrt_plan_max_batch(const dlrt_trainer_config *cfg, int64_t channels,
                                 int64_t height, int64_t width, int classes, uint64_t budget,
                                 dlrt_memory_plan *out);

/* What-if for a model of any size, from bytes per parameter of its states. */
typedef struct {
  const char *strategy;
  double device_bytes;  /* model states on the devices, in all */
  double host_bytes;    /* and on the host */
  double devices;       /* the fewest devices of the given size that hold the
                           device side split between them (pipeline stages,
                           ZeRO-3 shards) */
  int fits_one;         /* fits whole on one device (plain data parallelism) */
} dlrt_what_if;

/* Fills up to 8 rows for a model of `params` parameters and devices of
 * `device_bytes`; activations are not counted. */
DLRT_API int dlrt_plan_what_if(double params, uint64_t device_bytes, dlrt_what_if *out, int *n);

/* Tracing: writes a Chrome trace (JSON; open it in https://ui.perfetto.dev
 * or chrome://tracing) of every graph node the executors run, every spill
 * copy, and device memory over time. DLRT_TRACE=FILE starts one for the
 * whole process. While tracing, each node and copy is waited for to time
 * it: a traced run is slower. */
DLRT_API int dlrt_trace_start(const char *path);
DLRT_API void dlrt_trace_stop(void);

/* Threads the CPU backend uses for its kernels and its GEMM (0: all cores).
 * The backend keeps OpenBLAS at one thread and runs blocks of each GEMM on
 * its own pool: a program calling OpenBLAS itself sets its threads for its
 * calls (openblas_set_num_threads). */
DLRT_API int dlrt_set_cpu_threads(int threads);

#ifdef __cplusplus
}
#endif

#endif /* DLRT_H */
