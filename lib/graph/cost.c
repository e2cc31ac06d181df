/* cost.c — FLOPs and bytes of each graph node (cost.h). The counts follow
 * the kernels: a GEMM is 2 m n k, a convolution the GEMM of its im2col
 * columns (which it writes and reads back through its workspace), fused
 * attention the two products of each (causal: half the) query-key pairs
 * and 2.5 times that backward (FlashAttention's count: the scores are made
 * again), the fused LM head three GEMMs over its logits. Elementwise ops
 * count what their kernels compute per element; they are bandwidth-bound
 * on any GPU, so the constants only matter on a CPU. */
#include "config.h"

#include <string.h>

#include "graph/cost.h"

static double tensor_bytes(const dlrt_tensor_t *t) {
  return t ? (double)t->numel * (double)dlrt_dtype_size(t->dtype) : 0;
}

/* Vector FLOPs per element of the node's first output (or first input for
 * the in-place updates), by what its kernel computes. */
static double vector_per_element(const dlrt__node *n) {
  switch (n->op) {
  case DLRT__OP_ACT:
    return n->act.kind == DLRT__ACT_GELU_TANH ? 15 : n->act.kind == DLRT__ACT_GELU ? 20
           : n->act.kind == DLRT__ACT_TANH    ? 10 : 6;
  case DLRT__OP_ACT_GRAD:
    return n->act.kind == DLRT__ACT_GELU_TANH ? 25 : n->act.kind == DLRT__ACT_GELU ? 25 : 4;
  case DLRT__OP_SOFTMAX: return 5;
  case DLRT__OP_SOFTMAX_GRAD: return 4;
  case DLRT__OP_NORM: return 8;
  case DLRT__OP_NORM_GRAD: return 10;
  case DLRT__OP_NORM_AFFINE_GRAD: return 4;
  case DLRT__OP_XENT: return 5;
  case DLRT__OP_DROPOUT: return 4;
  case DLRT__OP_DIV_GRAD_Z: return 3;
  case DLRT__OP_ADAM: return 12;
  case DLRT__OP_SGD: return 4;
  case DLRT__OP_FILL: case DLRT__OP_VIEW: case DLRT__OP_SLICE: case DLRT__OP_PERMUTE:
  case DLRT__OP_CONCAT: case DLRT__OP_SLICE_GRAD: case DLRT__OP_CAST: case DLRT__OP_CONTIGUOUS:
  case DLRT__OP_EMBED: case DLRT__OP_MAXPOOL_GRAD:
    return 0;
  default:
    return 1;
  }
}

/* A convolution's GEMM: the weights (O x C kh kw) times the columns. */
static void conv_cost(const dlrt__node *n, const dlrt_tensor_t *w, dlrt__op_cost *out) {
  const struct dlrt__conv_params *p = &n->conv;
  double ckk = (double)(p->c * p->kh * p->kw), columns = (double)(p->n * p->oh * p->ow);
  out->matmul_flops = 2.0 * (double)w->shape[0] * ckk * columns;
  out->matmul_dtype = w->dtype;
  out->matmul_kind = DLRT__COST_CONV;
  /* The workspace (the last output) holds one chunk of fp32 columns, made
   * for every chunk: all the batch's columns are written once and read
   * once. The other operands stream once. */
  double cols = ckk * columns * 4.0;
  for (int i = 0; i < n->n_in; i++) out->bytes_read += tensor_bytes(n->in[i]);
  for (int i = 0; i + 1 < n->n_out; i++) out->bytes_written += tensor_bytes(n->out[i]);
  out->bytes_written += cols;
  out->bytes_read += cols;
}

void dlrt__node_cost(const dlrt__node *n, dlrt__op_cost *out) {
  memset(out, 0, sizeof *out);
  out->matmul_dtype = DLRT_F32;
  out->launches = 1;
  switch (n->op) {
  case DLRT__OP_VIEW:
  case DLRT__OP_SLICE:
    out->launches = 0; /* another look at the same storage */
    return;
  case DLRT__OP_BMM: {
    const struct dlrt__bmm_params *p = &n->bmm;
    double batch = p->batch > 1 ? (double)p->batch : 1;
    out->matmul_flops = 2.0 * batch * (double)p->m * (double)p->n * (double)p->k;
    out->matmul_dtype = n->in[0]->dtype;
    break;
  }
  case DLRT__OP_CONV:
  case DLRT__OP_CONV_GRAD_X:
    conv_cost(n, n->in[1], out);
    return;
  case DLRT__OP_CONV_GRAD_W:
    conv_cost(n, n->out[0], out);
    return;
  case DLRT__OP_LINEAR_XENT: {
    const struct dlrt__linear_xent_params *p = &n->linear_xent;
    double logits = (double)p->rows * (double)p->classes;
    /* The logits x w^T, then d x = d logits w and d w = d logits^T x. */
    out->matmul_flops = 6.0 * logits * (double)p->width;
    out->matmul_dtype = n->in[0]->dtype;
    out->vector_flops = 5.0 * logits;
    for (int i = 0; i < n->n_in; i++) out->bytes_read += tensor_bytes(n->in[i]);
    for (int i = 0; i < 3 && i < n->n_out; i++) out->bytes_written += tensor_bytes(n->out[i]);
    /* A chunk's fp32 logits at a time: written by the GEMM, rewritten as
     * their gradient, read by the two gradient GEMMs. */
    out->bytes_written += 2.0 * logits * 4.0;
    out->bytes_read += 2.0 * logits * 4.0;
    return;
  }
  case DLRT__OP_ATTENTION:
  case DLRT__OP_ATTENTION_GRAD: {
    const struct dlrt__attention_params *p = &n->attention;
    double pairs = (double)p->batch * (double)p->heads * (double)p->seq * (double)p->seq;
    if (p->causal) pairs *= 0.5;
    double forward = 4.0 * pairs * (double)p->head_dim;
    int grad = n->op == DLRT__OP_ATTENTION_GRAD;
    out->matmul_flops = grad ? 2.5 * forward : forward;
    out->matmul_kind = DLRT__COST_ATTENTION;
    out->matmul_dtype = n->in[grad ? 1 : 0]->dtype;
    out->vector_flops = (grad ? 8.0 : 5.0) * pairs; /* exp, scale, max, sums */
    break;
  }
  case DLRT__OP_ATTENTION_DECODE: {
    const struct dlrt__decode_params *p = &n->decode;
    /* At an unknown position: half the cache, on average over a sample. */
    double keys = (double)p->batch * (double)p->heads * (double)p->capacity * 0.5;
    out->matmul_flops = 4.0 * keys * (double)p->head_dim;
    out->vector_flops = 5.0 * keys;
    out->bytes_read = tensor_bytes(n->in[0]) + tensor_bytes(n->in[3]) +
                      0.5 * (tensor_bytes(n->in[1]) + tensor_bytes(n->in[2]));
    out->bytes_written = tensor_bytes(n->out[0]);
    return;
  }
  case DLRT__OP_EMBED: {
    const struct dlrt__embed_params *p = &n->embed;
    double rows = (double)p->count * (double)p->dim * (double)dlrt_dtype_size(n->in[1]->dtype);
    out->bytes_read = tensor_bytes(n->in[0]) + rows;
    out->bytes_written = tensor_bytes(n->out[0]);
    return;
  }
  case DLRT__OP_EMBED_GRAD: {
    /* The table zeroed, then the rows of dy added at their ids. */
    const struct dlrt__embed_params *p = &n->embed;
    double rows = (double)p->count * (double)p->dim * (double)dlrt_dtype_size(n->out[0]->dtype);
    out->bytes_read = tensor_bytes(n->in[0]) + tensor_bytes(n->in[1]) + rows;
    out->bytes_written = tensor_bytes(n->out[0]) + rows;
    out->vector_flops = (double)p->count * (double)p->dim;
    out->launches = 2;
    return;
  }
  case DLRT__OP_EMBED_GRAD_ACC: {
    /* In place: only the rows of the ids are read and written. */
    const struct dlrt__embed_params *p = &n->embed;
    double rows = (double)p->count * (double)p->dim * (double)dlrt_dtype_size(n->out[0]->dtype);
    out->bytes_read = tensor_bytes(n->in[1]) + tensor_bytes(n->in[2]) + rows;
    out->bytes_written = rows;
    out->vector_flops = (double)p->count * (double)p->dim;
    return;
  }
  case DLRT__OP_SGD:
  case DLRT__OP_ADAM: {
    /* In place: the parameter and its state are read and written, the
     * gradient (the last input) read. */
    for (int i = 0; i < n->n_in; i++) out->bytes_read += tensor_bytes(n->in[i]);
    for (int i = 0; i + 1 < n->n_in; i++) out->bytes_written += tensor_bytes(n->in[i]);
    out->vector_flops = vector_per_element(n) * (double)n->in[0]->numel;
    return;
  }
  case DLRT__OP_SUM:
  case DLRT__OP_SUM_COLS:
  case DLRT__OP_SUM_CHANNELS:
  case DLRT__OP_AXIS_SUM:
  case DLRT__OP_NORM_AFFINE_GRAD:
  case DLRT__OP_BCAST_GRAD_B:
    out->reduction = 1;
    break;
  default:
    break;
  }
  /* Every operand streams once. */
  for (int i = 0; i < n->n_in; i++) out->bytes_read += tensor_bytes(n->in[i]);
  for (int i = 0; i < n->n_out; i++) out->bytes_written += tensor_bytes(n->out[i]);
  if (out->matmul_flops > 0) return; /* a GEMM, or attention counted above */
  if (n->op == DLRT__OP_MAXPOOL || n->op == DLRT__OP_AVGPOOL)
    /* Per window element: its load, the compare or add, and the argmax's
     * index and sign kept (max) or the count (average). */
    out->vector_flops = 4.0 * (double)n->out[0]->numel * (double)(n->pool.k * n->pool.k);
  else if (n->n_out)
    out->vector_flops += vector_per_element(n) * (double)n->out[0]->numel;
}
