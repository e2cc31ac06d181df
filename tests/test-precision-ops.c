/*
 * test-precision-ops.c — the 16-bit kernels mixed precision runs a transformer
 * with, forward and backward, on every device present (tap_for_each_device),
 * against the same graph in fp32: layer norm (16 bits in and out, and fp32 in
 * with the compute type out), tanh, sigmoid, GELU and GELU's tanh form,
 * dropout, the broadcast ops (add, sub, mul, div of a row vector) and the
 * fused softmax + cross-entropy, in fp16 and bf16.
 *
 * Each op reads h = P I: a parameter P times the identity, which the 16-bit
 * graph computes in its compute type (a matmul), and whose values are
 * multiples of 1/64 below 4 in magnitude, so that fp32, fp16 and bf16 hold
 * them exactly; the other inputs are such values too. The loss is sum(y r),
 * so the gradient reaching the op is r, exactly, in both graphs. Both graphs
 * thus hand the op the same values, and a typed kernel computes the fp32
 * kernel's floats and rounds each once when it stores it (kernels/dialect.h):
 * so the 16-bit graph's output y and its gradient of h must be the fp32
 * graph's rounded to the compute type, bit for bit, and its fp32 outputs
 * (layer norm's scale and shift gradients, the mixed layer norm's gradient of
 * P, the loss of the cross-entropy) equal to the fp32 graph's. tanh and
 * sigmoid differentiate from their output, which the 16-bit graph keeps in
 * its type: their gradient must be r f'(y) of that output, rounded. A broadcast
 * operand's gradient sums 16-bit terms: it must be within the rounding of
 * those terms and of the sum, half an ulp of the type of each (bound
 * derived below). The rounding itself is the dialect's (dialect.h: checked
 * against an independent host rounding in test-backend-ops).
 *
 * Points: computed at run time (done_testing).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"
/* The dialect's rounding to f16 and bf16, as the kernels round. */
#include "dialect.h"

enum { ROWS = 6, COLS = 40, N = ROWS * COLS };

typedef enum {
  OP_LAYER_NORM,
  OP_LAYER_NORM_F32_IN, /* fp32 in, the compute type out (its reader a matmul) */
  OP_TANH,
  OP_SIGMOID,
  OP_GELU,
  OP_GELU_TANH,
  OP_DROPOUT,
  OP_ADD,
  OP_SUB,
  OP_MUL,
  OP_DIV,
  OP_XENT,
  OPS
} op_kind;

static const char *const op_names[OPS] = {
    "layer_norm",  "layer_norm of fp32 x", "tanh", "sigmoid", "gelu", "gelu_tanh", "dropout",
    "add (a row)", "sub (a row)",          "mul (a row)", "div (a row)", "cross_entropy"};

typedef struct {
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_tensor_t *p, *eye, *r, *labels, *row, *gamma, *beta;
  dlrt_tensor_t *y, *loss, *dh, *drow, *dgamma, *dbeta;
} op_graph;

static void op_graph_free(op_graph *o) {
  dlrt_exec_destroy(o->e);
  dlrt_graph_destroy(o->g);
  memset(o, 0, sizeof *o);
}

/* The shared inputs, each a multiple of 1/64 with at most 8 significant bits. */
static float p_value(int i) { return (float)((i * 37) % 255 - 127) / 64.0f; }
static float r_value(int i) { return (float)((i * 13) % 31 - 15) / 16.0f; }
static float gamma_value(int i) { return 0.5f + (float)(i % 7) / 8.0f; }
static float beta_value(int i) { return (float)(i % 5 - 2) / 8.0f; }
static float row_value(int i) { return 0.5f + (float)(i % 9) / 8.0f; } /* nonzero: div */

static int op_graph_make(dlrt_device_t *dev, dlrt_dtype precision, op_kind op, op_graph *o) {
  memset(o, 0, sizeof *o);
  int rc = dlrt_graph_create(&o->g);
  if (rc < 0) return rc;
  dlrt_graph_t *g = o->g;
  if ((rc = dlrt_graph_set_precision(g, precision)) < 0) return rc;
  int64_t ps[2] = {ROWS, COLS}, es[2] = {COLS, COLS}, cs[1] = {COLS}, ls[1] = {ROWS};
  o->p = dlrt_param(g, "p", 2, ps, DLRT_INIT_ZEROS, COLS, COLS);
  o->eye = dlrt_input(g, "eye", DLRT_F32, 2, es);
  o->r = dlrt_input(g, "r", DLRT_F32, 2, ps);
  o->gamma = dlrt_param(g, "gamma", 1, cs, DLRT_INIT_ONES, 1, 1);
  o->beta = dlrt_param(g, "beta", 1, cs, DLRT_INIT_ZEROS, 1, 1);
  o->row = dlrt_param(g, "row", 1, cs, DLRT_INIT_ONES, 1, 1);
  /* h: in the compute type (a matmul's output), but for the layer norm of fp32 x. */
  dlrt_tensor_t *h = op == OP_LAYER_NORM_F32_IN ? o->p : dlrt_matmul(g, o->p, o->eye, 0, 0);
  switch (op) {
  case OP_LAYER_NORM: o->y = dlrt_layer_norm(g, h, o->gamma, o->beta, 1e-5f); break;
  case OP_LAYER_NORM_F32_IN:
    /* Only a matmul reads it: it writes the compute type (which the matmul
     * hands on unchanged: times the identity). */
    o->y = dlrt_matmul(g, dlrt_layer_norm(g, h, o->gamma, o->beta, 1e-5f), o->eye, 0, 0);
    break;
  case OP_TANH: o->y = dlrt_tanh(g, h); break;
  case OP_SIGMOID: o->y = dlrt_sigmoid(g, h); break;
  case OP_GELU: o->y = dlrt_gelu(g, h); break;
  case OP_GELU_TANH: o->y = dlrt_gelu_tanh(g, h); break;
  case OP_DROPOUT: o->y = dlrt_dropout(g, h, 0.3f); break;
  case OP_ADD: o->y = dlrt_add(g, h, o->row); break;
  case OP_SUB: o->y = dlrt_sub(g, h, o->row); break;
  case OP_MUL: o->y = dlrt_mul(g, h, o->row); break;
  case OP_DIV: o->y = dlrt_div(g, h, o->row); break;
  case OP_XENT: break;
  default: return DLRT_ERR_INVALID_ARG;
  }
  if (op == OP_XENT) {
    o->labels = dlrt_input(g, "labels", DLRT_I32, 1, ls);
    o->loss = dlrt_cross_entropy(g, h, o->labels, 0.1f);
  } else {
    dlrt_keep(g, o->y);
    o->loss = dlrt_sum(g, dlrt_mul(g, o->y, o->r));
  }
  if ((rc = dlrt_graph_status(g)) < 0) return rc;
  if ((rc = dlrt_graph_backward(g, o->loss)) < 0) return rc;
  o->dh = dlrt_keep(g, dlrt_grad(g, op == OP_LAYER_NORM_F32_IN ? o->p : h));
  if (op == OP_LAYER_NORM || op == OP_LAYER_NORM_F32_IN) {
    o->dgamma = dlrt_keep(g, dlrt_grad(g, o->gamma));
    o->dbeta = dlrt_keep(g, dlrt_grad(g, o->beta));
  }
  if (op >= OP_ADD && op <= OP_DIV) o->drow = dlrt_keep(g, dlrt_grad(g, o->row));
  if ((rc = dlrt_graph_status(g)) < 0) return rc;
  if ((rc = dlrt_exec_create(g, dev, 5, &o->e)) < 0) return rc;
  float p[N], eye[COLS * COLS] = {0}, r[N], gamma[COLS], beta[COLS], row[COLS];
  int32_t labels[ROWS];
  for (int i = 0; i < N; i++) p[i] = p_value(i), r[i] = r_value(i);
  for (int i = 0; i < COLS; i++) {
    eye[i * COLS + i] = 1.0f;
    gamma[i] = gamma_value(i), beta[i] = beta_value(i), row[i] = row_value(i);
  }
  for (int i = 0; i < ROWS; i++) labels[i] = (i * 7) % COLS;
  if ((rc = dlrt_exec_write(o->e, o->p, p, sizeof p)) < 0 ||
      (rc = dlrt_exec_write(o->e, o->eye, eye, sizeof eye)) < 0 ||
      (rc = dlrt_exec_write(o->e, o->gamma, gamma, sizeof gamma)) < 0 ||
      (rc = dlrt_exec_write(o->e, o->beta, beta, sizeof beta)) < 0 ||
      (rc = dlrt_exec_write(o->e, o->row, row, sizeof row)) < 0)
    return rc;
  if (op == OP_XENT) return dlrt_exec_write(o->e, o->labels, labels, sizeof labels);
  return dlrt_exec_write(o->e, o->r, r, sizeof r);
}

/* A kept tensor's n values as floats (16-bit ones widened). */
static int read_floats(op_graph *o, dlrt_tensor_t *t, float *out, int n) {
  dlrt_dtype type = dlrt_tensor_dtype(t);
  if (type == DLRT_F32) return dlrt_exec_read(o->e, t, out, (size_t)n * sizeof *out);
  uint16_t bits[N];
  int rc = dlrt_exec_read(o->e, t, bits, (size_t)n * sizeof *bits);
  for (int i = 0; i < n && rc == DLRT_OK; i++)
    out[i] = type == DLRT_F16 ? dlrt_half_to_float(bits[i]) : DLRT_LD_BF16(bits, i);
  return rc;
}

static float round_to(dlrt_dtype type, float x) {
  if (type == DLRT_F32) return x;
  if (type == DLRT_F16) return dlrt_half_to_float(dlrt_float_to_half(x));
  DLRT_U16 b = dlrt_float_to_bf16(x);
  return DLRT_LD_BF16(&b, 0);
}

/* got[i] == want[i] rounded to `type`, bit for bit (NaN as NaN); -1 when all are,
 * else the first index that is not. */
static int first_unrounded(dlrt_dtype type, const float *got, const float *want, int n) {
  for (int i = 0; i < n; i++) {
    float w = round_to(type, want[i]);
    if (memcmp(&got[i], &w, sizeof w) != 0 && !(isnan(got[i]) && isnan(w))) return i;
  }
  return -1;
}

static void rounded(const char *what, dlrt_dtype type, const float *got, const float *want,
                    int n) {
  int at = first_unrounded(type, got, want, n);
  char how[48];
  snprintf(how, sizeof how, type == DLRT_F32 ? "the fp32 graph's values" : "the fp32 graph's "
           "values rounded to %s", dlrt_dtype_name(type));
  if (at < 0) {
    ok(1, "%s: %s, bit for bit (%d of them)", what, how, n);
    return;
  }
  ok(0, "%s: %s, bit for bit (element %d is %.9g, the fp32 graph's %.9g, rounded %.9g)", what,
     how, at, got[at], want[at], round_to(type, want[at]));
}

/* One op in one compute type, against fp32 (ref, run already). */
static void compare_op(dlrt_device_t *dev, const char *spec, dlrt_dtype low, op_kind op,
                       op_graph *ref) {
  const char *tn = dlrt_dtype_name(low);
  char what[128];
  op_graph o;
  int rc = op_graph_make(dev, low, op, &o);
  if (rc == DLRT_OK) rc = dlrt_exec_run(o.e, DLRT_RUN_TRAIN);
  if (!tap_check_op(rc, "%s %s %s: a training step", spec, tn, op_names[op])) {
    op_graph_free(&o);
    return;
  }
  float got[N], want[N];
  dlrt_dtype dh_type = op == OP_LAYER_NORM_F32_IN ? DLRT_F32 : low;
  is_int(dlrt_tensor_dtype(o.dh), dh_type, "%s %s %s: the gradient of its input is %s", spec,
         tn, op_names[op], dlrt_dtype_name(dh_type));
  if (op == OP_XENT) {
    float loss, ref_loss;
    if (tap_check(read_floats(&o, o.loss, &loss, 1), "%s %s: read the loss", spec, tn) &&
        tap_check(read_floats(ref, ref->loss, &ref_loss, 1), "%s: read the fp32 loss", spec))
      ok(loss == ref_loss, "%s %s cross_entropy: the loss is the fp32 graph's, %.9g "
         "(computed in fp32 from the same logits)", spec, tn, loss);
  } else if (tap_check(read_floats(&o, o.y, got, N), "%s %s: read y", spec, tn) &&
             tap_check(read_floats(ref, ref->y, want, N), "%s: read the fp32 y", spec)) {
    snprintf(what, sizeof what, "%s %s %s forward", spec, tn, op_names[op]);
    rounded(what, low, got, want, N);
  }
  if (tap_check(read_floats(&o, o.dh, got, N), "%s %s: read dh", spec, tn) &&
      tap_check(read_floats(ref, ref->dh, want, N), "%s: read the fp32 dh", spec)) {
    snprintf(what, sizeof what, "%s %s %s gradient", spec, tn, op_names[op]);
    if (op == OP_TANH || op == OP_SIGMOID) {
      /* These differentiate from their output, which the 16-bit graph keeps in
       * its type: dh = r f'(y) with its own y, in float as the kernel does it. */
      float y[N];
      if (tap_check(read_floats(&o, o.y, y, N), "%s %s: read y", spec, tn))
        for (int i = 0; i < N; i++)
          want[i] = r_value(i) * (op == OP_TANH ? 1.0f - y[i] * y[i] : y[i] * (1.0f - y[i]));
      strncat(what, " (from its 16-bit output)", sizeof what - strlen(what) - 1);
    }
    rounded(what, dh_type, got, want, N);
  }
  if (o.dgamma) {
    dlrt_tensor_t *mine[2] = {o.dgamma, o.dbeta}, *theirs[2] = {ref->dgamma, ref->dbeta};
    for (int k = 0; k < 2; k++)
      if (tap_check(read_floats(&o, mine[k], got, COLS), "%s %s: read d%s", spec, tn,
                    k ? "beta" : "gamma") &&
          tap_check(read_floats(ref, theirs[k], want, COLS), "%s: read d%s", spec,
                    k ? "beta" : "gamma")) {
        snprintf(what, sizeof what, "%s %s %s d%s (fp32)", spec, tn, op_names[op],
                 k ? "beta" : "gamma");
        rounded(what, DLRT_F32, got, want, COLS);
      }
  }
  if (o.drow && tap_check(read_floats(&o, o.drow, got, COLS), "%s %s: read drow", spec, tn) &&
      tap_check(read_floats(ref, ref->drow, want, COLS), "%s: read the fp32 drow", spec)) {
    /* drow[c] sums t[r, c] over the rows: r for add, -r for sub, r h for mul and
     * -r h / row^2 for div. The 16-bit graph rounds each term to its type (mul,
     * div) and the sum: |got - want| <= u (sum |t| + |want|), u = 2^-11 (f16) or
     * 2^-8 (bf16), half an ulp each. */
    double u = low == DLRT_F16 ? 0x1p-11 : 0x1p-8, worst = 0;
    for (int c = 0; c < COLS; c++) {
      double terms = 0;
      for (int rr = 0; rr < ROWS; rr++) {
        int i = rr * COLS + c;
        double t = op == OP_MUL   ? r_value(i) * p_value(i)
                   : op == OP_DIV ? -r_value(i) * p_value(i) / (row_value(c) * row_value(c))
                                  : r_value(i);
        terms += fabs(t);
      }
      double e = fabs((double)got[c] - want[c]) / (u * (terms + fabs(want[c])) + 1e-30);
      if (e > worst) worst = e;
    }
    ok(worst <= 1.0, "%s %s %s: the row's gradient within the rounding of its 16-bit terms "
       "and sum (worst %.2f of the bound)", spec, tn, op_names[op], worst);
  }
  op_graph_free(&o);
}

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  for (int op = 0; op < OPS; op++) {
    op_graph ref;
    int rc = op_graph_make(dev, DLRT_F32, (op_kind)op, &ref);
    if (rc == DLRT_OK) rc = dlrt_exec_run(ref.e, DLRT_RUN_TRAIN);
    if (tap_check_op(rc, "%s fp32 %s: a training step", spec, op_names[op])) {
      compare_op(dev, spec, DLRT_F16, (op_kind)op, &ref);
      compare_op(dev, spec, DLRT_BF16, (op_kind)op, &ref);
    }
    op_graph_free(&ref);
  }
}

int main(void) {
  tap_for_each_device(run_device, NULL);
  return done_testing();
}
