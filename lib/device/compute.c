/* compute.c — argument checking and dispatch of GEMM and elementwise ops to
 * the stream's backend. Backends may assume valid, in-range arguments. */
#include "config.h"

#include <string.h>

#include "device/launch.h"
#include "device/registry.h"
#include "util/status.h"

dlrt_gemm_desc dlrt_gemm_desc_make(dlrt_dtype dtype, int trans_a, int trans_b, int64_t m,
                                   int64_t n, int64_t k, float alpha, float beta) {
  dlrt_gemm_desc d = {0};
  d.dtype = dtype;
  d.trans_a = trans_a;
  d.trans_b = trans_b;
  d.m = m;
  d.n = n;
  d.k = k;
  d.alpha = alpha;
  d.beta = beta;
  d.lda = trans_a ? m : k;
  d.ldb = trans_b ? k : n;
  d.ldc = n;
  d.batch = 1;
  return d;
}

/* Checks that `what` (rows x cols, leading dimension ld, batch stride) fits in
 * `buf` from byte `offset`. */
static int check_matrix(const char *what, dlrt_buffer_t *buf, size_t offset, int64_t rows,
                        int64_t cols, int64_t ld, int64_t stride, int64_t batch, size_t esize,
                        dlrt_device_t *dev) {
  const dlrt__span *buf_sp = dlrt__span_of(buf);
  DLRT__CHECK_ARG(buf, "dlrt_gemm: %s is NULL", what);
  if (buf_sp->dev != dev)
    return dlrt__set_error(DLRT_ERR_WRONG_DEVICE, "dlrt_gemm: %s is on %s but the stream is "
                           "on %s", what, buf_sp->dev->spec, dev->spec);
  DLRT__CHECK_ARG(ld >= (cols > 1 ? cols : 1), "dlrt_gemm: leading dimension of %s is %lld, "
                  "less than its %lld columns", what, (long long)ld, (long long)cols);
  DLRT__CHECK_ARG(stride >= 0, "dlrt_gemm: batch stride of %s is negative", what);
  DLRT__CHECK_ARG(offset % esize == 0, "dlrt_gemm: offset %zu of %s is not a multiple of "
                  "the element size %zu", offset, what, esize);
  if (rows == 0 || cols == 0) return DLRT_OK;
  /* Last element: (batch-1)*stride + (rows-1)*ld + cols - 1. In doubles to
   * stay clear of overflow; exact below 2^53 elements. */
  double last = (double)(batch - 1) * (double)stride + (double)(rows - 1) * (double)ld +
                (double)cols;
  double need = (double)offset + last * (double)esize;
  if (need > (double)buf_sp->size)
    return dlrt__set_error(DLRT_ERR_OUT_OF_RANGE, "dlrt_gemm: %s (%lld x %lld, ld %lld, "
                           "batch %lld, stride %lld) needs %.0f bytes from offset %zu; the "
                           "buffer has %zu", what, (long long)rows, (long long)cols,
                           (long long)ld, (long long)batch, (long long)stride, need, offset,
                           buf_sp->size);
  return DLRT_OK;
}

/* Elements a matrix operand spans: (batch-1)*stride + (rows-1)*ld + cols. */
static int64_t matrix_extent(int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                             int64_t batch) {
  if (rows == 0 || cols == 0) return 0;
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

/* fp16 / bf16 GEMM on a device whose library has none: widen the operands
 * to fp32 temporaries of the same layout, multiply in fp32, narrow C back
 * (storage-only half precision; an fp32 C, c_f32, is used in place).
 * Temporaries come from the stream-ordered allocator and are released as
 * soon as the work is queued. */
static int gemm_through_f32(dlrt_stream_t *stream, const dlrt_gemm_desc *d, dlrt_buffer_t *a,
                            size_t a_off, dlrt_buffer_t *b, size_t b_off, dlrt_buffer_t *c,
                            size_t c_off) {
  int64_t na = matrix_extent(d->trans_a ? d->k : d->m, d->trans_a ? d->m : d->k, d->lda,
                             d->stride_a, d->batch);
  int64_t nb = matrix_extent(d->trans_b ? d->n : d->k, d->trans_b ? d->k : d->n, d->ldb,
                             d->stride_b, d->batch);
  int64_t nc = matrix_extent(d->m, d->n, d->ldc, d->stride_c, d->batch);
  dlrt_device_t *dev = stream->dev;
  dlrt_buffer_t *wa = NULL, *wb = NULL, *wc = NULL;
  int rc;
  /* At least one element each: k may be 0, and buffers cannot be empty. */
  if ((rc = dlrt__device_scratch(dev, (size_t)(na ? na : 1) * 4, stream, &wa)) < 0 ||
      (rc = dlrt__device_scratch(dev, (size_t)(nb ? nb : 1) * 4, stream, &wb)) < 0 ||
      (!d->c_f32 && (rc = dlrt__device_scratch(dev, (size_t)nc * 4, stream, &wc)) < 0))
    goto out;
  if ((rc = dlrt_cast(stream, na, wa, 0, DLRT_F32, a, a_off, d->dtype)) < 0 ||
      (rc = dlrt_cast(stream, nb, wb, 0, DLRT_F32, b, b_off, d->dtype)) < 0)
    goto out;
  /* beta == 0 must not read C (it may hold NaN); gaps between rows of C are
   * widened and narrowed back unchanged. */
  if (!d->c_f32 &&
      (d->beta != 0.0f || d->ldc != d->n || (d->batch > 1 && d->stride_c != d->m * d->ldc)))
    rc = dlrt_cast(stream, nc, wc, 0, DLRT_F32, c, c_off, d->dtype);
  if (rc < 0) goto out;
  dlrt_gemm_desc f = *d;
  f.dtype = DLRT_F32;
  f.c_f32 = 0;
  const dlrt__span *wa_sp = dlrt__span_of(wa), *wb_sp = dlrt__span_of(wb);
  const dlrt__span *wc_sp = dlrt__span_of(d->c_f32 ? c : wc);
  size_t wc_off = wc_sp->offset + (d->c_f32 ? c_off : 0);
  rc = dev->be->gemm(stream->ctx, &f, wa_sp->mem, wa_sp->offset, wb_sp->mem, wb_sp->offset,
                     wc_sp->mem, wc_off);
  if (rc == DLRT_OK && !d->c_f32) rc = dlrt_cast(stream, nc, c, c_off, d->dtype, wc, 0, DLRT_F32);
out:
  dlrt__device_scratch_free(dev, wa);
  dlrt__device_scratch_free(dev, wb);
  dlrt__device_scratch_free(dev, wc);
  return rc;
}

int dlrt_gemm(dlrt_stream_t *stream, const dlrt_gemm_desc *d, dlrt_buffer_t *a,
              size_t a_offset, dlrt_buffer_t *b, size_t b_offset, dlrt_buffer_t *c,
              size_t c_offset) {
  const dlrt__span *a_sp = dlrt__span_of(a);
  const dlrt__span *b_sp = dlrt__span_of(b);
  const dlrt__span *c_sp = dlrt__span_of(c);
  DLRT__CHECK_ARG(stream && d, "dlrt_gemm: stream or descriptor is NULL");
  DLRT__CHECK_ARG(d->m >= 0 && d->n >= 0 && d->k >= 0, "dlrt_gemm: negative size "
                  "(m %lld, n %lld, k %lld)", (long long)d->m, (long long)d->n, (long long)d->k);
  DLRT__CHECK_ARG(d->batch >= 1, "dlrt_gemm: batch is %lld, must be >= 1", (long long)d->batch);
  DLRT__CHECK_ARG(d->dtype == DLRT_F32 || d->dtype == DLRT_F16 || d->dtype == DLRT_BF16,
                  "dlrt_gemm: dtype %s is not a floating-point type", dlrt_dtype_name(d->dtype));
  DLRT__CHECK_ARG(!d->c_f32 || d->dtype == DLRT_F16 || d->dtype == DLRT_BF16,
                  "dlrt_gemm: an fp32 C (c_f32) is for f16 or bf16 A and B, not %s",
                  dlrt_dtype_name(d->dtype));
  dlrt_device_t *dev = stream->dev;
  size_t es = dlrt_dtype_size(d->dtype), c_es = d->c_f32 ? 4 : es;
  int rc;
  if ((rc = check_matrix("A", a, a_offset, d->trans_a ? d->k : d->m, d->trans_a ? d->m : d->k,
                         d->lda, d->stride_a, d->batch, es, dev)) < 0 ||
      (rc = check_matrix("B", b, b_offset, d->trans_b ? d->n : d->k, d->trans_b ? d->k : d->n,
                         d->ldb, d->stride_b, d->batch, es, dev)) < 0 ||
      (rc = check_matrix("C", c, c_offset, d->m, d->n, d->ldc, d->stride_c, d->batch, c_es,
                         dev)) < 0)
    return rc;
  DLRT__CHECK_ARG(d->batch == 1 || d->stride_c >= d->m * d->ldc, "dlrt_gemm: stride of C "
                  "(%lld) is less than one C matrix (%lld): batches would overlap",
                  (long long)d->stride_c, (long long)(d->m * d->ldc));
  if (!dev->be->gemm)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "dlrt_gemm: the %s backend has no GEMM in "
                           "this build", dev->be->name);
  if (d->m == 0 || d->n == 0) return DLRT_OK;
  rc = dev->be->gemm(stream->ctx, d, a_sp->mem, a_sp->offset + a_offset, b_sp->mem,
                     b_sp->offset + b_offset, c_sp->mem, c_sp->offset + c_offset);
  if (rc == DLRT_ERR_UNSUPPORTED && d->dtype != DLRT_F32 && dev->be->launch)
    rc = gemm_through_f32(stream, d, a, a_offset, b, b_offset, c, c_offset);
  return rc;
}

/* ---------------------------------------------------------------- kernels */

/* Kernel-name suffix of a storage type, or NULL when kernels lack it. */
static const char *type_suffix(dlrt_dtype t) {
  switch (t) {
  case DLRT_F32: return "f32";
  case DLRT_F16: return "f16";
  case DLRT_BF16: return "bf16";
  default: return NULL;
  }
}

/* Index of a storage type within a kernel family of DLRT__KERNELS_OF_TYPE,
 * whose families repeat in the order f32, f16, bf16. */
static int type_index(dlrt_dtype t) { return t == DLRT_F32 ? 0 : t == DLRT_F16 ? 1 : 2; }

#define KERNELS_PER_TYPE (DLRT__K_fill_f16 - DLRT__K_fill_f32)

static int kernel_for(int f32_kernel, dlrt_dtype t) {
  return f32_kernel + type_index(t) * KERNELS_PER_TYPE;
}

static int check_float_type(const char *call, dlrt_dtype t) {
  DLRT__CHECK_ARG(type_suffix(t), "%s: dtype %s is not one of f32, f16, bf16", call,
                  dlrt_dtype_name(t));
  return DLRT_OK;
}

const char *dlrt_ew_op_name(dlrt_ew_op op) {
  static const char *const names[DLRT_EW_COUNT_] = {"fill", "scale", "axpy", "add", "mul", "relu"};
  return op >= 0 && op < DLRT_EW_COUNT_ ? names[op] : "unknown";
}

int dlrt_elementwise(dlrt_stream_t *stream, dlrt_ew_op op, dlrt_dtype dtype, int64_t n,
                     float alpha, dlrt_buffer_t *y, size_t y_offset, dlrt_buffer_t *x,
                     size_t x_offset, dlrt_buffer_t *z, size_t z_offset) {
  /* Per op: its f32 kernel, whether it reads x and z, whether it takes alpha. */
  static const struct { int kernel, x, z, alpha; } ops[DLRT_EW_COUNT_] = {
      [DLRT_EW_FILL] = {DLRT__K_fill_f32, 0, 0, 1},
      [DLRT_EW_SCALE] = {DLRT__K_scale_f32, 1, 0, 1},
      [DLRT_EW_AXPY] = {DLRT__K_axpy_f32, 1, 0, 1},
      [DLRT_EW_ADD] = {DLRT__K_add_f32, 1, 1, 0},
      [DLRT_EW_MUL] = {DLRT__K_mul_f32, 1, 1, 0},
      [DLRT_EW_RELU] = {DLRT__K_relu_f32, 1, 0, 0}};
  char call[48];
  dlrt__launcher lb;
  snprintf(call, sizeof call, "dlrt_elementwise(%s)", dlrt_ew_op_name(op));
  int rc = dlrt__launch_start(&lb, stream, call);
  if (rc < 0) return rc;
  DLRT__CHECK_ARG(op >= 0 && op < DLRT_EW_COUNT_, "dlrt_elementwise: unknown op %d", (int)op);
  if ((rc = check_float_type(call, dtype)) < 0) return rc;
  DLRT__CHECK_ARG(n >= 0, "%s: n is negative", call);
  size_t es = dlrt_dtype_size(dtype);
  if ((rc = dlrt__launch_operand(&lb, "y", y, y_offset, n, es)) < 0) return rc;
  if (ops[op].x && (rc = dlrt__launch_operand(&lb, "x", x, x_offset, n, es)) < 0) return rc;
  if (ops[op].z && (rc = dlrt__launch_operand(&lb, "z", z, z_offset, n, es)) < 0) return rc;
  if (n == 0) return lb.dev->be->launch ? DLRT_OK : dlrt__launch_submit(stream, &lb);
  lb.launch.kernel = kernel_for(ops[op].kernel, dtype);
  lb.launch.items = n;
  dlrt__launch_buffer_arg(&lb, y, y_offset, es);
  if (ops[op].x) dlrt__launch_buffer_arg(&lb, x, x_offset, es);
  if (ops[op].z) dlrt__launch_buffer_arg(&lb, z, z_offset, es);
  if (ops[op].alpha) dlrt__launch_f32(&lb, alpha);
  dlrt__launch_i64(&lb, n);
  return dlrt__launch_submit(stream, &lb);
}

int dlrt_cast(dlrt_stream_t *stream, int64_t n, dlrt_buffer_t *y, size_t y_offset,
              dlrt_dtype y_dtype, dlrt_buffer_t *x, size_t x_offset, dlrt_dtype x_dtype) {
  dlrt__launcher lb;
  int rc = dlrt__launch_start(&lb, stream, "dlrt_cast");
  if (rc < 0) return rc;
  if ((rc = check_float_type("dlrt_cast", y_dtype)) < 0 ||
      (rc = check_float_type("dlrt_cast", x_dtype)) < 0)
    return rc;
  DLRT__CHECK_ARG(n >= 0, "dlrt_cast: n is negative");
  size_t ys = dlrt_dtype_size(y_dtype), xs = dlrt_dtype_size(x_dtype);
  if ((rc = dlrt__launch_operand(&lb, "y", y, y_offset, n, ys)) < 0 ||
      (rc = dlrt__launch_operand(&lb, "x", x, x_offset, n, xs)) < 0)
    return rc;
  if (n == 0) return lb.dev->be->launch ? DLRT_OK : dlrt__launch_submit(stream, &lb);
  /* cast_<dst>_<src>: within a source type's family, dst in f32, f16, bf16 order. */
  lb.launch.kernel = kernel_for(DLRT__K_cast_f32_f32, x_dtype) + type_index(y_dtype);
  lb.launch.items = n;
  dlrt__launch_buffer_arg(&lb, y, y_offset, ys);
  dlrt__launch_buffer_arg(&lb, x, x_offset, xs);
  dlrt__launch_i64(&lb, n);
  return dlrt__launch_submit(stream, &lb);
}

const char *dlrt_reduce_op_name(dlrt_reduce_op op) {
  return op == DLRT_REDUCE_SUM ? "sum" : op == DLRT_REDUCE_MAX ? "max" : "unknown";
}

/* Segments per row for the first reduction pass: a function of the shape
 * alone, so that every device adds in the same order. Few long rows are cut
 * into up to 1024 segments of at least 16 elements per work-item. */
int64_t dlrt__reduce_segments(int64_t rows, int64_t cols) {
  const int64_t per_group = 256 * 16, max_segs = 1024;
  if (rows >= 256) return 1;
  int64_t segs = cols / per_group;
  if (segs > max_segs) segs = max_segs;
  return segs < 1 ? 1 : segs;
}

int dlrt_reduce(dlrt_stream_t *stream, dlrt_reduce_op op, dlrt_dtype dtype, int64_t rows,
                int64_t cols, dlrt_buffer_t *y, size_t y_offset, dlrt_buffer_t *x,
                size_t x_offset) {
  const dlrt__span *y_sp = dlrt__span_of(y);
  const dlrt__span *x_sp = dlrt__span_of(x);
  char call[32];
  dlrt__launcher lb;
  snprintf(call, sizeof call, "dlrt_reduce(%s)", dlrt_reduce_op_name(op));
  int rc = dlrt__launch_start(&lb, stream, call);
  if (rc < 0) return rc;
  DLRT__CHECK_ARG(op == DLRT_REDUCE_SUM || op == DLRT_REDUCE_MAX, "dlrt_reduce: unknown op %d",
                  (int)op);
  if ((rc = check_float_type(call, dtype)) < 0) return rc;
  DLRT__CHECK_ARG(rows >= 0 && cols >= 0, "%s: negative shape %lld x %lld", call,
                  (long long)rows, (long long)cols);
  DLRT__CHECK_ARG(cols == 0 || rows <= INT64_MAX / cols, "%s: %lld x %lld overflows", call,
                  (long long)rows, (long long)cols);
  size_t es = dlrt_dtype_size(dtype);
  if ((rc = dlrt__launch_operand(&lb, "y", y, y_offset, rows, es)) < 0 ||
      (rc = dlrt__launch_operand(&lb, "x", x, x_offset, rows * cols, es)) < 0)
    return rc;
  if (y_sp->mem.handle == x_sp->mem.handle) {
    size_t y0 = y_sp->offset + y_offset, x0 = x_sp->offset + x_offset;
    DLRT__CHECK_ARG(y0 + (size_t)rows * es <= x0 || x0 + (size_t)(rows * cols) * es <= y0,
                    "%s: y overlaps x; reduce into another buffer", call);
  }
  if (rows == 0) return lb.dev->be->launch ? DLRT_OK : dlrt__launch_submit(stream, &lb);
  if (!lb.dev->be->launch) return dlrt__launch_submit(stream, &lb);
  int64_t segs = cols ? dlrt__reduce_segments(rows, cols) : 1;
  /* fp32 partials, one per (row, segment). Freed at once: the stream-ordered
   * allocator hands the memory to another stream only after this one's work. */
  dlrt_buffer_t *partial;
  if ((rc = dlrt__device_scratch(lb.dev, (size_t)(rows * segs) * sizeof(float), stream,
                                 &partial)) < 0)
    return rc;
  int first = op == DLRT_REDUCE_SUM ? DLRT__K_reduce_sum_f32 : DLRT__K_reduce_max_f32;
  int final = op == DLRT_REDUCE_SUM ? DLRT__K_reduce_final_sum_f32 : DLRT__K_reduce_final_max_f32;
  lb.launch.kernel = kernel_for(first, dtype);
  lb.launch.groups = rows * segs;
  dlrt__launch_buffer_arg(&lb, x, x_offset, es);
  dlrt__launch_i64(&lb, rows);
  dlrt__launch_i64(&lb, cols);
  dlrt__launch_i64(&lb, segs);
  dlrt__launch_buffer_arg(&lb, partial, 0, sizeof(float));
  rc = dlrt__launch_submit(stream, &lb);
  if (rc == DLRT_OK) {
    lb.launch = (dlrt__launch){.kernel = kernel_for(final, dtype), .items = rows};
    dlrt__launch_buffer_arg(&lb, partial, 0, sizeof(float));
    dlrt__launch_i64(&lb, rows);
    dlrt__launch_i64(&lb, segs);
    dlrt__launch_buffer_arg(&lb, y, y_offset, es);
    rc = dlrt__launch_submit(stream, &lb);
  }
  dlrt__device_scratch_free(lb.dev, partial);
  return rc;
}

int dlrt_transpose(dlrt_stream_t *stream, dlrt_dtype dtype, int64_t batch, int64_t rows,
                   int64_t cols, dlrt_buffer_t *y, size_t y_offset, dlrt_buffer_t *x,
                   size_t x_offset) {
  const dlrt__span *y_sp = dlrt__span_of(y);
  const dlrt__span *x_sp = dlrt__span_of(x);
  dlrt__launcher lb;
  int rc = dlrt__launch_start(&lb, stream, "dlrt_transpose");
  if (rc < 0) return rc;
  DLRT__CHECK_ARG(dtype == DLRT_F32 || dtype == DLRT_F16 || dtype == DLRT_BF16 ||
                  dtype == DLRT_I32, "dlrt_transpose: dtype %s has no transpose kernel",
                  dlrt_dtype_name(dtype));
  DLRT__CHECK_ARG(batch >= 0 && rows >= 0 && cols >= 0, "dlrt_transpose: negative shape");
  DLRT__CHECK_ARG(rows == 0 || cols == 0 || batch <= INT64_MAX / rows / cols,
                  "dlrt_transpose: %lld x %lld x %lld overflows", (long long)batch,
                  (long long)rows, (long long)cols);
  int64_t count = batch * rows * cols;
  size_t es = dlrt_dtype_size(dtype);
  if ((rc = dlrt__launch_operand(&lb, "y", y, y_offset, count, es)) < 0 ||
      (rc = dlrt__launch_operand(&lb, "x", x, x_offset, count, es)) < 0)
    return rc;
  if (y_sp->mem.handle == x_sp->mem.handle && count > 0) {
    size_t y0 = y_sp->offset + y_offset, x0 = x_sp->offset + x_offset, bytes = (size_t)count * es;
    DLRT__CHECK_ARG(y0 + bytes <= x0 || x0 + bytes <= y0,
                    "dlrt_transpose: y overlaps x; transpose into another buffer");
  }
  if (count == 0) return lb.dev->be->launch ? DLRT_OK : dlrt__launch_submit(stream, &lb);
  const int64_t tile = 32;
  lb.launch.kernel = es == 4 ? DLRT__K_transpose_b32 : DLRT__K_transpose_b16;
  lb.launch.groups = batch * ((rows + tile - 1) / tile) * ((cols + tile - 1) / tile);
  dlrt__launch_buffer_arg(&lb, y, y_offset, es);
  dlrt__launch_buffer_arg(&lb, x, x_offset, es);
  dlrt__launch_i64(&lb, batch);
  dlrt__launch_i64(&lb, rows);
  dlrt__launch_i64(&lb, cols);
  return dlrt__launch_submit(stream, &lb);
}

/* ---------------------------------------------------------------- all-reduce */

int dlrt__devices_share_allreduce(dlrt_device_t *const *devs, int n) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < i; j++)
      if (devs[i] == devs[j] || devs[i]->be != devs[0]->be) return 0;
  return n > 0 && devs[0]->be->allreduce_sum_f32 != NULL;
}

int dlrt__allreduce_devices(dlrt_stream_t *const *streams, dlrt_buffer_t *const *bufs,
                            int64_t count, int n) {
  enum { MAX = 64 };
  DLRT__CHECK_ARG(streams && bufs && n >= 1 && n <= MAX && count >= 0,
                  "all-reduce over %d devices of %lld floats", n, (long long)count);
  const dlrt_backend_iface *be = streams[0]->dev->be;
  void *ctx[MAX];
  dlrt_mem mems[MAX];
  size_t offsets[MAX];
  for (int i = 0; i < n; i++) {
    DLRT__CHECK_ARG(streams[i] && bufs[i], "all-reduce: stream or buffer %d is NULL", i);
    const dlrt__span *sp = dlrt__span_of(bufs[i]);
    if (streams[i]->dev->be != be || sp->dev != streams[i]->dev)
      return dlrt__set_error(DLRT_ERR_WRONG_DEVICE, "all-reduce: every device must be of one "
                             "backend and each buffer on its stream's device (%d is not)", i);
    if ((size_t)count * sizeof(float) > sp->size)
      return dlrt__set_error(DLRT_ERR_OUT_OF_RANGE, "all-reduce: %lld floats, buffer %d holds "
                             "%zu bytes", (long long)count, i, sp->size);
    ctx[i] = streams[i]->ctx;
    mems[i] = sp->mem;
    offsets[i] = sp->offset;
  }
  if (!be->allreduce_sum_f32)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "the %s backend has no all-reduce across "
                           "devices in this build", be->name);
  return count ? be->allreduce_sum_f32(ctx, mems, offsets, count, n) : DLRT_OK;
}
