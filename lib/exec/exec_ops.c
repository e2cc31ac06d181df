/* exec_ops.c — what each graph node queues on the executor's stream: the
 * public ops of lib/device (GEMM, elementwise, reduce, transpose) or a kernel
 * of kernels/ through the launch builder. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "exec/exec.h"
#include "util/status.h"


/* Where t's elements start in its owner's buffer, in bytes (views). */
static size_t off(const dlrt_tensor_t *t) { return (size_t)t->offset * dlrt_dtype_size(t->dtype); }

static void arg(dlrt__launcher *lb, dlrt_exec_t *e, const dlrt_tensor_t *t) {
  dlrt__launch_buffer_arg(lb, dlrt__exec_buf(e, t), off(t), dlrt_dtype_size(t->dtype));
}

/* Starts a launch of `kernel` over `items` indices (or `groups` groups). */
static void start(dlrt__launcher *lb, dlrt_exec_t *e, int kernel, int64_t items,
                  int64_t groups) {
  dlrt__launch_start(lb, e->stream, "graph");
  lb->launch.kernel = kernel;
  lb->launch.items = items;
  lb->launch.groups = groups;
}

/* y[o, y_start + j, i] = x[o, x_start + j, i] for j < count. */
static void start_axis_copy(dlrt__launcher *lb, dlrt_exec_t *e, const dlrt_tensor_t *y,
                            const dlrt_tensor_t *x, int64_t outer, int64_t inner, int64_t y_axis,
                            int64_t x_axis, int64_t y_start, int64_t x_start, int64_t count) {
  start(lb, e, DLRT__K_axis_copy, outer * count, 0);
  lb->launch.item_cost = inner;
  arg(lb, e, y), arg(lb, e, x);
  dlrt__launch_i64(lb, outer), dlrt__launch_i64(lb, inner), dlrt__launch_i64(lb, y_axis);
  dlrt__launch_i64(lb, x_axis), dlrt__launch_i64(lb, y_start), dlrt__launch_i64(lb, x_start);
  dlrt__launch_i64(lb, count);
}

/* y = the strided view a, dense. The view's dimensions are merged first
 * (unit ones dropped; neighbours that walk memory as one dimension joined):
 * transposed matrices go to the tiled transpose, the rest to the gather
 * kernel, which takes four (a slice or a transpose of axes of a dense
 * tensor needs at most three). */
static int run_gather(dlrt_exec_t *e, const dlrt_tensor_t *y, const dlrt_tensor_t *a) {
  enum { DIMS = DLRT__GATHER_DIMS };
  int64_t n[DLRT_MAX_DIMS + DIMS], t[DLRT_MAX_DIMS + DIMS];
  int d = dlrt__view_dims(a, n, t);
  size_t es = dlrt_dtype_size(a->dtype);
  if (d > DIMS || (es != 4 && es != 2)) /* dlrt__graph_layout refuses these first */
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "graph: %s is a view dlrt cannot copy dense",
                           a->name);
  if (a->numel == 0) return DLRT_OK;
  /* A matrix, or a batch of them, whose storage is the transpose (merged
   * strides (rows cols,) 1, cols): the tiled transpose moves it fastest,
   * both its reads and its writes along rows. As stored: rows n[d-1],
   * cols n[d-2]. */
  if ((d == 2 || d == 3) && t[d - 2] == 1 && t[d - 1] == n[d - 2] &&
      (d == 2 || t[0] == n[1] * n[2]))
    return dlrt_transpose(e->stream, a->dtype, d == 3 ? n[0] : 1, n[d - 1], n[d - 2],
                          dlrt__exec_buf(e, y), off(y), dlrt__exec_buf(e, a), off(a));
  int pad = DIMS - d;
  memmove(n + pad, n, (size_t)d * sizeof *n);
  memmove(t + pad, t, (size_t)d * sizeof *t);
  for (int i = 0; i < pad; i++) n[i] = 1, t[i] = 0;
  dlrt__launcher lb;
  start(&lb, e, es == 4 ? DLRT__K_gather_b32 : DLRT__K_gather_b16, n[0] * n[1] * n[2], 0);
  lb.launch.item_cost = n[3];
  arg(&lb, e, y), arg(&lb, e, a);
  dlrt__launch_i64(&lb, n[0] * n[1] * n[2]);
  for (int i = 1; i < DIMS; i++) dlrt__launch_i64(&lb, n[i]);
  for (int i = 0; i < DIMS; i++) dlrt__launch_i64(&lb, t[i]);
  return dlrt__launch_submit(e->stream, &lb);
}

/* The kernel of typed.h for a storage type: `f32_kernel` is its f32 id
 * (DLRT__K_<name>_f32); the others follow in dlrt_dtype order. */
static int typed(int f32_kernel, dlrt_dtype dtype) { return f32_kernel + (int)dtype; }

/* A, B and C share one type (the graph's precision pass sees to it); 16-bit
 * types accumulate in fp32. */
static int run_gemm(dlrt_exec_t *e, dlrt_tensor_t *a, dlrt_tensor_t *b, dlrt_tensor_t *c,
                    const int64_t *p) {
  /* p: ta tb m n k batch stride_a stride_b stride_c */
  dlrt_gemm_desc d = dlrt_gemm_desc_make(c->dtype, (int)p[0], (int)p[1], p[2], p[3], p[4],
                                         1.0f, 0.0f);
  d.batch = p[5];
  d.stride_a = p[6];
  d.stride_b = p[7];
  d.stride_c = p[8];
  return dlrt_gemm(e->stream, &d, dlrt__exec_buf(e, a), off(a), dlrt__exec_buf(e, b), off(b), dlrt__exec_buf(e, c), off(c));
}

/* im2col (cols from x) or col2im (dx from cols) of images [b0, b0 + nb):
 * cols is the node's workspace, CKK x (nb x OHW). p: the geometry. */
static int conv_columns(dlrt_exec_t *e, int to_cols, dlrt_tensor_t *image, dlrt_tensor_t *cols,
                        const int64_t *p, int64_t b0, int64_t nb) {
  dlrt__launcher lb;
  int64_t c = p[1], h = p[2], kh = p[4], kw = p[5], ohw = p[9] * p[10];
  /* Items: an image plane of one cols row (oh x ow) for im2col, an image
   * row (w) for col2im. */
  start(&lb, e, typed(to_cols ? DLRT__K_im2col_f32 : DLRT__K_col2im_f32, cols->dtype),
        to_cols ? c * kh * kw * nb : c * nb * h, 0);
  lb.launch.item_cost = to_cols ? ohw : p[3] * kh * kw;
  if (to_cols)
    arg(&lb, e, cols), arg(&lb, e, image);
  else
    arg(&lb, e, image), arg(&lb, e, cols);
  for (int i = 0; i < 12; i++) dlrt__launch_i64(&lb, p[i]);
  dlrt__launch_i64(&lb, b0), dlrt__launch_i64(&lb, nb);
  return dlrt__launch_submit(e->stream, &lb);
}

/* Whether tensor t holds only the chunk's images (chunked blocks). */
static int chunk_local(const dlrt__chunk *c, const dlrt_tensor_t *t) {
  return c && c->local[t->owner->id];
}

/* A per-batch count (elements, planes, columns) for the images a chunked
 * block's chunk holds. */
static int64_t in_chunk(const dlrt__chunk *c, int64_t whole) {
  return c ? whole / c->n * c->nb : whole;
}

/* A convolution node, a chunk of images at a time (the workspace's columns
 * are chunk x OHW). y and dy are CNHW: O x (N x OHW), a chunk's columns
 * start at b0 x OHW, so each GEMM reads or writes its block of them in
 * place with the leading dimension N x OHW.
 *   forward: cols = im2col(x[b0..]); y[:, b0..] = W cols
 *   dW:      per piece q0 of dlrt__conv_weight_piece images:
 *            cols = im2col(x[q0..]); dW (+)= dy[:, q0..] cols^T (beta 1 after the first)
 *   dx:      cols = W^T dy[:, b0..]; dx[b0..] = col2im(cols)
 * In a chunked block (c) the node covers images [c->b0, c->b0 + c->nb) of
 * the batch, and x, y or dy may hold only those. A block's chunk is a whole
 * number of weight pieces, so dW sums in the same order, bit for bit. A
 * block of as many images as the node's chunk runs the same forward and dx
 * GEMMs too; one of fewer (spilling: dlrt__spill_fit) runs GEMMs of fewer
 * columns, which reduce over channels only: the same sums for each column
 * with PoCL's kernels, rounding differences with OpenBLAS's. */
static int run_conv(dlrt_exec_t *e, node *n, const dlrt__chunk *c) {
  const int64_t *p = n->p;
  dlrt_tensor_t *ws = n->out[1], *w = n->op == OP_CONV_GRAD_W ? n->out[0] : n->in[1];
  dlrt_tensor_t *x = n->op == OP_CONV_GRAD_X ? n->out[0] : n->op == OP_CONV ? n->in[0] : n->in[1];
  dlrt_tensor_t *y = n->op == OP_CONV ? n->out[0] : n->in[0];
  int64_t batch = p[0], ohw = p[9] * p[10], ckk = p[1] * p[4] * p[5], o = w->shape[0];
  int64_t chunk = ws->shape[1] / ohw;
  int64_t first = c ? c->b0 : 0, end = c ? c->b0 + c->nb : batch;
  /* Images each of x and y holds, and the batch index of its first. */
  int64_t x_held = chunk_local(c, x) ? c->nb : batch, x_first = chunk_local(c, x) ? c->b0 : 0;
  int64_t y_held = chunk_local(c, y) ? c->nb : batch, y_first = chunk_local(c, y) ? c->b0 : 0;
  int64_t geometry[12];
  memcpy(geometry, p, sizeof geometry);
  geometry[0] = x_held;
  size_t es = dlrt_dtype_size(y->dtype);
  int rc = DLRT_OK;
  for (int64_t b0 = first; b0 < end && rc == DLRT_OK; b0 += chunk) {
    int64_t nb = end - b0 < chunk ? end - b0 : chunk, cols = nb * ohw;
    size_t y_at = off(y) + (size_t)((b0 - y_first) * ohw) * es;
    dlrt_gemm_desc d;
    if (n->op == OP_CONV_GRAD_X) {
      d = dlrt_gemm_desc_make(y->dtype, 1, 0, ckk, cols, o, 1.0f, 0.0f);
      d.ldb = y_held * ohw;
      rc = dlrt_gemm(e->stream, &d, dlrt__exec_buf(e, w), off(w), dlrt__exec_buf(e, y), y_at,
                     dlrt__exec_buf(e, ws), off(ws));
      if (rc == DLRT_OK) rc = conv_columns(e, 0, x, ws, geometry, b0 - x_first, nb);
      continue;
    }
    if (n->op == OP_CONV) {
      if ((rc = conv_columns(e, 1, x, ws, geometry, b0 - x_first, nb)) < 0) break;
      d = dlrt_gemm_desc_make(y->dtype, 0, 0, o, cols, ckk, 1.0f, 0.0f);
      d.ldc = y_held * ohw;
      rc = dlrt_gemm(e->stream, &d, dlrt__exec_buf(e, w), off(w), dlrt__exec_buf(e, ws), off(ws),
                     dlrt__exec_buf(e, y), y_at);
      continue;
    }
    /* dW: in pieces at fixed images of the batch, whatever the chunk. */
    int64_t piece = dlrt__conv_weight_piece(o, ckk, ohw, chunk);
    for (int64_t q0 = b0; q0 < b0 + nb && rc == DLRT_OK; q0 += piece) {
      int64_t nq = b0 + nb - q0 < piece ? b0 + nb - q0 : piece;
      if ((rc = conv_columns(e, 1, x, ws, geometry, q0 - x_first, nq)) < 0) break;
      d = dlrt_gemm_desc_make(y->dtype, 0, 1, o, ckk, nq * ohw, 1.0f, q0 ? 1.0f : 0.0f);
      d.lda = y_held * ohw;
      rc = dlrt_gemm(e->stream, &d, dlrt__exec_buf(e, y),
                     off(y) + (size_t)((q0 - y_first) * ohw) * es, dlrt__exec_buf(e, ws), off(ws),
                     dlrt__exec_buf(e, w), off(w));
    }
  }
  return rc;
}

/* A convolution bias's gradient (CNHW dy: C x images x spatial): each
 * (channel, image) plane summed, then each channel's planes in image order,
 * onto what earlier chunks of the batch summed (c, after the first). */
static int run_bias_grad(dlrt_exec_t *e, node *n, const dlrt__chunk *c) {
  dlrt_tensor_t *s = n->out[0], *dy = n->in[0];
  int64_t images = n->p[3], channels = n->p[1], spatial = n->p[2] / images;
  int64_t held = c ? c->nb : images, rows = channels * held;
  dlrt_buffer_t *parts;
  int rc = dlrt_buffer_alloc(e->dev, (size_t)(rows ? rows : 1) * sizeof(float), e->stream, &parts);
  if (rc < 0) return rc;
  dlrt__launcher lb;
  start(&lb, e, typed(DLRT__K_sum_planes_f32, dy->dtype), rows, 0);
  lb.launch.item_cost = spatial;
  dlrt__launch_buffer_arg(&lb, parts, 0, sizeof(float)), arg(&lb, e, dy);
  dlrt__launch_i64(&lb, rows), dlrt__launch_i64(&lb, spatial);
  rc = dlrt__launch_submit(e->stream, &lb);
  if (rc == DLRT_OK) {
    start(&lb, e, typed(DLRT__K_sum_parts_f32, s->dtype), channels, 0);
    lb.launch.item_cost = held;
    arg(&lb, e, s), dlrt__launch_buffer_arg(&lb, parts, 0, sizeof(float));
    dlrt__launch_i64(&lb, channels), dlrt__launch_i64(&lb, held);
    dlrt__launch_i64(&lb, c && c->b0 > 0);
    rc = dlrt__launch_submit(e->stream, &lb);
  }
  dlrt_buffer_free(parts); /* stream-ordered: reused only after these kernels */
  return rc;
}

int dlrt__exec_run_node(dlrt_exec_t *e, node *n) { return dlrt__exec_run_node_chunk(e, n, NULL); }

int dlrt__exec_run_node_chunk(dlrt_exec_t *e, node *n, const dlrt__chunk *c) {
  dlrt__launcher lb;
  dlrt_tensor_t *y = n->n_out ? n->out[0] : NULL, *a = n->in[0], *b = n->in[1];
  const int64_t *p = n->p;
  switch (n->op) {
  case OP_VIEW: return DLRT_OK;
  case OP_CONTIGUOUS:
    if (dlrt__contiguous(a)) /* dense already, at an offset: a copy from there */
      return dlrt_copy_d2d(dlrt__exec_buf(e, y), off(y), dlrt__exec_buf(e, a), off(a),
                           dlrt__tensor_bytes(a), e->stream);
    return run_gather(e, y, a);
  case OP_FILL: {
    /* The seed of the backward pass (p[0] set) carries the loss scale. */
    float value = n->p[0] ? n->f[0] * e->grads.loss_scale : n->f[0];
    return dlrt_elementwise(e->stream, DLRT_EW_FILL, y->dtype, y->numel, value,
                            dlrt__exec_buf(e, y), off(y), NULL, 0, NULL, 0);
  }
  case OP_CAST:
    return dlrt_cast(e->stream, y->numel, dlrt__exec_buf(e, y), off(y), y->dtype, dlrt__exec_buf(e, a),
                     off(a), a->dtype);
  case OP_RELU:
    return dlrt_elementwise(e->stream, DLRT_EW_RELU, y->dtype, in_chunk(c, y->numel), 0,
                            dlrt__exec_buf(e, y), off(y), dlrt__exec_buf(e, a), off(a), NULL, 0);
  case OP_ADD:
  case OP_MUL:
    return dlrt_elementwise(e->stream, n->op == OP_ADD ? DLRT_EW_ADD : DLRT_EW_MUL, y->dtype,
                            y->numel, 0, dlrt__exec_buf(e, y), off(y), dlrt__exec_buf(e, a), off(a), dlrt__exec_buf(e, b), off(b));
  case OP_SCALE:
    return dlrt_elementwise(e->stream, DLRT_EW_SCALE, y->dtype, y->numel, n->f[0], dlrt__exec_buf(e, y),
                            off(y), dlrt__exec_buf(e, a), off(a), NULL, 0);
  case OP_SUM:
    return dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, 1, a->numel, dlrt__exec_buf(e, y), off(y),
                       dlrt__exec_buf(e, a), off(a));
  case OP_BMM: {
    int64_t q[9] = {p[0], p[1], p[2], p[3], p[4], p[5] ? p[5] : 1, p[6], p[7], p[8]};
    return run_gemm(e, a, b, y, q);
  }
  case OP_CONV:
  case OP_CONV_GRAD_W:
  case OP_CONV_GRAD_X:
    return run_conv(e, n, c);
  case OP_PERMUTE:
    start(&lb, e, typed(DLRT__K_swap01_f32, y->dtype), p[0] * p[1], 0);
    lb.launch.item_cost = p[2];
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_i64(&lb, p[2]);
    break;
  case OP_BIAS_ROWS:
    start(&lb, e, typed(DLRT__K_bias_rows_f32, y->dtype), y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]);
    break;
  case OP_BIAS_CHANNELS: {
    int64_t spatial = in_chunk(c, p[2]); /* chunks: CNHW, p[0] = 1 */
    start(&lb, e, typed(DLRT__K_bias_channels_f32, y->dtype), p[0] * p[1], 0);
    lb.launch.item_cost = spatial;
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_i64(&lb, spatial);
    break;
  }
  case OP_RELU_GRAD:
    start(&lb, e, typed(DLRT__K_relu_grad_f32, y->dtype), y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, y->numel);
    break;
  case OP_BROADCAST:
    start(&lb, e, DLRT__K_broadcast_scalar, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_f32(&lb, n->f[0]), dlrt__launch_i64(&lb, y->numel);
    break;
  case OP_SUM_COLS:
    start(&lb, e, typed(DLRT__K_sum_cols_f32, y->dtype), p[1], 0);
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_f32(&lb, 0.0f);
    break;
  case OP_SUM_CHANNELS:
    if (p[3] > 0) return run_bias_grad(e, n, c); /* a convolution's bias (CNHW, p[3] images) */
    /* One image (CNHW): a row reduction, spread over the whole device. */
    if (p[0] == 1)
      return dlrt_reduce(e->stream, DLRT_REDUCE_SUM, y->dtype, p[1], p[2], dlrt__exec_buf(e, y), off(y),
                         dlrt__exec_buf(e, a), off(a));
    start(&lb, e, typed(DLRT__K_sum_channels_f32, y->dtype), p[1], 0);
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_i64(&lb, p[2]);
    break;
  case OP_MAXPOOL:
  case OP_MAXPOOL_GRAD: {
    /* Planes on the image side (x, dx; a chunk's own in chunked blocks),
     * and how they map onto the pooled side's (y, argmax, dy): the same
     * ones, or the chunk's among the whole batch's. */
    int64_t planes = in_chunk(c, p[0]);
    const dlrt_tensor_t *pooled = n->op == OP_MAXPOOL ? y : a;
    int64_t pn = planes, pN = planes, pb0 = 0;
    if (c && !chunk_local(c, pooled)) pn = c->nb, pN = c->n, pb0 = c->b0;
    if (n->op == OP_MAXPOOL) {
      start(&lb, e, typed(DLRT__K_maxpool_f32, y->dtype), planes, 0);
      lb.launch.item_cost = p[5] * p[6] * p[3] * p[3];
      arg(&lb, e, y), arg(&lb, e, n->out[1]), arg(&lb, e, a);
    } else {
      if (p[4] >= p[3]) {
        /* Disjoint windows: zero dx, then each window writes its maximum. */
        int rc = dlrt_elementwise(e->stream, DLRT_EW_FILL, y->dtype, in_chunk(c, y->numel), 0.0f,
                                  dlrt__exec_buf(e, y), off(y), NULL, 0, NULL, 0);
        if (rc < 0) return rc;
        start(&lb, e, typed(DLRT__K_maxpool_scatter_f32, y->dtype), planes * p[5], 0); /* output rows */
        lb.launch.item_cost = p[6];
      } else {
        start(&lb, e, typed(DLRT__K_maxpool_grad_f32, y->dtype), planes * p[1], 0); /* input rows */
        lb.launch.item_cost = p[2] * p[3];
      }
      /* Fused with a ReLU's gradient (p[7]): the maximum's sign is the mask,
       * in the argmax byte or (windows over 128 places) the pooled output. */
      arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b), arg(&lb, e, n->n_in > 2 ? n->in[2] : a);
    }
    dlrt__launch_i64(&lb, planes);
    for (int i = 1; i < (n->op == OP_MAXPOOL ? 7 : 8); i++) dlrt__launch_i64(&lb, p[i]);
    dlrt__launch_i64(&lb, pn), dlrt__launch_i64(&lb, pN), dlrt__launch_i64(&lb, pb0);
    break;
  }
  case OP_XENT: {
    /* Per-row losses and d logits in one pass, then the mean. */
    start(&lb, e, DLRT__K_softmax_xent, 0, p[0]);
    arg(&lb, e, a), arg(&lb, e, b), arg(&lb, e, n->out[1]), arg(&lb, e, n->out[2]);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]);
    /* d logits of the mean loss, times the loss scale (mixed precision). */
    dlrt__launch_f32(&lb, n->f[0]), dlrt__launch_f32(&lb, e->grads.loss_scale / (float)p[0]);
    int rc = dlrt__launch_submit(e->stream, &lb);
    if (rc == DLRT_OK)
      rc = dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, 1, p[0], dlrt__exec_buf(e, y), off(y),
                       dlrt__exec_buf(e, n->out[1]), off(n->out[1]));
    if (rc == DLRT_OK)
      rc = dlrt_elementwise(e->stream, DLRT_EW_SCALE, DLRT_F32, 1, 1.0f / (float)p[0],
                            dlrt__exec_buf(e, y), off(y), dlrt__exec_buf(e, y), off(y), NULL, 0);
    return rc;
  }
  case OP_SUB:
  case OP_DIV:
    start(&lb, e, n->op == OP_SUB ? DLRT__K_sub : DLRT__K_div, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, y->numel);
    break;
  case OP_DIV_GRAD_Z:
    start(&lb, e, DLRT__K_div_grad_z, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b), arg(&lb, e, n->in[2]);
    dlrt__launch_i64(&lb, y->numel);
    break;
  case OP_ACT:
    start(&lb, e, DLRT__K_activation, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, y->numel), dlrt__launch_i64(&lb, p[0]);
    break;
  case OP_ACT_GRAD:
    start(&lb, e, DLRT__K_activation_grad, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, y->numel), dlrt__launch_i64(&lb, p[0]);
    break;
  case OP_SOFTMAX:
  case OP_SOFTMAX_GRAD:
    start(&lb, e, n->op == OP_SOFTMAX ? DLRT__K_softmax : DLRT__K_softmax_grad, 0, p[0]);
    arg(&lb, e, y), arg(&lb, e, a);
    if (n->op == OP_SOFTMAX_GRAD) arg(&lb, e, b);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]);
    break;
  case OP_AVGPOOL:
  case OP_AVGPOOL_GRAD:
    start(&lb, e, n->op == OP_AVGPOOL ? DLRT__K_avgpool : DLRT__K_avgpool_grad, p[0], 0);
    lb.launch.item_cost = p[1] * p[2] * p[3];
    arg(&lb, e, y), arg(&lb, e, a);
    for (int i = 0; i < 7; i++) dlrt__launch_i64(&lb, p[i]);
    break;
  case OP_DROPOUT: {
    /* Evaluation passes values through; training draws a mask per step. */
    if (e->mode == DLRT_RUN_FORWARD || n->f[0] == 0.0f)
      return dlrt_elementwise(e->stream, DLRT_EW_SCALE, DLRT_F32, y->numel, 1.0f, dlrt__exec_buf(e, y), off(y),
                              dlrt__exec_buf(e, a), off(a), NULL, 0);
    uint64_t seed = e->seed ^ ((uint64_t)e->steps * 0x9e3779b97f4a7c15ULL) ^
                    ((uint64_t)p[0] * 0xbf58476d1ce4e5b9ULL);
    start(&lb, e, DLRT__K_dropout, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, y->numel), dlrt__launch_i64(&lb, (int64_t)(seed & INT64_MAX));
    dlrt__launch_i64(&lb, (int64_t)((double)n->f[0] * 4294967296.0));
    dlrt__launch_f32(&lb, 1.0f / (1.0f - n->f[0]));
    break;
  }
  case OP_NORM:
    if (p[3] && e->mode == DLRT_RUN_FORWARD) {
      /* Batch norm when evaluating: the running statistics. */
      start(&lb, e, DLRT__K_norm_rows_eval, p[0], 0);
      lb.launch.item_cost = p[1];
      arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, n->in[3]), arg(&lb, e, n->in[4]);
      arg(&lb, e, b), arg(&lb, e, n->in[2]);
      dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_f32(&lb, n->f[0]);
      break;
    }
    start(&lb, e, DLRT__K_norm_rows, 0, p[0]);
    arg(&lb, e, y), arg(&lb, e, n->out[1]), arg(&lb, e, n->out[2]), arg(&lb, e, a);
    arg(&lb, e, b), arg(&lb, e, n->in[2]);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_f32(&lb, n->f[0]);
    dlrt__launch_i64(&lb, p[2]);
    break;
  case OP_NORM_GRAD:
    start(&lb, e, DLRT__K_norm_rows_grad, 0, p[0]);
    arg(&lb, e, y);
    for (int i = 0; i < 5; i++) arg(&lb, e, n->in[i]);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_i64(&lb, p[2]);
    break;
  case OP_NORM_AFFINE_GRAD:
    start(&lb, e, DLRT__K_norm_affine_grad, p[2] ? p[0] : p[1], 0);
    lb.launch.item_cost = p[2] ? p[1] : p[0];
    arg(&lb, e, y), arg(&lb, e, n->out[1]);
    for (int i = 0; i < 4; i++) arg(&lb, e, n->in[i]);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_i64(&lb, p[2]);
    break;
  case OP_BN_RUNNING:
    if (e->mode == DLRT_RUN_FORWARD) return DLRT_OK;
    start(&lb, e, DLRT__K_bn_running, p[0], 0);
    arg(&lb, e, n->in[2]), arg(&lb, e, n->in[3]), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]);
    dlrt__launch_f32(&lb, n->f[1]), dlrt__launch_f32(&lb, n->f[0]);
    break;
  case OP_CONCAT: {
    /* One copy per input into its stretch of the axis. */
    int axis = (int)p[3];
    int64_t start = 0;
    for (int i = 0; i < n->n_in; i++) {
      int64_t len = n->in[i]->shape[axis];
      start_axis_copy(&lb, e, y, n->in[i], p[0], p[1], p[2], len, start, 0, len);
      int rc = dlrt__launch_submit(e->stream, &lb);
      if (rc < 0) return rc;
      start += len;
    }
    return DLRT_OK;
  }
  case OP_SLICE: return DLRT_OK; /* a view: nothing moves */
  case OP_SLICE_GRAD: {
    int rc = dlrt_elementwise(e->stream, DLRT_EW_FILL, DLRT_F32, y->numel, 0.0f, dlrt__exec_buf(e, y), off(y),
                              NULL, 0, NULL, 0);
    if (rc < 0) return rc;
    start_axis_copy(&lb, e, y, a, p[0], p[1], p[2], p[4], p[3], 0, p[4]);
    break;
  }
  case OP_AXIS_SUM:
  case OP_AXIS_EXPAND:
    if (n->op == OP_AXIS_SUM && p[2] == 1)
      /* Summing a contiguous last axis: the device-wide row reduction. */
      if (n->f[0] == 1.0f)
        return dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, p[0], p[1], dlrt__exec_buf(e, y), off(y),
                           dlrt__exec_buf(e, a), off(a));
    start(&lb, e, n->op == OP_AXIS_SUM ? DLRT__K_axis_sum : DLRT__K_axis_expand,
          n->op == OP_AXIS_SUM ? p[0] * p[2] : p[0] * p[1], 0);
    lb.launch.item_cost = n->op == OP_AXIS_SUM ? p[1] : p[2];
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_i64(&lb, p[2]);
    dlrt__launch_f32(&lb, n->f[0]);
    break;
  case OP_BCAST:
  case OP_BCAST_GRAD_B:
    start(&lb, e, n->op == OP_BCAST ? DLRT__K_bcast : DLRT__K_bcast_grad_b, p[0], 0);
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    if (n->op == OP_BCAST_GRAD_B) arg(&lb, e, n->in[2]);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_i64(&lb, p[2]);
    break;
  case OP_EMBED:
  case OP_EMBED_GRAD:
    start(&lb, e, n->op == OP_EMBED ? DLRT__K_embedding : DLRT__K_embedding_grad,
          n->op == OP_EMBED ? p[0] : p[1], 0);
    lb.launch.item_cost = n->op == OP_EMBED ? p[2] : p[0] * p[2];
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, p[0]), dlrt__launch_i64(&lb, p[1]), dlrt__launch_i64(&lb, p[2]);
    break;
  case OP_SGD: {
    const dlrt_optimizer *o = &e->g->opt;
    start(&lb, e, DLRT__K_sgd_update, a->numel, 0);
    arg(&lb, e, a), arg(&lb, e, b), arg(&lb, e, n->in[2]);
    dlrt__launch_i64(&lb, a->numel), dlrt__launch_f32(&lb, e->lr);
    dlrt__launch_f32(&lb, o->momentum), dlrt__launch_f32(&lb, o->weight_decay);
    dlrt__launch_f32(&lb, e->grads.grad_scale), dlrt__launch_i64(&lb, o->nesterov);
    dlrt__launch_i64(&lb, e->steps == 0);
    break;
  }
  case OP_ADAM: {
    const dlrt_optimizer *o = &e->g->opt;
    float step_size, bias2;
    dlrt__adam_factors(e, &step_size, &bias2);
    start(&lb, e, DLRT__K_adam_update, a->numel, 0);
    arg(&lb, e, a), arg(&lb, e, b), arg(&lb, e, n->in[2]), arg(&lb, e, n->in[3]);
    dlrt__launch_i64(&lb, a->numel), dlrt__launch_f32(&lb, e->lr);
    dlrt__launch_f32(&lb, o->beta1), dlrt__launch_f32(&lb, o->beta2);
    dlrt__launch_f32(&lb, o->eps), dlrt__launch_f32(&lb, o->weight_decay);
    dlrt__launch_f32(&lb, step_size), dlrt__launch_f32(&lb, bias2),
    dlrt__launch_f32(&lb, e->grads.grad_scale);
    dlrt__launch_i64(&lb, o->kind == DLRT_OPT_ADAMW);
    break;
  }
  default:
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "graph: no executor for %s",
                           dlrt__op_name(n->op));
  }
  return dlrt__launch_submit(e->stream, &lb);
}
