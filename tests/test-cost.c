/*
 * test-cost.c — the cost model of graph nodes (lib/graph/cost.c, built from
 * its own source: it is internal), over nodes made by hand so that every
 * figure is worked out from the shapes here: a batched GEMM, a convolution
 * with its im2col workspace, causal attention forward and backward, the
 * fused LM head, Adam in place, an elementwise op in 16 bits, and a view
 * that launches nothing.
 * Points: done_testing.
 */
#include <math.h>
#include <string.h>

#include "graph/cost.h"
#include "tap.h"

static dlrt_tensor_t tensors[16];
static int used;

/* A tensor of `dtype` with `ndim` dimensions (its numel their product). */
static dlrt_tensor_t *tensor(dlrt_dtype dtype, int ndim, const int64_t *shape) {
  dlrt_tensor_t *t = &tensors[used++];
  memset(t, 0, sizeof *t);
  t->dtype = dtype;
  t->ndim = ndim;
  t->numel = 1;
  for (int i = 0; i < ndim; i++) t->shape[i] = shape[i], t->numel *= shape[i];
  t->owner = t;
  return t;
}

static dlrt__node node(dlrt__op_kind op, int n_in, dlrt_tensor_t **in, int n_out,
                       dlrt_tensor_t **out) {
  dlrt__node n;
  memset(&n, 0, sizeof n);
  n.op = op;
  n.n_in = n_in, n.n_out = n_out;
  for (int i = 0; i < n_in; i++) n.in[i] = in[i];
  for (int i = 0; i < n_out; i++) n.out[i] = out[i];
  return n;
}

static int same(double got, double want) { return fabs(got - want) <= 1e-12 * fabs(want); }

static void check(const char *what, const dlrt__node *n, double matmul, double vector,
                  double read, double written, int launches) {
  dlrt__op_cost c;
  dlrt__node_cost(n, &c);
  ok(same(c.matmul_flops, matmul) && same(c.vector_flops, vector) && same(c.bytes_read, read) &&
         same(c.bytes_written, written) && c.launches == launches,
     "%s: %g matmul + %g vector FLOPs, %g B read, %g written, %d launches (got %g + %g, "
     "%g, %g, %d)", what, matmul, vector, read, written, launches, c.matmul_flops,
     c.vector_flops, c.bytes_read, c.bytes_written, c.launches);
}

int main(void) {
  /* A batch of 2 GEMMs, 3 x 7 times 7 x 5: 2 * 2 * 3 * 5 * 7 FLOPs; reads
   * 42 + 70 floats, writes 30. */
  used = 0;
  dlrt_tensor_t *a = tensor(DLRT_F32, 3, (int64_t[]){2, 3, 7});
  dlrt_tensor_t *b = tensor(DLRT_F32, 3, (int64_t[]){2, 7, 5});
  dlrt_tensor_t *c = tensor(DLRT_F32, 3, (int64_t[]){2, 3, 5});
  dlrt__node n = node(DLRT__OP_BMM, 2, (dlrt_tensor_t *[]){a, b}, 1, (dlrt_tensor_t *[]){c});
  n.bmm.m = 3, n.bmm.n = 5, n.bmm.k = 7, n.bmm.batch = 2;
  check("bmm 2 x (3x7 . 7x5) fp32", &n, 420, 0, 448, 120, 1);
  dlrt__op_cost cost;
  dlrt__node_cost(&n, &cost);
  ok(cost.matmul_dtype == DLRT_F32, "bmm: at the fp32 GEMM rate");
  /* In bf16 the same FLOPs at the bf16 rate, half the bytes. */
  a->dtype = b->dtype = c->dtype = DLRT_BF16;
  check("bmm in bf16", &n, 420, 0, 224, 60, 1);
  dlrt__node_cost(&n, &cost);
  ok(cost.matmul_dtype == DLRT_BF16, "bmm in bf16: at the bf16 GEMM rate");

  /* A convolution of 2 images of 3 x 5 x 5 by 4 filters of 3 x 3 (no
   * padding: 3 x 3 out): 2 * 4 * 27 * 18 FLOPs; the columns, 27 x 18
   * floats, written and read once through the workspace. */
  used = 0;
  dlrt_tensor_t *x = tensor(DLRT_F32, 4, (int64_t[]){2, 3, 5, 5});
  dlrt_tensor_t *w = tensor(DLRT_F32, 4, (int64_t[]){4, 3, 3, 3});
  dlrt_tensor_t *y = tensor(DLRT_F32, 4, (int64_t[]){2, 4, 3, 3});
  dlrt_tensor_t *ws = tensor(DLRT_F32, 2, (int64_t[]){27, 9});
  n = node(DLRT__OP_CONV, 2, (dlrt_tensor_t *[]){x, w}, 2, (dlrt_tensor_t *[]){y, ws});
  n.conv = (struct dlrt__conv_params){.n = 2, .c = 3, .h = 5, .w = 5, .kh = 3, .kw = 3,
                                      .stride = 1, .oh = 3, .ow = 3};
  double cols = 27.0 * 18 * 4;
  check("conv 2x3x5x5 by 4x3x3x3", &n, 3888, 0, (150 + 108) * 4 + cols, 72 * 4 + cols, 1);
  /* Its weight gradient: the same GEMM (dW is out0). */
  dlrt_tensor_t *dy = tensor(DLRT_F32, 4, (int64_t[]){2, 4, 3, 3});
  dlrt_tensor_t *dw = tensor(DLRT_F32, 4, (int64_t[]){4, 3, 3, 3});
  n = node(DLRT__OP_CONV_GRAD_W, 2, (dlrt_tensor_t *[]){dy, x}, 2, (dlrt_tensor_t *[]){dw, ws});
  n.conv = (struct dlrt__conv_params){.n = 2, .c = 3, .h = 5, .w = 5, .kh = 3, .kw = 3,
                                      .stride = 1, .oh = 3, .ow = 3};
  check("conv weight gradient", &n, 3888, 0, (72 + 150) * 4 + cols, 108 * 4 + cols, 1);

  /* Causal attention, batch 1, 4 positions, 2 heads of 8: 1 * 2 * 16 / 2
   * pairs, 4 * 16 * 8 FLOPs forward, 2.5 times that backward. */
  used = 0;
  dlrt_tensor_t *qkv = tensor(DLRT_F32, 3, (int64_t[]){1, 4, 48});
  dlrt_tensor_t *o = tensor(DLRT_F32, 3, (int64_t[]){1, 4, 16});
  dlrt_tensor_t *lse = tensor(DLRT_F32, 3, (int64_t[]){1, 2, 4});
  n = node(DLRT__OP_ATTENTION, 1, (dlrt_tensor_t *[]){qkv}, 2, (dlrt_tensor_t *[]){o, lse});
  n.attention = (struct dlrt__attention_params){.batch = 1, .seq = 4, .heads = 2,
                                                .head_dim = 8, .causal = 1};
  check("causal attention", &n, 512, 80, 192 * 4, (64 + 8) * 4, 1);
  dlrt_tensor_t *dqkv = tensor(DLRT_F32, 3, (int64_t[]){1, 4, 48});
  dlrt_tensor_t *dd = tensor(DLRT_F32, 3, (int64_t[]){1, 2, 4});
  n = node(DLRT__OP_ATTENTION_GRAD, 4, (dlrt_tensor_t *[]){o, qkv, o, lse}, 2,
           (dlrt_tensor_t *[]){dqkv, dd});
  n.attention = (struct dlrt__attention_params){.batch = 1, .seq = 4, .heads = 2,
                                                .head_dim = 8, .causal = 1};
  check("causal attention backward", &n, 1280, 128, (64 + 192 + 64 + 8) * 4, (192 + 8) * 4,
        1);

  /* The fused head: 4 rows of width 6 against 10 classes: three GEMMs of
   * 2 * 40 * 6; its fp32 logits 40, written and read twice. */
  used = 0;
  dlrt_tensor_t *hx = tensor(DLRT_F32, 2, (int64_t[]){4, 6});
  dlrt_tensor_t *hw = tensor(DLRT_F32, 2, (int64_t[]){10, 6});
  dlrt_tensor_t *lab = tensor(DLRT_I32, 1, (int64_t[]){4});
  dlrt_tensor_t *loss = tensor(DLRT_F32, 1, (int64_t[]){1});
  dlrt_tensor_t *hdx = tensor(DLRT_F32, 2, (int64_t[]){4, 6});
  dlrt_tensor_t *hdw = tensor(DLRT_F32, 2, (int64_t[]){10, 6});
  dlrt_tensor_t *hws = tensor(DLRT_F32, 1, (int64_t[]){48});
  n = node(DLRT__OP_LINEAR_XENT, 3, (dlrt_tensor_t *[]){hx, hw, lab}, 4,
           (dlrt_tensor_t *[]){loss, hdx, hdw, hws});
  n.linear_xent = (struct dlrt__linear_xent_params){.rows = 4, .classes = 10, .width = 6,
                                                    .chunk = 4};
  check("fused LM head", &n, 1440, 200, (24 + 60 + 4) * 4 + 320, (1 + 24 + 60) * 4 + 320, 1);

  /* Adam over 10 fp32 parameters in place: reads p, m, v, g (160 B),
   * writes p, m, v (120 B); 12 FLOPs a parameter. */
  used = 0;
  dlrt_tensor_t *st[4];
  for (int i = 0; i < 4; i++) st[i] = tensor(DLRT_F32, 1, (int64_t[]){10});
  n = node(DLRT__OP_ADAM, 4, st, 0, NULL);
  check("adam over 10 parameters", &n, 0, 120, 160, 120, 1);

  /* ReLU over 100 fp16 values: 1 FLOP each, 200 B each way. */
  used = 0;
  dlrt_tensor_t *rx = tensor(DLRT_F16, 1, (int64_t[]){100});
  dlrt_tensor_t *ry = tensor(DLRT_F16, 1, (int64_t[]){100});
  n = node(DLRT__OP_RELU, 1, (dlrt_tensor_t *[]){rx}, 1, (dlrt_tensor_t *[]){ry});
  check("relu over 100 fp16", &n, 0, 100, 200, 200, 1);

  /* A view runs nothing. */
  dlrt_tensor_t *v = tensor(DLRT_F16, 2, (int64_t[]){10, 10});
  v->owner = rx;
  n = node(DLRT__OP_VIEW, 1, (dlrt_tensor_t *[]){rx}, 1, (dlrt_tensor_t *[]){v});
  check("a view", &n, 0, 0, 0, 0, 0);
  return done_testing();
}
