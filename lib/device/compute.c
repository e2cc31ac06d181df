/* compute.c — argument checking and dispatch of GEMM and elementwise ops to
 * the stream's backend. Backends may assume valid, in-range arguments. */
#include "config.h"

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
  DLRT__CHECK_ARG(buf, "dlrt_gemm: %s is NULL", what);
  if (buf->dev != dev)
    return dlrt__set_error(DLRT_ERR_WRONG_DEVICE, "dlrt_gemm: %s is on %s but the stream is "
                           "on %s", what, buf->dev->spec, dev->spec);
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
  if (need > (double)buf->size)
    return dlrt__set_error(DLRT_ERR_OUT_OF_RANGE, "dlrt_gemm: %s (%lld x %lld, ld %lld, "
                           "batch %lld, stride %lld) needs %.0f bytes from offset %zu; the "
                           "buffer has %zu", what, (long long)rows, (long long)cols,
                           (long long)ld, (long long)batch, (long long)stride, need, offset,
                           buf->size);
  return DLRT_OK;
}

int dlrt_gemm(dlrt_stream_t *stream, const dlrt_gemm_desc *d, dlrt_buffer_t *a,
              size_t a_offset, dlrt_buffer_t *b, size_t b_offset, dlrt_buffer_t *c,
              size_t c_offset) {
  DLRT__CHECK_ARG(stream && d, "dlrt_gemm: stream or descriptor is NULL");
  DLRT__CHECK_ARG(d->m >= 0 && d->n >= 0 && d->k >= 0, "dlrt_gemm: negative size "
                  "(m %lld, n %lld, k %lld)", (long long)d->m, (long long)d->n, (long long)d->k);
  DLRT__CHECK_ARG(d->batch >= 1, "dlrt_gemm: batch is %lld, must be >= 1", (long long)d->batch);
  DLRT__CHECK_ARG(d->dtype == DLRT_F32 || d->dtype == DLRT_F16 || d->dtype == DLRT_BF16,
                  "dlrt_gemm: dtype %s is not a floating-point type", dlrt_dtype_name(d->dtype));
  dlrt_device_t *dev = stream->dev;
  size_t es = dlrt_dtype_size(d->dtype);
  int rc;
  if ((rc = check_matrix("A", a, a_offset, d->trans_a ? d->k : d->m, d->trans_a ? d->m : d->k,
                         d->lda, d->stride_a, d->batch, es, dev)) < 0 ||
      (rc = check_matrix("B", b, b_offset, d->trans_b ? d->n : d->k, d->trans_b ? d->k : d->n,
                         d->ldb, d->stride_b, d->batch, es, dev)) < 0 ||
      (rc = check_matrix("C", c, c_offset, d->m, d->n, d->ldc, d->stride_c, d->batch, es, dev)) < 0)
    return rc;
  DLRT__CHECK_ARG(d->batch == 1 || d->stride_c >= d->m * d->ldc, "dlrt_gemm: stride of C "
                  "(%lld) is less than one C matrix (%lld): batches would overlap",
                  (long long)d->stride_c, (long long)(d->m * d->ldc));
  if (!dev->be->gemm)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "dlrt_gemm: the %s backend has no GEMM in "
                           "this build", dev->be->name);
  if (d->m == 0 || d->n == 0) return DLRT_OK;
  return dev->be->gemm(stream->ctx, d, a->mem, a->offset + a_offset, b->mem,
                       b->offset + b_offset, c->mem, c->offset + c_offset);
}

const char *dlrt_ew_op_name(dlrt_ew_op op) {
  static const char *const names[DLRT_EW_COUNT_] = {"fill", "scale", "axpy", "add", "mul", "relu"};
  return op >= 0 && op < DLRT_EW_COUNT_ ? names[op] : "unknown";
}

/* Which operands each op reads besides y: bit 0 x, bit 1 z. */
static int ew_inputs(dlrt_ew_op op) {
  switch (op) {
  case DLRT_EW_FILL: return 0;
  case DLRT_EW_SCALE: case DLRT_EW_AXPY: case DLRT_EW_RELU: return 1;
  case DLRT_EW_ADD: case DLRT_EW_MUL: return 3;
  default: return -1;
  }
}

static int check_operand(const char *name, dlrt_buffer_t *buf, size_t offset, int64_t n,
                         dlrt_device_t *dev, dlrt_ew_op op) {
  DLRT__CHECK_ARG(buf, "dlrt_elementwise(%s): operand %s is NULL", dlrt_ew_op_name(op), name);
  if (buf->dev != dev)
    return dlrt__set_error(DLRT_ERR_WRONG_DEVICE, "dlrt_elementwise(%s): %s is on %s but the "
                           "stream is on %s", dlrt_ew_op_name(op), name, buf->dev->spec, dev->spec);
  DLRT__CHECK_ARG(offset % sizeof(float) == 0, "dlrt_elementwise(%s): offset %zu of %s is not "
                  "a multiple of 4", dlrt_ew_op_name(op), offset, name);
  if ((uint64_t)n > SIZE_MAX / sizeof(float) ||
      !dlrt__range_ok(offset, (size_t)n * sizeof(float), buf->size))
    return dlrt__set_error(DLRT_ERR_OUT_OF_RANGE, "dlrt_elementwise(%s): %lld floats of %s "
                           "from offset %zu do not fit its %zu bytes", dlrt_ew_op_name(op),
                           (long long)n, name, offset, buf->size);
  return DLRT_OK;
}

int dlrt_elementwise(dlrt_stream_t *stream, dlrt_ew_op op, int64_t n, float alpha,
                     dlrt_buffer_t *y, size_t y_offset, dlrt_buffer_t *x, size_t x_offset,
                     dlrt_buffer_t *z, size_t z_offset) {
  DLRT__CHECK_ARG(stream, "dlrt_elementwise: stream is NULL");
  int inputs = ew_inputs(op);
  DLRT__CHECK_ARG(inputs >= 0, "dlrt_elementwise: unknown op %d", (int)op);
  DLRT__CHECK_ARG(n >= 0, "dlrt_elementwise(%s): n is negative", dlrt_ew_op_name(op));
  dlrt_device_t *dev = stream->dev;
  int rc = check_operand("y", y, y_offset, n, dev, op);
  if (rc == DLRT_OK && (inputs & 1)) rc = check_operand("x", x, x_offset, n, dev, op);
  if (rc == DLRT_OK && (inputs & 2)) rc = check_operand("z", z, z_offset, n, dev, op);
  if (rc < 0) return rc;
  if (!dev->be->elementwise)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "dlrt_elementwise: the %s backend has no "
                           "elementwise kernels in this build", dev->be->name);
  if (n == 0) return DLRT_OK;
  dlrt_ew_args args = {.op = op, .n = n, .alpha = alpha, .y = y->mem, .y_off = y->offset + y_offset};
  if (inputs & 1) {
    args.x = x->mem;
    args.x_off = x->offset + x_offset;
  }
  if (inputs & 2) {
    args.z = z->mem;
    args.z_off = z->offset + z_offset;
  }
  return dev->be->elementwise(stream->ctx, &args);
}
