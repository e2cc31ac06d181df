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

/* A norm.h rows kernel for x (and dx) of type x and y (and dy) of type y
 * (kernel_table.h: DLRT__NORM_TYPED): both one type, or x fp32 and y 16-bit;
 * -1 for any other pair. */
static int norm_kernel(int f32_kernel, dlrt_dtype x, dlrt_dtype y) {
  if (x == y) return f32_kernel + (int)y;
  return x == DLRT_F32 && y != DLRT_F32 ? f32_kernel + 2 + (int)y : -1;
}

/* Refuses node n unless its first `count` floating operands (inputs, then
 * outputs) share a storage type: the typed kernels take one. */
static int one_type(const dlrt__node *n, int count, dlrt_dtype *type) {
  const dlrt_tensor_t *first = n->n_out ? n->out[0] : n->in[0];
  for (int j = 0; j < n->n_in + n->n_out && j < count; j++) {
    const dlrt_tensor_t *t = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
    if (t->dtype != first->dtype)
      return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "graph: %s of %s mixes storage types (%s "
                             "and %s); the precision pass gives its operands one type",
                             dlrt__op_name(n->op), first->name, dlrt_dtype_name(first->dtype),
                             dlrt_dtype_name(t->dtype));
  }
  *type = first->dtype;
  return DLRT_OK;
}

/* The norm.h kernel of node n reading x and y (or dy) of these types, or an
 * error naming them. */
static int norm_kernel_of(const dlrt__node *n, int f32_kernel, const dlrt_tensor_t *x,
                          const dlrt_tensor_t *y, int *kernel) {
  *kernel = norm_kernel(f32_kernel, x->dtype, y->dtype);
  if (*kernel < 0)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "graph: %s of %s reads %s and writes %s; "
                           "normalisation takes one type, or fp32 in and 16 bits out",
                           dlrt__op_name(n->op), x->name, dlrt_dtype_name(x->dtype),
                           dlrt_dtype_name(y->dtype));
  return DLRT_OK;
}

/* A and B share one type (the graph's precision pass sees to it), and C
 * too but for a 16-bit weight's gradient, which autodiff makes fp32 (the
 * cast back to its fp32 parameter saved); 16-bit types accumulate in fp32. */
static int run_gemm(dlrt_exec_t *e, dlrt_tensor_t *a, dlrt_tensor_t *b, dlrt_tensor_t *c,
                    const struct dlrt__bmm_params *p) {
  dlrt_gemm_desc d = dlrt_gemm_desc_make(a->dtype, (int)p->trans_a, (int)p->trans_b, p->m, p->n,
                                         p->k, 1.0f, 0.0f);
  d.c_f32 = c->dtype != a->dtype;
  d.batch = p->batch;
  d.stride_a = p->stride_a;
  d.stride_b = p->stride_b;
  d.stride_c = p->stride_c;
  return dlrt_gemm(e->stream, &d, dlrt__exec_buf(e, a), off(a), dlrt__exec_buf(e, b), off(b),
                   dlrt__exec_buf(e, c), off(c));
}

/* im2col (cols from x) or col2im (dx from cols) of images [b0, b0 + nb):
 * cols is the node's workspace, CKK x (nb x OHW). p: the geometry, p->n the
 * images `image` holds. */
static int conv_columns(dlrt_exec_t *e, int to_cols, dlrt_tensor_t *image, dlrt_tensor_t *cols,
                        const struct dlrt__conv_params *p, int64_t b0, int64_t nb) {
  dlrt__launcher lb;
  int64_t c = p->c, h = p->h, kh = p->kh, kw = p->kw, ohw = p->oh * p->ow;
  /* Items: an image plane of one cols row (oh x ow) for im2col, an image
   * row (w) for col2im. */
  start(&lb, e, typed(to_cols ? DLRT__K_im2col_f32 : DLRT__K_col2im_f32, cols->dtype),
        to_cols ? c * kh * kw * nb : c * nb * h, 0);
  lb.launch.item_cost = to_cols ? ohw : p->w * kh * kw;
  if (to_cols)
    arg(&lb, e, cols), arg(&lb, e, image);
  else
    arg(&lb, e, image), arg(&lb, e, cols);
  /* The kernels' geometry, in struct dlrt__conv_params's order. */
  dlrt__launch_i64(&lb, p->n), dlrt__launch_i64(&lb, p->c), dlrt__launch_i64(&lb, p->h);
  dlrt__launch_i64(&lb, p->w), dlrt__launch_i64(&lb, p->kh), dlrt__launch_i64(&lb, p->kw);
  dlrt__launch_i64(&lb, p->stride), dlrt__launch_i64(&lb, p->pad);
  dlrt__launch_i64(&lb, p->dilation), dlrt__launch_i64(&lb, p->oh), dlrt__launch_i64(&lb, p->ow);
  dlrt__launch_i64(&lb, p->x_cnhw);
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

/* Where a slice block's chunk of items [b0, b0 + nb) of t starts (chunk.c:
 * dlrt__slice_items): at 0 in its window when it moves in slices, else at
 * item b0 of its storage. */
static size_t item_off(dlrt_exec_t *e, const dlrt_tensor_t *t, const dlrt__chunk *c) {
  if (!c || (e->spill.windows && e->spill.windows[t->owner->id])) return off(t);
  return off(t) + dlrt__tensor_bytes(t) / (size_t)c->n * (size_t)c->b0;
}

static void arg_items(dlrt__launcher *lb, dlrt_exec_t *e, const dlrt_tensor_t *t,
                      const dlrt__chunk *c) {
  dlrt__launch_buffer_arg(lb, dlrt__exec_buf(e, t), item_off(e, t, c), dlrt_dtype_size(t->dtype));
}

/* A convolution node, a chunk of images at a time (the workspace's columns
 * are chunk x OHW). y and dy are CNHW: O x (N x OHW), a chunk's columns
 * start at b0 x OHW, so each GEMM reads or writes its block of them in
 * place with the leading dimension N x OHW.
 *   forward: cols = im2col(x[b0..]); per piece q0: y[:, q0..] = W cols[:, q0..]
 *   dW:      per piece q0 of dlrt__conv_weight_piece images:
 *            cols = im2col(x[q0..]); dW (+)= dy[:, q0..] cols^T (beta 1 after the first);
 *            in a 16-bit graph dW is fp32 (autodiff.c), so the pieces sum in fp32
 *   dx:      per piece q0: cols[:, q0..] = W^T dy[:, q0..]; dx[b0..] = col2im(cols)
 * In a chunked block (c) the node covers images [c->b0, c->b0 + c->nb) of
 * the batch, and x, y or dy may hold only those.
 * Every GEMM covers one piece (forward and dx too, whose columns are a
 * piece's images), so its shape does not depend on how many images a call
 * of the node covers: OpenBLAS's sgemm rounds a column differently for
 * another column count (M 32, K 9: 300 of 401,408 outputs differ between
 * N 12544 and 25088), its leading dimensions and offsets change nothing.
 * A block's chunk is a whole number of pieces (chunk.c), so a block of
 * fewer images than the node's chunk (spilling: dlrt__spill_fit) runs the
 * same GEMMs on the same images, and dW sums in the same order: the same
 * bits as the whole batch on the CPU and OpenCL backends. */
static int run_conv(dlrt_exec_t *e, dlrt__node *n, const dlrt__chunk *c) {
  const struct dlrt__conv_params *p = &n->conv;
  dlrt_tensor_t *ws = n->out[1], *w = n->op == DLRT__OP_CONV_GRAD_W ? n->out[0] : n->in[1];
  dlrt_tensor_t *x = n->op == DLRT__OP_CONV_GRAD_X ? n->out[0]
                     : n->op == DLRT__OP_CONV      ? n->in[0]
                                                   : n->in[1];
  dlrt_tensor_t *y = n->op == DLRT__OP_CONV ? n->out[0] : n->in[0];
  int64_t batch = p->n, ohw = p->oh * p->ow, ckk = p->c * p->kh * p->kw, o = w->shape[0];
  int64_t chunk = ws->shape[1] / ohw, piece = dlrt__conv_weight_piece(o, ckk, ohw, chunk);
  int64_t first = c ? c->b0 : 0, end = c ? c->b0 + c->nb : batch;
  /* Images each of x and y holds, and the batch index of its first. */
  int64_t x_held = chunk_local(c, x) ? c->nb : batch, x_first = chunk_local(c, x) ? c->b0 : 0;
  int64_t y_held = chunk_local(c, y) ? c->nb : batch, y_first = chunk_local(c, y) ? c->b0 : 0;
  struct dlrt__conv_params geometry = *p;
  geometry.n = x_held;
  size_t es = dlrt_dtype_size(y->dtype);
  int rc = DLRT_OK;
  for (int64_t b0 = first; b0 < end && rc == DLRT_OK; b0 += chunk) {
    int64_t nb = end - b0 < chunk ? end - b0 : chunk;
    dlrt_gemm_desc d;
    if (n->op != DLRT__OP_CONV_GRAD_W) {
      int forward = n->op == DLRT__OP_CONV;
      if (forward && (rc = conv_columns(e, 1, x, ws, &geometry, b0 - x_first, nb)) < 0) break;
      /* A piece's columns: of cols (CKK x nb OHW) and of y or dy (O x
       * y_held OHW), each in place with its own leading dimension. */
      for (int64_t q0 = b0; q0 < b0 + nb && rc == DLRT_OK; q0 += piece) {
        int64_t nq = b0 + nb - q0 < piece ? b0 + nb - q0 : piece;
        size_t y_at = off(y) + (size_t)((q0 - y_first) * ohw) * es;
        size_t cols_at = off(ws) + (size_t)((q0 - b0) * ohw) * dlrt_dtype_size(ws->dtype);
        if (forward) {
          d = dlrt_gemm_desc_make(y->dtype, 0, 0, o, nq * ohw, ckk, 1.0f, 0.0f);
          d.ldb = nb * ohw, d.ldc = y_held * ohw;
          rc = dlrt_gemm(e->stream, &d, dlrt__exec_buf(e, w), off(w), dlrt__exec_buf(e, ws),
                         cols_at, dlrt__exec_buf(e, y), y_at);
        } else {
          d = dlrt_gemm_desc_make(y->dtype, 1, 0, ckk, nq * ohw, o, 1.0f, 0.0f);
          d.ldb = y_held * ohw, d.ldc = nb * ohw;
          rc = dlrt_gemm(e->stream, &d, dlrt__exec_buf(e, w), off(w), dlrt__exec_buf(e, y), y_at,
                         dlrt__exec_buf(e, ws), cols_at);
        }
      }
      if (rc == DLRT_OK && !forward) rc = conv_columns(e, 0, x, ws, &geometry, b0 - x_first, nb);
      continue;
    }
    /* dW: in pieces at fixed images of the batch, whatever the chunk. */
    for (int64_t q0 = b0; q0 < b0 + nb && rc == DLRT_OK; q0 += piece) {
      int64_t nq = b0 + nb - q0 < piece ? b0 + nb - q0 : piece;
      if ((rc = conv_columns(e, 1, x, ws, &geometry, q0 - x_first, nq)) < 0) break;
      d = dlrt_gemm_desc_make(y->dtype, 0, 1, o, ckk, nq * ohw, 1.0f, q0 ? 1.0f : 0.0f);
      d.lda = y_held * ohw;
      d.c_f32 = w->dtype != y->dtype; /* a 16-bit graph's: summed in fp32, never rounded */
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
static int run_bias_grad(dlrt_exec_t *e, dlrt__node *n, const dlrt__chunk *c) {
  dlrt_tensor_t *s = n->out[0], *dy = n->in[0];
  const struct dlrt__channels_params *p = &n->channels;
  int64_t images = p->images, channels = p->channels, spatial = p->spatial / images;
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

/* The seed of a dropout mask (63 bits): the executor's seed, the step
 * (updates made) and the op's salt, so that each step and each dropout op
 * draws its own mask, and every run of a step the same one (a checkpointed
 * forward pass recomputed, the backward pass of fused attention). */
static int64_t dropout_seed(const dlrt_exec_t *e, int64_t salt) {
  uint64_t seed = e->seed ^ ((uint64_t)e->steps * 0x9e3779b97f4a7c15ULL) ^
                  ((uint64_t)salt * 0xbf58476d1ce4e5b9ULL);
  return (int64_t)(seed & INT64_MAX);
}

/* The sizes attention.h's kernels take after their arrays, then dropout's
 * seed, threshold and keep_scale: dropout applies in training runs only
 * (its backward node runs in those alone). */
static void attention_sizes(dlrt__launcher *lb, const dlrt_exec_t *e,
                            const struct dlrt__attention_params *p, int64_t rows) {
  int drop = p->dropout > 0.0f && e->mode != DLRT_RUN_FORWARD;
  dlrt__launch_i64(lb, p->batch), dlrt__launch_i64(lb, p->seq), dlrt__launch_i64(lb, p->heads);
  dlrt__launch_i64(lb, p->head_dim), dlrt__launch_i64(lb, rows);
  dlrt__launch_i64(lb, p->causal), dlrt__launch_f32(lb, p->scale);
  dlrt__launch_i64(lb, drop ? dropout_seed(e, p->salt) : 0);
  /* p 2^32 rounds down: kept when the hash is at least it, at most 2^32 - 1 */
  dlrt__launch_i64(lb, drop ? (int64_t)((double)p->dropout * 4294967296.0) : 0);
  dlrt__launch_f32(lb, drop ? 1.0f / (1.0f - p->dropout) : 1.0f);
}

/* Fused attention (kernels/attention.h), one work-group per tile of rows of
 * each head of each sequence: the forward pass (o, lse from qkv) over tiles
 * of queries; its gradient in two kernels, dQ over tiles of queries (which
 * also writes D = rowsum(dO * o) into the node's workspace) and then dK, dV
 * over tiles of keys, reading D. qkv, o, dO and dqkv share one storage
 * type (the precision pass sees to it); lse and D are fp32. */
static int run_attention(dlrt_exec_t *e, dlrt__node *n, const dlrt__chunk *c) {
  /* A slice block's chunk of sequences: each (sequence, head) alone. */
  struct dlrt__attention_params chunk_p = n->attention;
  chunk_p.batch = in_chunk(c, chunk_p.batch);
  const struct dlrt__attention_params *p = &chunk_p;
  int64_t rows = DLRT__ATTN_ROWS(p->head_dim);
  int64_t groups = p->batch * p->heads * ((p->seq + rows - 1) / rows);
  int fwd = n->op == DLRT__OP_ATTENTION;
  dlrt_tensor_t *qkv = fwd ? n->in[0] : n->in[1], *o = fwd ? n->out[0] : n->in[2];
  dlrt_tensor_t *lse = fwd ? n->out[1] : n->in[3];
  dlrt_dtype dtype = qkv->dtype;
  if (o->dtype != dtype || n->out[0]->dtype != dtype || (!fwd && n->in[0]->dtype != dtype))
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "graph: %s of %s mixes storage types (qkv "
                           "%s, output %s)", dlrt__op_name(n->op), qkv->name,
                           dlrt_dtype_name(dtype), dlrt_dtype_name(n->out[0]->dtype));
  dlrt__launcher lb;
  if (fwd) {
    start(&lb, e, typed(DLRT__K_attention_f32, dtype), 0, groups);
    arg_items(&lb, e, o, c), arg_items(&lb, e, lse, c), arg_items(&lb, e, qkv, c);
    attention_sizes(&lb, e, p, rows);
    return dlrt__launch_submit(e->stream, &lb);
  }
  dlrt_tensor_t *dqkv = n->out[0], *dsum = n->out[1], *dout = n->in[0];
  start(&lb, e, typed(DLRT__K_attention_grad_q_f32, dtype), 0, groups);
  arg_items(&lb, e, dqkv, c), arg_items(&lb, e, dsum, c), arg_items(&lb, e, dout, c);
  arg_items(&lb, e, qkv, c), arg_items(&lb, e, o, c), arg_items(&lb, e, lse, c);
  attention_sizes(&lb, e, p, rows);
  int rc = dlrt__launch_submit(e->stream, &lb);
  if (rc < 0) return rc;
  start(&lb, e, typed(DLRT__K_attention_grad_kv_f32, dtype), 0, groups);
  arg_items(&lb, e, dqkv, c), arg_items(&lb, e, dout, c), arg_items(&lb, e, qkv, c);
  arg_items(&lb, e, lse, c), arg_items(&lb, e, dsum, c);
  attention_sizes(&lb, e, p, rows);
  return dlrt__launch_submit(e->stream, &lb);
}

/* The fused linear + cross-entropy (lib/graph/linear_xent.c), a chunk of R
 * rows at a time through the workspace (per-row losses [N], N ones, then
 * the chunk's logits z, R x V):
 *   z = x_c w^T; per-row losses and dz = (softmax(z) - q) s over z (the
 *   softmax cross-entropy kernel reads each logit before it writes its
 *   gradient there; s = loss scale / N); in a training run also
 *   dx_c = dz w and dw (+)= dz^T x_c;
 * then the mean loss as a GEMM of the losses and the ones (dlrt_reduce
 * would take scratch memory the plan does not count). No N x V tensor is
 * ever stored; the gradients come out of the forward pass, as the fused
 * cross-entropy's d logits do. */
static int run_linear_xent(dlrt_exec_t *e, dlrt__node *n) {
  const struct dlrt__linear_xent_params *p = &n->linear_xent;
  dlrt_tensor_t *x = n->in[0], *w = n->in[1], *labels = n->in[2];
  dlrt_tensor_t *loss = n->out[0], *dx = n->out[1], *dw = n->out[2], *ws = n->out[3];
  dlrt_buffer_t *wsb = dlrt__exec_buf(e, ws);
  size_t f = sizeof(float), losses_at = off(ws), ones_at = losses_at + (size_t)p->rows * f;
  size_t z_at = ones_at + (size_t)p->rows * f, dz_at = z_at;
  int train = e->mode != DLRT_RUN_FORWARD;
  int rc = dlrt_elementwise(e->stream, DLRT_EW_FILL, DLRT_F32, p->rows, 1.0f, wsb, ones_at, NULL,
                            0, NULL, 0);
  for (int64_t r0 = 0; r0 < p->rows && rc == DLRT_OK; r0 += p->chunk) {
    int64_t r = p->rows - r0 < p->chunk ? p->rows - r0 : p->chunk;
    size_t x_at = off(x) + (size_t)(r0 * p->width) * f;
    dlrt_gemm_desc d = dlrt_gemm_desc_make(DLRT_F32, 0, 1, r, p->classes, p->width, 1.0f, 0.0f);
    if ((rc = dlrt_gemm(e->stream, &d, dlrt__exec_buf(e, x), x_at, dlrt__exec_buf(e, w), off(w),
                        wsb, z_at)) < 0)
      break;
    dlrt__launcher lb;
    start(&lb, e, DLRT__K_softmax_xent, 0, r);
    dlrt__launch_buffer_arg(&lb, wsb, z_at, f);
    dlrt__launch_buffer_arg(&lb, dlrt__exec_buf(e, labels),
                            off(labels) + (size_t)r0 * sizeof(int32_t), sizeof(int32_t));
    dlrt__launch_buffer_arg(&lb, wsb, losses_at + (size_t)r0 * f, f);
    dlrt__launch_buffer_arg(&lb, wsb, dz_at, f);
    dlrt__launch_i64(&lb, r), dlrt__launch_i64(&lb, p->classes);
    dlrt__launch_f32(&lb, p->smoothing);
    dlrt__launch_f32(&lb, e->grads.loss_scale / (float)p->rows);
    if ((rc = dlrt__launch_submit(e->stream, &lb)) < 0 || !train) continue;
    d = dlrt_gemm_desc_make(DLRT_F32, 0, 0, r, p->width, p->classes, 1.0f, 0.0f);
    if ((rc = dlrt_gemm(e->stream, &d, wsb, dz_at, dlrt__exec_buf(e, w), off(w),
                        dlrt__exec_buf(e, dx), off(dx) + (size_t)(r0 * p->width) * f)) < 0)
      break;
    d = dlrt_gemm_desc_make(DLRT_F32, 1, 0, p->classes, p->width, r, 1.0f, r0 ? 1.0f : 0.0f);
    rc = dlrt_gemm(e->stream, &d, wsb, dz_at, dlrt__exec_buf(e, x), x_at,
                   dlrt__exec_buf(e, dw), off(dw));
  }
  if (rc == DLRT_OK) {
    /* loss = (1 / N) losses^T ones: 1 x N times N x 1. */
    dlrt_gemm_desc d = dlrt_gemm_desc_make(DLRT_F32, 0, 0, 1, 1, p->rows,
                                           1.0f / (float)p->rows, 0.0f);
    rc = dlrt_gemm(e->stream, &d, wsb, losses_at, wsb, ones_at, dlrt__exec_buf(e, loss),
                   off(loss));
  }
  return rc;
}

/* One token per sequence over its key / value caches (kernels/attention.h:
 * attention_decode), one work-group per head of each sequence; the kernel
 * reads the positions (in3) on the device. in1, in2 are the caches, which
 * it writes. */
static int run_attention_decode(dlrt_exec_t *e, dlrt__node *n) {
  const struct dlrt__decode_params *p = &n->decode;
  dlrt__launcher lb;
  start(&lb, e, DLRT__K_attention_decode, 0, p->batch * p->heads);
  arg(&lb, e, n->out[0]), arg(&lb, e, n->in[1]), arg(&lb, e, n->in[2]);
  arg(&lb, e, n->in[0]), arg(&lb, e, n->in[3]);
  dlrt__launch_i64(&lb, p->batch), dlrt__launch_i64(&lb, p->capacity);
  dlrt__launch_i64(&lb, p->heads), dlrt__launch_i64(&lb, p->head_dim);
  dlrt__launch_i64(&lb, DLRT__ATTN_ROWS(p->head_dim)), dlrt__launch_f32(&lb, p->scale);
  return dlrt__launch_submit(e->stream, &lb);
}

int dlrt__exec_run_node(dlrt_exec_t *e, dlrt__node *n) { return dlrt__exec_run_node_chunk(e, n, NULL); }

int dlrt__exec_run_node_chunk(dlrt_exec_t *e, dlrt__node *n, const dlrt__chunk *c) {
  dlrt__launcher lb;
  dlrt_tensor_t *y = n->n_out ? n->out[0] : NULL, *a = n->in[0], *b = n->in[1];
  switch (n->op) {
  case DLRT__OP_VIEW: return DLRT_OK;
  case DLRT__OP_CONTIGUOUS:
    if (dlrt__contiguous(a)) /* dense already, at an offset: a copy from there */
      return dlrt_copy_d2d(dlrt__exec_buf(e, y), off(y), dlrt__exec_buf(e, a), off(a),
                           dlrt__tensor_bytes(a), e->stream);
    return run_gather(e, y, a);
  case DLRT__OP_FILL: {
    /* The seed of the backward pass carries the loss scale. */
    const struct dlrt__fill_params *p = &n->fill;
    float value = p->loss_seed ? p->value * e->grads.loss_scale : p->value;
    return dlrt_elementwise(e->stream, DLRT_EW_FILL, y->dtype, y->numel, value,
                            dlrt__exec_buf(e, y), off(y), NULL, 0, NULL, 0);
  }
  case DLRT__OP_CAST:
    return dlrt_cast(e->stream, y->numel, dlrt__exec_buf(e, y), off(y), y->dtype, dlrt__exec_buf(e, a),
                     off(a), a->dtype);
  case DLRT__OP_RELU:
    return dlrt_elementwise(e->stream, DLRT_EW_RELU, y->dtype, in_chunk(c, y->numel), 0,
                            dlrt__exec_buf(e, y), off(y), dlrt__exec_buf(e, a), off(a), NULL, 0);
  case DLRT__OP_ADD:
  case DLRT__OP_MUL: /* and a slice block's chunk of rows */
    return dlrt_elementwise(e->stream, n->op == DLRT__OP_ADD ? DLRT_EW_ADD : DLRT_EW_MUL, y->dtype,
                            in_chunk(c, y->numel), 0, dlrt__exec_buf(e, y), item_off(e, y, c),
                            dlrt__exec_buf(e, a), item_off(e, a, c), dlrt__exec_buf(e, b),
                            item_off(e, b, c));
  case DLRT__OP_SCALE:
    return dlrt_elementwise(e->stream, DLRT_EW_SCALE, y->dtype, y->numel, n->scale.alpha,
                            dlrt__exec_buf(e, y), off(y), dlrt__exec_buf(e, a), off(a), NULL, 0);
  case DLRT__OP_SUM:
    return dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, 1, a->numel, dlrt__exec_buf(e, y), off(y),
                       dlrt__exec_buf(e, a), off(a));
  case DLRT__OP_BMM: {
    struct dlrt__bmm_params q = n->bmm;
    if (!q.batch) q.batch = 1;
    return run_gemm(e, a, b, y, &q);
  }
  case DLRT__OP_CONV:
  case DLRT__OP_CONV_GRAD_W:
  case DLRT__OP_CONV_GRAD_X:
    return run_conv(e, n, c);
  case DLRT__OP_PERMUTE: {
    const struct dlrt__permute_params *p = &n->permute;
    start(&lb, e, typed(DLRT__K_swap01_f32, y->dtype), p->na * p->nb, 0);
    lb.launch.item_cost = p->inner;
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, p->na), dlrt__launch_i64(&lb, p->nb), dlrt__launch_i64(&lb, p->inner);
    break;
  }
  case DLRT__OP_BIAS_ROWS:
    start(&lb, e, typed(DLRT__K_bias_rows_f32, y->dtype), y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, n->rows.rows), dlrt__launch_i64(&lb, n->rows.cols);
    break;
  case DLRT__OP_BIAS_CHANNELS: {
    const struct dlrt__channels_params *p = &n->channels;
    int64_t spatial = in_chunk(c, p->spatial); /* chunks: CNHW, p->n = 1 */
    start(&lb, e, typed(DLRT__K_bias_channels_f32, y->dtype), p->n * p->channels, 0);
    lb.launch.item_cost = spatial;
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, p->n), dlrt__launch_i64(&lb, p->channels);
    dlrt__launch_i64(&lb, spatial);
    break;
  }
  case DLRT__OP_RELU_GRAD:
    start(&lb, e, typed(DLRT__K_relu_grad_f32, y->dtype), y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, y->numel);
    break;
  case DLRT__OP_BROADCAST:
    start(&lb, e, DLRT__K_broadcast_scalar, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_f32(&lb, n->scale.alpha), dlrt__launch_i64(&lb, y->numel);
    break;
  case DLRT__OP_SUM_COLS:
    start(&lb, e, typed(DLRT__K_sum_cols_f32, y->dtype), n->rows.cols, 0);
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, n->rows.rows), dlrt__launch_i64(&lb, n->rows.cols);
    dlrt__launch_f32(&lb, 0.0f);
    break;
  case DLRT__OP_SUM_CHANNELS: {
    const struct dlrt__channels_params *p = &n->channels;
    if (p->images > 0) return run_bias_grad(e, n, c); /* a convolution's bias (CNHW) */
    /* One image (CNHW): a row reduction, spread over the whole device. */
    if (p->n == 1)
      return dlrt_reduce(e->stream, DLRT_REDUCE_SUM, y->dtype, p->channels, p->spatial,
                         dlrt__exec_buf(e, y), off(y), dlrt__exec_buf(e, a), off(a));
    start(&lb, e, typed(DLRT__K_sum_channels_f32, y->dtype), p->channels, 0);
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, p->n), dlrt__launch_i64(&lb, p->channels);
    dlrt__launch_i64(&lb, p->spatial);
    break;
  }
  case DLRT__OP_MAXPOOL:
  case DLRT__OP_MAXPOOL_GRAD: {
    /* Planes on the image side (x, dx; a chunk's own in chunked blocks),
     * and how they map onto the pooled side's (y, argmax, dy): the same
     * ones, or the chunk's among the whole batch's. */
    const struct dlrt__pool_params *p = &n->pool;
    int64_t planes = in_chunk(c, p->planes);
    const dlrt_tensor_t *pooled = n->op == DLRT__OP_MAXPOOL ? y : a;
    int64_t pn = planes, pN = planes, pb0 = 0;
    if (c && !chunk_local(c, pooled)) pn = c->nb, pN = c->n, pb0 = c->b0;
    if (n->op == DLRT__OP_MAXPOOL) {
      start(&lb, e, typed(DLRT__K_maxpool_f32, y->dtype), planes, 0);
      lb.launch.item_cost = p->oh * p->ow * p->k * p->k;
      arg(&lb, e, y), arg(&lb, e, n->out[1]), arg(&lb, e, a);
    } else {
      if (p->stride >= p->k) {
        /* Disjoint windows: zero dx, then each window writes its maximum. */
        int rc = dlrt_elementwise(e->stream, DLRT_EW_FILL, y->dtype, in_chunk(c, y->numel), 0.0f,
                                  dlrt__exec_buf(e, y), off(y), NULL, 0, NULL, 0);
        if (rc < 0) return rc;
        start(&lb, e, typed(DLRT__K_maxpool_scatter_f32, y->dtype), planes * p->oh, 0); /* output rows */
        lb.launch.item_cost = p->ow;
      } else {
        start(&lb, e, typed(DLRT__K_maxpool_grad_f32, y->dtype), planes * p->h, 0); /* input rows */
        lb.launch.item_cost = p->w * p->k;
      }
      /* Fused with a ReLU's gradient (relu_fused): the maximum's sign is the mask,
       * in the argmax byte or (windows over 128 places) the pooled output. */
      arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b), arg(&lb, e, n->n_in > 2 ? n->in[2] : a);
    }
    dlrt__launch_i64(&lb, planes), dlrt__launch_i64(&lb, p->h), dlrt__launch_i64(&lb, p->w);
    dlrt__launch_i64(&lb, p->k), dlrt__launch_i64(&lb, p->stride), dlrt__launch_i64(&lb, p->oh);
    dlrt__launch_i64(&lb, p->ow);
    if (n->op == DLRT__OP_MAXPOOL_GRAD) dlrt__launch_i64(&lb, p->relu_fused);
    dlrt__launch_i64(&lb, pn), dlrt__launch_i64(&lb, pN), dlrt__launch_i64(&lb, pb0);
    break;
  }
  case DLRT__OP_XENT: {
    /* Per-row losses and d logits in one pass, then the mean. */
    const struct dlrt__xent_params *p = &n->xent;
    /* 16-bit logits (mixed precision) come with a dz of their type. */
    if (n->out[2]->dtype != a->dtype)
      return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "graph: cross_entropy of %s (%s) writes its "
                             "gradient in %s; it takes the logits' type", a->name,
                             dlrt_dtype_name(a->dtype), dlrt_dtype_name(n->out[2]->dtype));
    start(&lb, e, a->dtype == DLRT_F16    ? DLRT__K_softmax_xent_f16
                  : a->dtype == DLRT_BF16 ? DLRT__K_softmax_xent_bf16
                                          : DLRT__K_softmax_xent, 0, p->rows);
    arg(&lb, e, a), arg(&lb, e, b), arg(&lb, e, n->out[1]), arg(&lb, e, n->out[2]);
    dlrt__launch_i64(&lb, p->rows), dlrt__launch_i64(&lb, p->classes);
    /* d logits of the mean loss, times the loss scale (mixed precision). */
    dlrt__launch_f32(&lb, p->smoothing);
    dlrt__launch_f32(&lb, e->grads.loss_scale / (float)p->rows);
    int rc = dlrt__launch_submit(e->stream, &lb);
    if (rc == DLRT_OK)
      rc = dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, 1, p->rows, dlrt__exec_buf(e, y), off(y),
                       dlrt__exec_buf(e, n->out[1]), off(n->out[1]));
    if (rc == DLRT_OK)
      rc = dlrt_elementwise(e->stream, DLRT_EW_SCALE, DLRT_F32, 1, 1.0f / (float)p->rows,
                            dlrt__exec_buf(e, y), off(y), dlrt__exec_buf(e, y), off(y), NULL, 0);
    return rc;
  }
  case DLRT__OP_LINEAR_XENT: return run_linear_xent(e, n);
  case DLRT__OP_LINEAR_XENT_SHARD: return dlrt__exec_run_xent_shard(e, n);
  case DLRT__OP_TP_COPY:
  case DLRT__OP_ALLREDUCE: return dlrt__exec_run_collective(e, n);
  case DLRT__OP_ATTENTION:
  case DLRT__OP_ATTENTION_GRAD:
    return run_attention(e, n, c);
  case DLRT__OP_ATTENTION_DECODE:
    return run_attention_decode(e, n);
  case DLRT__OP_SUB:
  case DLRT__OP_DIV:
    start(&lb, e, n->op == DLRT__OP_SUB ? DLRT__K_sub : DLRT__K_div, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, y->numel);
    break;
  case DLRT__OP_DIV_GRAD_Z:
    start(&lb, e, DLRT__K_div_grad_z, y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b), arg(&lb, e, n->in[2]);
    dlrt__launch_i64(&lb, y->numel);
    break;
  case DLRT__OP_ACT:
  case DLRT__OP_ACT_GRAD: {
    dlrt_dtype type;
    int rc = one_type(n, n->n_in + 1, &type);
    if (rc < 0) return rc;
    int64_t count = in_chunk(c, y->numel); /* a slice block's chunk of rows */
    if (n->op == DLRT__OP_ACT) {
      start(&lb, e, typed(DLRT__K_activation_f32, type), count, 0);
      arg_items(&lb, e, y, c), arg_items(&lb, e, a, c);
      dlrt__launch_i64(&lb, count), dlrt__launch_i64(&lb, n->act.kind);
      break;
    }
    start(&lb, e, typed(DLRT__K_activation_grad_f32, type), count, 0);
    arg_items(&lb, e, y, c), arg_items(&lb, e, a, c), arg_items(&lb, e, b, c);
    dlrt__launch_i64(&lb, count), dlrt__launch_i64(&lb, n->act.kind);
    break;
  }
  case DLRT__OP_SOFTMAX:
  case DLRT__OP_SOFTMAX_GRAD:
    start(&lb, e, n->op == DLRT__OP_SOFTMAX ? DLRT__K_softmax : DLRT__K_softmax_grad, 0, n->rows.rows);
    arg(&lb, e, y), arg(&lb, e, a);
    if (n->op == DLRT__OP_SOFTMAX_GRAD) arg(&lb, e, b);
    dlrt__launch_i64(&lb, n->rows.rows), dlrt__launch_i64(&lb, n->rows.cols);
    break;
  case DLRT__OP_AVGPOOL:
  case DLRT__OP_AVGPOOL_GRAD: {
    const struct dlrt__pool_params *p = &n->pool;
    start(&lb, e, n->op == DLRT__OP_AVGPOOL ? DLRT__K_avgpool : DLRT__K_avgpool_grad, p->planes, 0);
    lb.launch.item_cost = p->h * p->w * p->k;
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, p->planes), dlrt__launch_i64(&lb, p->h), dlrt__launch_i64(&lb, p->w);
    dlrt__launch_i64(&lb, p->k), dlrt__launch_i64(&lb, p->stride), dlrt__launch_i64(&lb, p->oh);
    dlrt__launch_i64(&lb, p->ow);
    break;
  }
  case DLRT__OP_DROPOUT: {
    /* Evaluation passes values through; training draws a mask per step. */
    const struct dlrt__dropout_params *p = &n->dropout;
    dlrt_dtype type;
    int rc = one_type(n, 2, &type);
    if (rc < 0) return rc;
    if (e->mode == DLRT_RUN_FORWARD || p->prob == 0.0f)
      return dlrt_elementwise(e->stream, DLRT_EW_SCALE, type, y->numel, 1.0f,
                              dlrt__exec_buf(e, y), off(y), dlrt__exec_buf(e, a), off(a), NULL, 0);
    start(&lb, e, typed(DLRT__K_dropout_f32, type), y->numel, 0);
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, y->numel), dlrt__launch_i64(&lb, dropout_seed(e, p->salt));
    dlrt__launch_i64(&lb, (int64_t)((double)p->prob * 4294967296.0));
    dlrt__launch_f32(&lb, 1.0f / (1.0f - p->prob));
    break;
  }
  case DLRT__OP_NORM: {
    const struct dlrt__norm_params *p = &n->norm;
    if (p->batch_norm && e->mode == DLRT_RUN_FORWARD) {
      /* Batch norm when evaluating: the running statistics. */
      start(&lb, e, DLRT__K_norm_rows_eval, p->rows, 0);
      lb.launch.item_cost = p->cols;
      arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, n->in[3]), arg(&lb, e, n->in[4]);
      arg(&lb, e, b), arg(&lb, e, n->in[2]);
      dlrt__launch_i64(&lb, p->rows), dlrt__launch_i64(&lb, p->cols);
      dlrt__launch_f32(&lb, p->eps);
      break;
    }
    int kernel, rc = norm_kernel_of(n, DLRT__K_norm_rows_f32, a, y, &kernel);
    if (rc < 0) return rc;
    start(&lb, e, kernel, 0, p->rows);
    arg(&lb, e, y), arg(&lb, e, n->out[1]), arg(&lb, e, n->out[2]), arg(&lb, e, a);
    arg(&lb, e, b), arg(&lb, e, n->in[2]);
    dlrt__launch_i64(&lb, p->rows), dlrt__launch_i64(&lb, p->cols), dlrt__launch_f32(&lb, p->eps);
    dlrt__launch_i64(&lb, p->per_row);
    break;
  }
  case DLRT__OP_NORM_GRAD: {
    const struct dlrt__norm_params *p = &n->norm;
    /* dx, dy, x: dx and x of x's type, dy of y's. */
    int kernel, rc = norm_kernel_of(n, DLRT__K_norm_rows_grad_f32, n->in[1], a, &kernel);
    if (rc == DLRT_OK && y->dtype != n->in[1]->dtype)
      rc = dlrt__set_error(DLRT_ERR_UNSUPPORTED, "graph: %s writes %s for an input of %s",
                           dlrt__op_name(n->op), dlrt_dtype_name(y->dtype),
                           dlrt_dtype_name(n->in[1]->dtype));
    if (rc < 0) return rc;
    start(&lb, e, kernel, 0, p->rows);
    arg(&lb, e, y);
    for (int i = 0; i < 5; i++) arg(&lb, e, n->in[i]);
    dlrt__launch_i64(&lb, p->rows), dlrt__launch_i64(&lb, p->cols);
    dlrt__launch_i64(&lb, p->per_row);
    break;
  }
  case DLRT__OP_NORM_AFFINE_GRAD: {
    const struct dlrt__norm_params *p = &n->norm;
    /* dy, x: x of its own type, dy of the normalised output's. */
    int kernel, rc = norm_kernel_of(n, DLRT__K_norm_affine_grad_f32, n->in[1], a, &kernel);
    if (rc < 0) return rc;
    start(&lb, e, kernel, p->per_row ? p->rows : p->cols, 0);
    lb.launch.item_cost = p->per_row ? p->cols : p->rows;
    arg(&lb, e, y), arg(&lb, e, n->out[1]);
    for (int i = 0; i < 4; i++) arg(&lb, e, n->in[i]);
    dlrt__launch_i64(&lb, p->rows), dlrt__launch_i64(&lb, p->cols);
    dlrt__launch_i64(&lb, p->per_row);
    break;
  }
  case DLRT__OP_BN_RUNNING: {
    const struct dlrt__bn_running_params *p = &n->bn_running;
    if (e->mode == DLRT_RUN_FORWARD) return DLRT_OK;
    start(&lb, e, DLRT__K_bn_running, p->channels, 0);
    arg(&lb, e, n->in[2]), arg(&lb, e, n->in[3]), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, p->channels), dlrt__launch_i64(&lb, p->count);
    dlrt__launch_f32(&lb, p->momentum), dlrt__launch_f32(&lb, p->eps);
    break;
  }
  case DLRT__OP_CONCAT: {
    /* One copy per input into its stretch of the axis. */
    const struct dlrt__concat_params *p = &n->concat;
    int axis = (int)p->axis;
    int64_t start = 0;
    for (int i = 0; i < n->n_in; i++) {
      int64_t len = n->in[i]->shape[axis];
      start_axis_copy(&lb, e, y, n->in[i], p->outer, p->inner, p->axis_len, len, start, 0, len);
      int rc = dlrt__launch_submit(e->stream, &lb);
      if (rc < 0) return rc;
      start += len;
    }
    return DLRT_OK;
  }
  case DLRT__OP_SLICE: return DLRT_OK; /* a view: nothing moves */
  case DLRT__OP_SLICE_GRAD: {
    const struct dlrt__slice_params *p = &n->slice;
    int rc = dlrt_elementwise(e->stream, DLRT_EW_FILL, DLRT_F32, y->numel, 0.0f,
                              dlrt__exec_buf(e, y), off(y), NULL, 0, NULL, 0);
    if (rc < 0) return rc;
    start_axis_copy(&lb, e, y, a, p->outer, p->inner, p->x_axis_len, p->count, p->start, 0,
                    p->count);
    break;
  }
  case DLRT__OP_AXIS_SUM:
  case DLRT__OP_AXIS_EXPAND: {
    const struct dlrt__axis_params *p = &n->axis;
    if (n->op == DLRT__OP_AXIS_SUM && p->inner == 1)
      /* Summing a contiguous last axis: the device-wide row reduction. */
      if (p->scale == 1.0f)
        return dlrt_reduce(e->stream, DLRT_REDUCE_SUM, DLRT_F32, p->outer, p->axis_len,
                           dlrt__exec_buf(e, y), off(y), dlrt__exec_buf(e, a), off(a));
    start(&lb, e, n->op == DLRT__OP_AXIS_SUM ? DLRT__K_axis_sum : DLRT__K_axis_expand,
          n->op == DLRT__OP_AXIS_SUM ? p->outer * p->inner : p->outer * p->axis_len, 0);
    lb.launch.item_cost = n->op == DLRT__OP_AXIS_SUM ? p->axis_len : p->inner;
    arg(&lb, e, y), arg(&lb, e, a);
    dlrt__launch_i64(&lb, p->outer), dlrt__launch_i64(&lb, p->axis_len);
    dlrt__launch_i64(&lb, p->inner), dlrt__launch_f32(&lb, p->scale);
    break;
  }
  case DLRT__OP_BCAST:
  case DLRT__OP_BCAST_GRAD_B: {
    const struct dlrt__bcast_params *p = &n->bcast;
    dlrt_dtype type;
    int rc = one_type(n, n->n_in + 1, &type);
    if (rc < 0) return rc;
    int kernel = n->op == DLRT__OP_BCAST ? DLRT__K_bcast_f32 : DLRT__K_bcast_grad_b_f32;
    /* A slice block's chunk of rows (whole rows of m: b as it is). */
    int64_t count = n->op == DLRT__OP_BCAST ? in_chunk(c, p->count) : p->count;
    start(&lb, e, typed(kernel, type), count, 0);
    if (n->op == DLRT__OP_BCAST) arg_items(&lb, e, y, c), arg_items(&lb, e, a, c), arg(&lb, e, b);
    else arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b), arg(&lb, e, n->in[2]);
    dlrt__launch_i64(&lb, count), dlrt__launch_i64(&lb, p->m), dlrt__launch_i64(&lb, p->op);
    break;
  }
  case DLRT__OP_EMBED:
  case DLRT__OP_EMBED_GRAD: {
    const struct dlrt__embed_params *p = &n->embed;
    start(&lb, e, n->op == DLRT__OP_EMBED ? DLRT__K_embedding : DLRT__K_embedding_grad,
          n->op == DLRT__OP_EMBED ? p->count : p->vocab, 0);
    lb.launch.item_cost = n->op == DLRT__OP_EMBED ? p->dim : p->count * p->dim;
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b);
    dlrt__launch_i64(&lb, p->count), dlrt__launch_i64(&lb, p->vocab), dlrt__launch_i64(&lb, p->dim);
    break;
  }
  case DLRT__OP_EMBED_GRAD_ACC: {
    const struct dlrt__embed_params *p = &n->embed;
    start(&lb, e, DLRT__K_embedding_grad_acc, p->vocab, 0);
    lb.launch.item_cost = p->count * p->dim;
    arg(&lb, e, y), arg(&lb, e, a), arg(&lb, e, b), arg(&lb, e, n->in[2]);
    dlrt__launch_i64(&lb, p->count), dlrt__launch_i64(&lb, p->vocab), dlrt__launch_i64(&lb, p->dim);
    break;
  }
  case DLRT__OP_SGD: {
    const dlrt_optimizer *o = &e->g->opt;
    start(&lb, e, DLRT__K_sgd_update, a->numel, 0);
    arg(&lb, e, a), arg(&lb, e, b), arg(&lb, e, n->in[2]);
    dlrt__launch_i64(&lb, a->numel), dlrt__launch_f32(&lb, e->lr);
    dlrt__launch_f32(&lb, o->momentum), dlrt__launch_f32(&lb, a->no_decay ? 0 : o->weight_decay);
    dlrt__launch_f32(&lb, e->grads.grad_scale), dlrt__launch_i64(&lb, o->nesterov);
    dlrt__launch_i64(&lb, e->steps == 0);
    break;
  }
  case DLRT__OP_ADAM: {
    const dlrt_optimizer *o = &e->g->opt;
    float step_size, bias2;
    dlrt__adam_factors(e, &step_size, &bias2);
    start(&lb, e, DLRT__K_adam_update, a->numel, 0);
    arg(&lb, e, a), arg(&lb, e, b), arg(&lb, e, n->in[2]), arg(&lb, e, n->in[3]);
    dlrt__launch_i64(&lb, a->numel), dlrt__launch_f32(&lb, e->lr);
    dlrt__launch_f32(&lb, o->beta1), dlrt__launch_f32(&lb, o->beta2);
    dlrt__launch_f32(&lb, o->eps), dlrt__launch_f32(&lb, a->no_decay ? 0 : o->weight_decay);
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
