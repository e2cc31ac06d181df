/*
 * test-attention.c — the fused multi-head self-attention (dlrt_attention,
 * kernels/attention.h) on every device present (tap_for_each_device):
 *
 * - forward values and the gradient with respect to qkv against a plain
 *   reference on the host in double, which materialises each head's T x T
 *   probabilities (softmax with the causal mask) and differentiates them
 *   analytically: shapes with T = 1, T not a multiple of the kernels' tile
 *   of rows, one head, head sizes that are not powers of two (and tiles of
 *   25 and 7 rows), causal and not;
 * - the gradient by central finite differences (grad-check.c), alone and
 *   between two linear layers (c_attn and c_proj of GPT-2);
 * - a checkpointed training run, which computes the attention again in the
 *   backward pass: the same gradient bit for bit;
 * - fp16 and bf16 graphs (the kernels read and write the compute type and
 *   sum in fp32) against the fp32 graph;
 * - memory (cpu): the planned peak of a training step at the same tokens
 *   per batch is the same for T = 1024 as for T = 256 (within 10%, the
 *   issue's bar), and below one T x T matrix per head, while the unfused
 *   graph's (attention-unfused.c) grows with T^2.
 * - dropout on the probabilities (dlrt_attention_dropout): the mask read
 *   back through the op is 0 or 1 / (1 - p), drops about p of them and is
 *   the same on every device; with it the output and dqkv (the mask drawn
 *   again in the backward pass) match the host's reference; the gradient
 *   by finite differences; an evaluation drops nothing, bit for bit.
 * Also the kernels' exp (dlrt__attn_exp, arithmetic alone) against double,
 * and the builder's refusals. GELU's tanh form is tested with the other
 * activations in test-grad-ops.c.
 * Points: computed at run time (done_testing).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention-unfused.h"
#include "attention.h" /* the kernels as plain C: dlrt__attn_exp */
#include "dlrt.h"
#include "grad-check.h"
#include "tap.h"

typedef struct {
  int64_t batch, seq, heads, head_dim;
  int causal;
} attn_shape;

/* The kernels take tiles of 32 rows up to D = 32, then 1024 / D rows. */
static const attn_shape shapes[] = {
    {1, 1, 1, 8, 1},    /* T = 1 */
    {1, 1, 3, 5, 0},    /* T = 1, three heads */
    {2, 37, 3, 24, 1},  /* T = 37: a tile of 32 rows and one of 5; D 24 */
    {2, 37, 3, 24, 0},
    {1, 70, 1, 64, 1},  /* one head; tiles of 16 rows, the last of 6 */
    {2, 33, 2, 40, 0},  /* D 40: tiles of 25 rows */
    {1, 45, 2, 130, 1}, /* D 130: tiles of 7 rows */
};

static int64_t width_of(const attn_shape *s) { return 3 * s->heads * s->head_dim; }

static void shape_name(const attn_shape *s, char *out, size_t size) {
  snprintf(out, size, "B%lld T%lld heads %lld D %lld %s", (long long)s->batch,
           (long long)s->seq, (long long)s->heads, (long long)s->head_dim,
           s->causal ? "causal" : "not causal");
}

/* ---------------------------------------------------------------- host reference */

/* o = softmax(q k^T / sqrt(D), keys j <= i when causal) v for every head of
 * every sequence (o: B x T x C), materialising each head's T x T
 * probabilities; and when dout is given, the gradient of sum(o * dout) with
 * respect to qkv (dqkv: B x T x 3C) through those probabilities:
 *   dp_ij = dO_i . v_j,  ds_ij = p_ij (dp_ij - sum_k p_ik dp_ik),
 *   dq_i = scale sum_j ds_ij k_j,  dk_j = scale sum_i ds_ij q_i,
 *   dv_j = sum_i p_ij dO_i
 * (the softmax's own gradient: not FlashAttention's D_i = dO_i . o_i). */
static void host_attention_masked(const attn_shape *s, const float *qkv, const float *dout,
                                  const double *mask, double *o, double *dqkv);
static void host_attention(const attn_shape *s, const float *qkv, const float *dout, double *o,
                           double *dqkv) {
  host_attention_masked(s, qkv, dout, NULL, o, dqkv);
}

/* The same with dropout's factors z (B x heads x T x T: 0, or 1 / (1 - p)
 * for a kept probability; NULL: none), applied after the softmax:
 *   o_i = sum_j p_ij z_ij v_j,  ds_ij = p_ij (z_ij dp_ij - sum_k p_ik z_ik dp_ik),
 *   dv_j = sum_i p_ij z_ij dO_i. */
static void host_attention_masked(const attn_shape *s, const float *qkv, const float *dout,
                                  const double *mask, double *o, double *dqkv) {
  int64_t t = s->seq, d = s->head_dim, c = s->heads * d, w = 3 * c;
  double scale = 1.0 / sqrt((double)d);
  double *p = malloc((size_t)(t * t) * sizeof *p), *dp = malloc((size_t)(t * t) * sizeof *dp);
  if (!p || !dp) bail_out("out of host memory");
  if (dqkv) memset(dqkv, 0, (size_t)(s->batch * t * w) * sizeof *dqkv);
  for (int64_t b = 0; b < s->batch; b++)
    for (int64_t h = 0; h < s->heads; h++) {
      const float *q = qkv + b * t * w + h * d, *k = q + c, *v = q + 2 * c;
      const double *z = mask ? mask + (b * s->heads + h) * t * t : NULL;
      for (int64_t i = 0; i < t; i++) {
        int64_t keys = s->causal ? i + 1 : t;
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < t; j++) {
          double a = 0;
          for (int64_t x = 0; x < d; x++) a += (double)q[i * w + x] * k[j * w + x];
          p[i * t + j] = j < keys ? a * scale : -INFINITY;
          m = fmax(m, p[i * t + j]);
        }
        for (int64_t j = 0; j < t; j++) sum += p[i * t + j] = exp(p[i * t + j] - m);
        for (int64_t j = 0; j < t; j++) p[i * t + j] /= sum;
        for (int64_t x = 0; x < d; x++) {
          double a = 0;
          for (int64_t j = 0; j < t; j++) a += p[i * t + j] * (z ? z[i * t + j] : 1) * v[j * w + x];
          o[(b * t + i) * c + h * d + x] = a;
        }
      }
      if (!dout) continue;
      const float *go = dout + b * t * c + h * d;
      double *dq = dqkv + b * t * w + h * d, *dk = dq + c, *dv = dq + 2 * c;
      for (int64_t i = 0; i < t; i++) {
        double dot = 0;
        for (int64_t j = 0; j < t; j++) {
          double a = 0;
          for (int64_t x = 0; x < d; x++) a += (double)go[i * c + x] * v[j * w + x];
          dp[i * t + j] = a * (z ? z[i * t + j] : 1);
          dot += p[i * t + j] * dp[i * t + j];
        }
        for (int64_t j = 0; j < t; j++) dp[i * t + j] = p[i * t + j] * (dp[i * t + j] - dot);
      }
      for (int64_t i = 0; i < t; i++)
        for (int64_t j = 0; j < t; j++)
          for (int64_t x = 0; x < d; x++) {
            dq[i * w + x] += scale * dp[i * t + j] * k[j * w + x];
            dk[j * w + x] += scale * dp[i * t + j] * q[i * w + x];
            dv[j * w + x] += p[i * t + j] * (z ? z[i * t + j] : 1) * go[i * c + x];
          }
    }
  free(p);
  free(dp);
}

/* The largest |got - want| over n, and the largest |want|. */
static double max_error(const float *got, const double *want, int64_t n, double *largest,
                        int64_t *at) {
  double worst = 0;
  *largest = 0, *at = 0;
  for (int64_t i = 0; i < n; i++) {
    double err = fabs(got[i] - want[i]);
    if (!(err <= worst)) worst = worse(worst, err), *at = i;
    *largest = fmax(*largest, fabs(want[i]));
  }
  return worst;
}

static void random_values(float *v, int64_t n, float range, uint32_t seed) {
  for (int64_t i = 0; i < n; i++) v[i] = uniform(&seed, -range, range);
}

/* ---------------------------------------------------------------- against the host */

/* qkv (a parameter, so it has a gradient) -> attention -> sum(y * R): one
 * training run without an optimizer, then y and dqkv against the host.
 * qkv is U(-1.5, 1.5): the largest score (1.5^2 D / sqrt D = 2.25 sqrt D,
 * 26 for D = 130) makes peaked rows, where the online softmax's rescaling
 * matters.
 * Tolerances (fp32, unit roundoff u = 6e-8): a score sums D products, a
 * probability is exp of a score of up to 26 minus its row's maximum, an
 * output sums T of them: the errors measured stay below 1e-6 of the
 * largest output and 2e-6 of the largest gradient element; the bounds
 * allow 10 x that, 1e-5 and 2e-5 relative to the largest element. */
static void test_against_host(dlrt_device_t *dev, const attn_shape *s) {
  const char *spec = dlrt_device_spec(dev);
  char name[96];
  shape_name(s, name, sizeof name);
  int64_t c = s->heads * s->head_dim, w = width_of(s), rows = s->batch * s->seq;
  int64_t qkv_shape[3] = {s->batch, s->seq, w}, y_shape[3] = {s->batch, s->seq, c};
  float *qv = malloc((size_t)(rows * w) * sizeof *qv);
  float *rv = malloc((size_t)(rows * c) * sizeof *rv);
  float *y = malloc((size_t)(rows * c) * sizeof *y), *dq = malloc((size_t)(rows * w) * sizeof *dq);
  double *want_y = malloc((size_t)(rows * c) * sizeof *want_y);
  double *want_dq = malloc((size_t)(rows * w) * sizeof *want_dq);
  if (!qv || !rv || !y || !dq || !want_y || !want_dq) bail_out("out of host memory");
  random_values(qv, rows * w, 1.5f, 11u + (uint32_t)(s->seq * 7 + s->head_dim));
  random_values(rv, rows * c, 1.0f, 5u + (uint32_t)s->seq);
  host_attention(s, qv, rv, want_y, want_dq);

  dlrt_graph_t *g = new_graph();
  dlrt_tensor_t *qkv = dlrt_param(g, "qkv", 3, qkv_shape, DLRT_INIT_ZEROS, 0, 0);
  dlrt_tensor_t *att = dlrt_keep(g, dlrt_attention(g, qkv, (int)s->heads, s->causal));
  dlrt_tensor_t *r = dlrt_input(g, "R", DLRT_F32, 3, y_shape);
  int st = dlrt_graph_backward(g, dlrt_sum(g, dlrt_mul(g, att, r)));
  dlrt_tensor_t *grad = dlrt_keep(g, dlrt_grad(g, qkv));
  dlrt_exec_t *e = NULL;
  if (st == DLRT_OK && !grad) st = DLRT_ERR_STATE;
  if (st == DLRT_OK) {
    poison_cache(dev);
    st = dlrt_exec_create(g, dev, 1, &e);
  }
  if (st == DLRT_OK) st = dlrt_exec_write(e, qkv, qv, (size_t)(rows * w) * sizeof *qv);
  if (st == DLRT_OK) st = dlrt_exec_write(e, r, rv, (size_t)(rows * c) * sizeof *rv);
  if (st == DLRT_OK) st = dlrt_exec_run(e, DLRT_RUN_TRAIN);
  if (st == DLRT_OK) st = dlrt_exec_read(e, att, y, (size_t)(rows * c) * sizeof *y);
  if (st == DLRT_OK) st = dlrt_exec_read(e, grad, dq, (size_t)(rows * w) * sizeof *dq);
  if (tap_check(st, "%s %s: a training run of attention", spec, name)) {
    double largest;
    int64_t at;
    double err = max_error(y, want_y, rows * c, &largest, &at);
    if (!ok(err <= 1e-5 * fmax(largest, 1e-3), "%s %s: the output matches the host's "
            "materialised softmax: max error %.1e of the largest %.3g", spec, name, err, largest))
      diag("element %lld: got %.9g, want %.9g", (long long)at, y[at], want_y[at]);
    err = max_error(dq, want_dq, rows * w, &largest, &at);
    if (!ok(err <= 2e-5 * fmax(largest, 1e-3), "%s %s: dqkv matches the host's analytic "
            "gradient: max error %.1e of the largest %.3g", spec, name, err, largest))
      diag("element %lld (%s of row %lld): got %.9g, want %.9g", (long long)at,
           at % w < c ? "query" : at % w < 2 * c ? "key" : "value", (long long)(at / w), dq[at],
           want_dq[at]);
  }
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
  free(qv), free(rv), free(y), free(dq), free(want_y), free(want_dq);
}

/* The unfused graph (the memory test's and the benchmark's peer) computes
 * the same: a forward run against the host, as above. */
static void test_unfused(dlrt_device_t *dev) {
  const attn_shape *s = &shapes[2];
  const char *spec = dlrt_device_spec(dev);
  int64_t c = s->heads * s->head_dim, w = width_of(s), rows = s->batch * s->seq, t = s->seq;
  int64_t qkv_shape[3] = {s->batch, t, w}, mask_shape[2] = {t, t};
  float *qv = malloc((size_t)(rows * w) * sizeof *qv);
  float *mask = malloc((size_t)(t * t) * sizeof *mask);
  float *y = malloc((size_t)(rows * c) * sizeof *y);
  double *want = malloc((size_t)(rows * c) * sizeof *want);
  if (!qv || !mask || !y || !want) bail_out("out of host memory");
  random_values(qv, rows * w, 1.5f, 99);
  causal_mask(mask, t);
  host_attention(s, qv, NULL, want, NULL);
  dlrt_graph_t *g = new_graph();
  dlrt_tensor_t *qkv = dlrt_input(g, "qkv", DLRT_F32, 3, qkv_shape);
  dlrt_tensor_t *m = dlrt_input(g, "mask", DLRT_F32, 2, mask_shape);
  dlrt_tensor_t *att = dlrt_keep(g, unfused_attention(g, qkv, m, s->heads, s->head_dim));
  dlrt_exec_t *e = NULL;
  int st = dlrt_graph_status(g);
  if (st == DLRT_OK) st = dlrt_exec_create(g, dev, 1, &e);
  if (st == DLRT_OK) st = dlrt_exec_write(e, qkv, qv, (size_t)(rows * w) * sizeof *qv);
  if (st == DLRT_OK) st = dlrt_exec_write(e, m, mask, (size_t)(t * t) * sizeof *mask);
  if (st == DLRT_OK) st = dlrt_exec_run(e, DLRT_RUN_FORWARD);
  if (st == DLRT_OK) st = dlrt_exec_read(e, att, y, (size_t)(rows * c) * sizeof *y);
  if (tap_check(st, "%s: a forward run of the unfused attention graph", spec)) {
    double largest;
    int64_t at;
    double err = max_error(y, want, rows * c, &largest, &at);
    ok(err <= 1e-5 * fmax(largest, 1e-3), "%s: the unfused graph matches the host too: max "
       "error %.1e of the largest %.3g", spec, err, largest);
  }
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
  free(qv), free(mask), free(y), free(want);
}

/* ---------------------------------------------------------------- finite differences */

/* dqkv by central differences (grad-check.c's tolerance), for two heads of
 * D 3 over T 5 (B 2), causal and not, and T 33 (one tile of 32 rows and
 * one of 1) with D 2. */
static void test_finite_differences(dlrt_device_t *dev) {
  static const attn_shape small[] = {{2, 5, 2, 3, 1}, {2, 5, 2, 3, 0}, {1, 33, 1, 2, 1}};
  for (size_t k = 0; k < sizeof small / sizeof small[0]; k++) {
    const attn_shape *s = &small[k];
    char name[96];
    shape_name(s, name, sizeof name);
    gcase c;
    case_begin(&c, "attention %s", name);
    int64_t shape[3] = {s->batch, s->seq, width_of(s)};
    dlrt_tensor_t *qkv = cparam(&c, "qkv", 3, shape, VALUES_RANDOM);
    case_check(&c, dev, weighted(&c, dlrt_attention(c.g, qkv, (int)s->heads, s->causal)));
  }
}

/* GPT-2's attention block: x (B T x C) -> c_attn (linear, 3C) -> B x T x 3C
 * -> causal attention -> B T x C -> c_proj (linear): the gradients of both
 * weights and both biases by central differences. */
static dlrt_tensor_t *attention_block(dlrt_graph_t *g, dlrt_tensor_t *x, dlrt_tensor_t *w_attn,
                                      dlrt_tensor_t *b_attn, dlrt_tensor_t *w_proj,
                                      dlrt_tensor_t *b_proj, int64_t batch, int64_t seq,
                                      int heads) {
  int64_t shape[DLRT_MAX_DIMS];
  dlrt_tensor_shape(x, shape);
  int64_t c = shape[1], btw[3] = {batch, seq, 3 * c}, rows[2] = {batch * seq, c};
  dlrt_tensor_t *qkv = dlrt_reshape(g, dlrt_linear(g, x, w_attn, b_attn), 3, btw);
  dlrt_tensor_t *y = dlrt_reshape(g, dlrt_attention(g, qkv, heads, 1), 2, rows);
  return dlrt_linear(g, y, w_proj, b_proj);
}

static void test_block_finite_differences(dlrt_device_t *dev) {
  enum { B = 2, T = 3, C = 4, HEADS = 2 };
  int64_t xs[2] = {B * T, C}, was[2] = {3 * C, C}, bas[1] = {3 * C}, wps[2] = {C, C};
  int64_t bps[1] = {C};
  gcase c;
  case_begin(&c, "linear -> attention (causal, 2 heads) -> linear");
  dlrt_tensor_t *x = cinput(&c, "x", 2, xs);
  dlrt_tensor_t *wa = cparam(&c, "c_attn.weight", 2, was, VALUES_RANDOM);
  dlrt_tensor_t *ba = cparam(&c, "c_attn.bias", 1, bas, VALUES_RANDOM);
  dlrt_tensor_t *wp = cparam(&c, "c_proj.weight", 2, wps, VALUES_RANDOM);
  dlrt_tensor_t *bp = cparam(&c, "c_proj.bias", 1, bps, VALUES_RANDOM);
  case_check(&c, dev, weighted(&c, attention_block(c.g, x, wa, ba, wp, bp, B, T, HEADS)));
}

/* ---------------------------------------------------------------- checkpointing, precision */

typedef struct {
  float loss;
  float *grad; /* of c_attn.weight, 3C x C */
  dlrt_dtype att_dtype; /* the attention output's storage type */
} block_run;

enum { BLK_B = 2, BLK_T = 40, BLK_C = 48, BLK_HEADS = 2 };

/* One training run (no optimizer) of attention_block on fixed data in the
 * given compute type, with checkpointing every `every` forward nodes (0:
 * none). Returns the status. */
static int run_block(dlrt_device_t *dev, dlrt_dtype precision, int every, block_run *out) {
  int64_t xs[2] = {BLK_B * BLK_T, BLK_C}, was[2] = {3 * BLK_C, BLK_C};
  int64_t wps[2] = {BLK_C, BLK_C};
  int64_t nx = xs[0] * xs[1], nwa = was[0] * was[1], nwp = wps[0] * wps[1];
  float *xv = malloc((size_t)nx * sizeof *xv), *wav = malloc((size_t)nwa * sizeof *wav);
  float *wpv = malloc((size_t)nwp * sizeof *wpv), *rv = malloc((size_t)nx * sizeof *rv);
  if (!xv || !wav || !wpv || !rv) bail_out("out of host memory");
  random_values(xv, nx, 1.0f, 3);
  random_values(wav, nwa, 0.3f, 4); /* scores of a few units: peaked rows */
  random_values(wpv, nwp, 0.2f, 5);
  random_values(rv, nx, 1.0f, 6);
  dlrt_graph_t *g = new_graph();
  int st = dlrt_graph_set_precision(g, precision);
  dlrt_tensor_t *x = dlrt_input(g, "x", DLRT_F32, 2, xs);
  dlrt_tensor_t *wa = dlrt_param(g, "c_attn.weight", 2, was, DLRT_INIT_ZEROS, 0, 0);
  dlrt_tensor_t *wp = dlrt_param(g, "c_proj.weight", 2, wps, DLRT_INIT_ZEROS, 0, 0);
  dlrt_tensor_t *r = dlrt_input(g, "R", DLRT_F32, 2, xs);
  int64_t btw[3] = {BLK_B, BLK_T, 3 * BLK_C}, rows[2] = {BLK_B * BLK_T, BLK_C};
  dlrt_tensor_t *qkv = dlrt_reshape(g, dlrt_matmul(g, x, wa, 0, 1), 3, btw);
  dlrt_tensor_t *att = dlrt_attention(g, qkv, BLK_HEADS, 1);
  dlrt_tensor_t *y = dlrt_matmul(g, dlrt_reshape(g, att, 2, rows), wp, 0, 1);
  dlrt_tensor_t *loss = dlrt_sum(g, dlrt_mul(g, y, r));
  if (st == DLRT_OK) st = dlrt_graph_backward(g, loss);
  dlrt_tensor_t *grad = dlrt_keep(g, dlrt_grad(g, wa));
  dlrt_exec_t *e = NULL;
  out->att_dtype = att ? dlrt_tensor_dtype(att) : DLRT_F32;
  if (st == DLRT_OK && !grad) st = DLRT_ERR_STATE;
  if (st == DLRT_OK) st = dlrt_exec_create(g, dev, 1, &e);
  if (st == DLRT_OK && every) st = dlrt_exec_set_checkpointing(e, every);
  if (st == DLRT_OK) st = dlrt_exec_write(e, x, xv, (size_t)nx * sizeof *xv);
  if (st == DLRT_OK) st = dlrt_exec_write(e, r, rv, (size_t)nx * sizeof *rv);
  if (st == DLRT_OK) st = dlrt_exec_write(e, wa, wav, (size_t)nwa * sizeof *wav);
  if (st == DLRT_OK) st = dlrt_exec_write(e, wp, wpv, (size_t)nwp * sizeof *wpv);
  if (st == DLRT_OK) st = dlrt_exec_run(e, DLRT_RUN_TRAIN);
  if (st == DLRT_OK) st = dlrt_exec_read(e, loss, &out->loss, sizeof out->loss);
  out->grad = malloc((size_t)nwa * sizeof *out->grad);
  if (!out->grad) bail_out("out of host memory");
  if (st == DLRT_OK) st = dlrt_exec_read(e, grad, out->grad, (size_t)nwa * sizeof *out->grad);
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
  free(xv), free(wav), free(wpv), free(rv);
  return st;
}

/* Checkpointing every forward node (the attention among them) recomputes
 * it before its backward pass: the same loss and gradient bit for bit;
 * and fp16 / bf16 graphs, where the attention runs in the compute type,
 * against fp32: the loss within 1e-2 (fp16) or 5e-2 (bf16) of its
 * magnitude, dW within 5e-3 or 3e-2 of its largest element. The matmuls
 * round their operands to 11 or 8 bits and the attention its output and
 * gradient: the differences measured on the cpu and PoCL are 1.5e-3 and
 * 6e-3 (loss), 4.6e-4 and 4.8e-3 (dW), a sixth to a tenth of the bounds. */
static void test_checkpoint_and_precision(dlrt_device_t *dev) {
  const char *spec = dlrt_device_spec(dev);
  int64_t n = 3 * BLK_C * BLK_C;
  block_run plain = {0}, again = {0};
  int st = run_block(dev, DLRT_F32, 0, &plain);
  if (st == DLRT_OK) st = run_block(dev, DLRT_F32, 1, &again);
  if (tap_check(st, "%s: training runs of linear -> attention -> linear, checkpointed and not",
                spec))
    ok(plain.loss == again.loss && memcmp(plain.grad, again.grad, (size_t)n * sizeof(float)) == 0,
       "%s: checkpointing (the attention recomputed in the backward pass) gives the same loss "
       "and gradient bit for bit", spec);
  static const dlrt_dtype low[2] = {DLRT_F16, DLRT_BF16};
  for (int k = 0; k < 2 && st == DLRT_OK; k++) {
    block_run run = {0};
    const char *type = dlrt_dtype_name(low[k]);
    int rc = run_block(dev, low[k], 0, &run);
    if (tap_check(rc, "%s: a training run in %s", spec, type)) {
      is_str(dlrt_dtype_name(run.att_dtype), type, "%s: the attention runs in %s", spec, type);
      double loss_err = fabs(run.loss - plain.loss) / fmax(fabs(plain.loss), 1e-3);
      double grad_err = 0, largest = 0;
      for (int64_t i = 0; i < n; i++) {
        grad_err = worse(grad_err, fabs((double)run.grad[i] - plain.grad[i]));
        largest = fmax(largest, fabs(plain.grad[i]));
      }
      grad_err /= fmax(largest, 1e-6);
      double loss_tol = k ? 5e-2 : 1e-2, grad_tol = k ? 3e-2 : 5e-3;
      ok(loss_err <= loss_tol, "%s: the %s loss %.6g is within %.0e of fp32's %.6g "
         "(relative error %.1e)", spec, type, run.loss, loss_tol, plain.loss, loss_err);
      ok(grad_err <= grad_tol, "%s: the %s gradient of c_attn.weight is within %.0e of fp32's "
         "(error %.1e of its largest element)", spec, type, grad_tol, grad_err);
    }
    free(run.grad);
  }
  free(plain.grad);
  free(again.grad);
}

/* ---------------------------------------------------------------- memory */

/* The planned peak of a training step (qkv a parameter -> attention ->
 * sum(y * R), backward), fused or as the unfused graph, causal. */
static int planned_peak(dlrt_device_t *dev, int fused, int64_t batch, int64_t seq,
                        uint64_t *peak) {
  enum { HEADS = 2, D = 16 };
  int64_t qs[3] = {batch, seq, 3 * HEADS * D}, ys[3] = {batch, seq, HEADS * D};
  int64_t ms[2] = {seq, seq};
  dlrt_graph_t *g = new_graph();
  dlrt_tensor_t *qkv = dlrt_param(g, "qkv", 3, qs, DLRT_INIT_ZEROS, 0, 0);
  dlrt_tensor_t *y = fused ? dlrt_attention(g, qkv, HEADS, 1)
                           : unfused_attention(g, qkv, dlrt_input(g, "mask", DLRT_F32, 2, ms),
                                               HEADS, D);
  dlrt_tensor_t *r = dlrt_input(g, "R", DLRT_F32, 3, ys);
  int st = dlrt_graph_backward(g, dlrt_sum(g, dlrt_mul(g, y, r)));
  dlrt_exec_t *e = NULL;
  dlrt_exec_info info;
  if (st == DLRT_OK) st = dlrt_exec_create(g, dev, 1, &e);
  if (st == DLRT_OK) st = dlrt_exec_info_get(e, &info);
  if (st == DLRT_OK) *peak = info.planned_peak_bytes;
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
  return st;
}

static void test_memory(dlrt_device_t *dev) {
  const char *spec = dlrt_device_spec(dev);
  uint64_t fused_short = 0, fused_long = 0, unfused_short = 0, unfused_long = 0;
  int st = planned_peak(dev, 1, 4, 256, &fused_short);
  if (st == DLRT_OK) st = planned_peak(dev, 1, 1, 1024, &fused_long);
  if (st == DLRT_OK) st = planned_peak(dev, 0, 4, 256, &unfused_short);
  if (st == DLRT_OK) st = planned_peak(dev, 0, 1, 1024, &unfused_long);
  if (!tap_check(st, "%s: plans of fused and unfused attention at 1024 tokens per batch", spec))
    return;
  double fused_ratio = (double)fused_long / (double)fused_short;
  double unfused_ratio = (double)unfused_long / (double)unfused_short;
  uint64_t scores = (uint64_t)2 * 1024 * 1024 * sizeof(float); /* 2 heads x T x T */
  ok(fused_ratio <= 1.10, "%s: fused attention's planned peak for T 1024 (B 1) is %.3f x that "
     "for T 256 (B 4): %llu and %llu bytes", spec, fused_ratio, (unsigned long long)fused_long,
     (unsigned long long)fused_short);
  ok(fused_long < scores, "%s: and less than one T x T matrix per head (%llu bytes)", spec,
     (unsigned long long)scores);
  /* The same check sees T^2 where it is: the unfused graph's scores and
   * probabilities (and their gradients) are B heads T x T each. */
  ok(unfused_ratio >= 2.0, "%s: the unfused graph's grows %.2f x (%llu and %llu bytes)", spec,
     unfused_ratio, (unsigned long long)unfused_long, (unsigned long long)unfused_short);
}

/* ---------------------------------------------------------------- exp */

/* dlrt__attn_exp against exp in double over [-87.3, 88], every 1021st
 * float (by their bits, so each binade alike), within 2 ulp of the float
 * nearest e^x (Cephes' polynomial is within 1 ulp); and its ends: 0 below
 * -87.3 and at -inf, NaN for NaN. */
static void test_exp(void) {
  double worst = 0;
  float at = 0;
  int64_t checked = 0;
  uint32_t lo, hi;
  float bound = -87.3f, top = 88.0f;
  memcpy(&lo, &bound, 4), memcpy(&hi, &top, 4);
  for (int64_t k = 0;; k += 1021) {
    /* The negative floats from -87.3 up to -0, then the positive to 88. */
    uint32_t bits = k <= (int64_t)(lo & 0x7fffffffu) ? lo - (uint32_t)k
                                                     : (uint32_t)(k - (lo & 0x7fffffffu));
    if (!(bits & 0x80000000u) && bits > hi) break;
    float x;
    memcpy(&x, &bits, 4);
    double want = exp((double)x);
    float nearest = (float)want, got = dlrt__attn_exp(x);
    double ulp = (double)nextafterf(nearest, INFINITY) - nearest;
    double err = fabs(got - want) / ulp;
    if (!(err <= worst)) worst = worse(worst, err), at = x;
    checked++;
  }
  ok(worst <= 2.0, "the kernels' exp is within 2 ulp of e^x over [-87.3, 88] (%lld floats): "
     "worst %.2f ulp at %.9g", (long long)checked, worst, at);
  ok(dlrt__attn_exp(-INFINITY) == 0.0f && dlrt__attn_exp(-87.5f) == 0.0f &&
         dlrt__attn_exp(0.0f) == 1.0f && isnan(dlrt__attn_exp(NAN)),
     "exp(-inf) = exp(-87.5) = 0, exp(0) = 1, exp(NaN) is NaN");
}

/* ---------------------------------------------------------------- refusals */

static void expect_refusal(dlrt_graph_t *g, dlrt_tensor_t *y, int status, const char *what,
                           const char *needle) {
  int st = dlrt_graph_status(g);
  if (ok(y == NULL && st == status && strstr(dlrt_last_error(), needle) != NULL,
         "attention refuses %s: %s", what, dlrt_last_error()))
    return;
  diag("got a tensor: %s, status %s, message without \"%s\"", y ? "yes" : "no",
       dlrt_strerror(st), needle);
}

static void test_refusals(void) {
  static const struct {
    int ndim;
    int64_t shape[3];
    int heads, causal, status;
    const char *what, *needle;
  } cases[] = {
      {2, {4, 12}, 1, 1, DLRT_ERR_INVALID_ARG, "a 2-D qkv", "B x T x 3C"},
      {3, {1, 4, 20}, 2, 1, DLRT_ERR_INVALID_ARG, "a last axis of 20 for 2 heads",
       "not 3 x 2 heads"},
      {3, {1, 4, 2}, 1, 1, DLRT_ERR_INVALID_ARG, "a last axis of 2", "not 3 x 1 heads"},
      {3, {1, 4, 12}, 0, 1, DLRT_ERR_INVALID_ARG, "0 heads", "0 heads"},
      {3, {1, 4, 12}, 2, 2, DLRT_ERR_INVALID_ARG, "causal 2", "causal is 2"},
      {3, {1, 4, 3 * 1025}, 1, 1, DLRT_ERR_UNSUPPORTED, "a head of 1025", "up to 1024"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    dlrt_graph_t *g = new_graph();
    dlrt_tensor_t *x = dlrt_input(g, "qkv", DLRT_F32, cases[k].ndim, cases[k].shape);
    expect_refusal(g, dlrt_attention(g, x, cases[k].heads, cases[k].causal), cases[k].status,
                   cases[k].what, cases[k].needle);
    dlrt_graph_destroy(g);
  }
  int64_t s[3] = {1, 4, 12};
  dlrt_graph_t *g = new_graph();
  expect_refusal(g, dlrt_attention(g, dlrt_input(g, "ids", DLRT_I32, 3, s), 1, 1),
                 DLRT_ERR_INVALID_ARG, "an i32 qkv", "expected f32");
  ok(dlrt_attention(g, dlrt_input(g, "x", DLRT_F32, 3, s), 1, 1) == NULL,
     "after an error attention returns NULL for a valid qkv too");
  dlrt_graph_destroy(g);
  g = new_graph();
  expect_refusal(g, dlrt_attention(g, NULL, 1, 1), DLRT_ERR_INVALID_ARG, "a NULL qkv",
                 "input 0 is NULL");
  dlrt_graph_destroy(g);
}

/* ---------------------------------------------------------------- dropout */

/* Dropout on the probabilities (dlrt_attention_dropout, p = 0.25), whose
 * mask the kernels hash from (seed, step, op, head, i, j) and never store.
 * The mask is read back through the op itself: with values v_j one-hot
 * (key j of a group of D keys in column j mod D), o_i's column j mod D is
 * p_ij z_ij in a training run and p_ij in an evaluation (no dropout), so
 * their ratio is z_ij, 0 or 1 / (1 - p). Then, in the same executor (no
 * optimizer: the step and so the mask stay), random values: o and dqkv
 * against the host's reference with that mask; and the mask is the same
 * on every device (each compared with the first device's). */
#define DROP_P 0.25f
static const attn_shape drop_shapes[] = {
    {2, 37, 3, 24, 1}, /* tiles of 32 rows and of 5; two groups of keys */
    {2, 37, 3, 24, 0},
    {1, 45, 2, 130, 1}, /* D 130: tiles of 7 rows */
};
#define N_DROP_SHAPES (sizeof drop_shapes / sizeof drop_shapes[0])
static double *first_masks[N_DROP_SHAPES]; /* the first device's z, per shape */

typedef struct {
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_tensor_t *qkv, *att, *r, *grad;
} drop_graph;

static int drop_build(dlrt_device_t *dev, const attn_shape *s, drop_graph *d) {
  int64_t c = s->heads * s->head_dim;
  int64_t qkv_shape[3] = {s->batch, s->seq, width_of(s)}, y_shape[3] = {s->batch, s->seq, c};
  d->g = new_graph();
  d->qkv = dlrt_param(d->g, "qkv", 3, qkv_shape, DLRT_INIT_ZEROS, 0, 0);
  d->att = dlrt_keep(d->g, dlrt_attention_dropout(d->g, d->qkv, (int)s->heads, s->causal,
                                                  DROP_P));
  d->r = dlrt_input(d->g, "R", DLRT_F32, 3, y_shape);
  int st = dlrt_graph_backward(d->g, dlrt_sum(d->g, dlrt_mul(d->g, d->att, d->r)));
  d->grad = dlrt_keep(d->g, dlrt_grad(d->g, d->qkv));
  if (st == DLRT_OK && !d->grad) st = DLRT_ERR_STATE;
  if (st == DLRT_OK) {
    poison_cache(dev);
    st = dlrt_exec_create(d->g, dev, 7, &d->e);
  }
  return st;
}

/* One run on qkv values qv (and R = rv): o into y, dqkv into dq (training). */
static int drop_run(drop_graph *d, const attn_shape *s, dlrt_run_mode mode, const float *qv,
                    const float *rv, float *y, float *dq) {
  int64_t rows = s->batch * s->seq, c = s->heads * s->head_dim, w = width_of(s);
  int st = dlrt_exec_write(d->e, d->qkv, qv, (size_t)(rows * w) * sizeof *qv);
  if (st == DLRT_OK) st = dlrt_exec_write(d->e, d->r, rv, (size_t)(rows * c) * sizeof *rv);
  if (st == DLRT_OK) st = dlrt_exec_run(d->e, mode);
  if (st == DLRT_OK) st = dlrt_exec_read(d->e, d->att, y, (size_t)(rows * c) * sizeof *y);
  if (st == DLRT_OK && dq) st = dlrt_exec_read(d->e, d->grad, dq, (size_t)(rows * w) * sizeof *dq);
  return st;
}

static void test_dropout(dlrt_device_t *dev, size_t which) {
  const attn_shape *s = &drop_shapes[which];
  const char *spec = dlrt_device_spec(dev);
  char name[96];
  shape_name(s, name, sizeof name);
  int64_t t = s->seq, d = s->head_dim, c = s->heads * d, w = width_of(s), rows = s->batch * t;
  int64_t n_mask = s->batch * s->heads * t * t;
  float *qv = malloc((size_t)(rows * w) * sizeof *qv), *rv = calloc((size_t)(rows * c), 4);
  float *y = malloc((size_t)(rows * c) * sizeof *y), *y0 = malloc((size_t)(rows * c) * sizeof *y0);
  float *dq = malloc((size_t)(rows * w) * sizeof *dq);
  double *mask = calloc((size_t)n_mask, sizeof *mask);
  double *want_y = malloc((size_t)(rows * c) * sizeof *want_y);
  double *want_dq = malloc((size_t)(rows * w) * sizeof *want_dq);
  if (!qv || !rv || !y || !y0 || !dq || !mask || !want_y || !want_dq) bail_out("out of memory");
  drop_graph g = {0};
  int st = drop_build(dev, s, &g);
  /* Queries and keys of U(-0.5, 0.5): no probability far below the others. */
  random_values(qv, rows * w, 0.5f, 21u + (uint32_t)which);
  double keep = 1.0 / (1.0 - DROP_P), worst_ratio = 0;
  int64_t counted = 0, dropped = 0;
  for (int64_t g0 = 0; g0 < t && st == DLRT_OK; g0 += d) {
    for (int64_t b = 0; b < s->batch; b++) /* values: key j one-hot in column j - g0 */
      for (int64_t j = 0; j < t; j++)
        for (int64_t x = 0; x < c; x++)
          qv[(b * t + j) * w + 2 * c + x] = j >= g0 && j < g0 + d && x % d == j - g0;
    if ((st = drop_run(&g, s, DLRT_RUN_TRAIN, qv, rv, y, NULL)) < 0 ||
        (st = drop_run(&g, s, DLRT_RUN_FORWARD, qv, rv, y0, NULL)) < 0)
      break;
    for (int64_t b = 0; b < s->batch; b++)
      for (int64_t h = 0; h < s->heads; h++)
        for (int64_t i = 0; i < t; i++)
          for (int64_t j = g0; j < g0 + d && j < t && (!s->causal || j <= i); j++) {
            int64_t at = (b * t + i) * c + h * d + (j - g0);
            double ratio = y[at] / (double)y0[at], z = ratio > keep / 2 ? keep : 0;
            worst_ratio = worse(worst_ratio, fabs(ratio - z));
            mask[((b * s->heads + h) * t + i) * t + j] = z;
            counted++;
            dropped += z == 0;
          }
  }
  if (tap_check(st, "%s %s: training and evaluation runs with attention dropout %.2f", spec,
                name, DROP_P)) {
    double fraction = (double)dropped / (double)counted;
    ok(worst_ratio <= 1e-4 && fabs(fraction - DROP_P) <= 0.04, "%s %s: each probability is "
       "dropped or scaled by 1 / (1 - p) (worst %.1e off), %.3f of %lld dropped", spec, name,
       worst_ratio, fraction, (long long)counted);
    if (!first_masks[which]) {
      first_masks[which] = mask;
      mask = NULL;
    } else {
      ok(memcmp(first_masks[which], mask, (size_t)n_mask * sizeof *mask) == 0,
         "%s %s: the same mask as the first device's", spec, name);
    }
    const double *z = mask ? mask : first_masks[which];
    random_values(qv, rows * w, 1.5f, 31u + (uint32_t)which);
    random_values(rv, rows * c, 1.0f, 41u + (uint32_t)which);
    host_attention_masked(s, qv, rv, z, want_y, want_dq);
    st = drop_run(&g, s, DLRT_RUN_TRAIN, qv, rv, y, dq);
    if (tap_check(st, "%s %s: a training run with dropout on random values", spec, name)) {
      double largest;
      int64_t at;
      double err = max_error(y, want_y, rows * c, &largest, &at);
      ok(err <= 1e-5 * fmax(largest, 1e-3), "%s %s: the output matches the host's with the "
         "same mask: max error %.1e of the largest %.3g", spec, name, err, largest);
      err = max_error(dq, want_dq, rows * w, &largest, &at);
      ok(err <= 2e-5 * fmax(largest, 1e-3), "%s %s: dqkv matches the host's with the same "
         "mask (drawn again in the backward pass): max error %.1e of the largest %.3g", spec,
         name, err, largest);
    }
  }
  dlrt_exec_destroy(g.e);
  dlrt_graph_destroy(g.g);
  free(qv), free(rv), free(y), free(y0), free(dq), free(mask), free(want_y), free(want_dq);
}

/* An evaluation with dropout drops nothing: the same bits as dlrt_attention
 * (the kernels' path without dropout). */
static void test_dropout_evaluation(dlrt_device_t *dev) {
  const attn_shape *s = &shapes[2];
  const char *spec = dlrt_device_spec(dev);
  int64_t c = s->heads * s->head_dim, w = width_of(s), rows = s->batch * s->seq;
  int64_t qkv_shape[3] = {s->batch, s->seq, w};
  float *qv = malloc((size_t)(rows * w) * sizeof *qv);
  float *y[2] = {malloc((size_t)(rows * c) * sizeof(float)),
                 malloc((size_t)(rows * c) * sizeof(float))};
  if (!qv || !y[0] || !y[1]) bail_out("out of host memory");
  random_values(qv, rows * w, 1.5f, 77);
  int st = DLRT_OK;
  for (int k = 0; k < 2 && st == DLRT_OK; k++) {
    dlrt_graph_t *g = new_graph();
    dlrt_tensor_t *qkv = dlrt_input(g, "qkv", DLRT_F32, 3, qkv_shape);
    dlrt_tensor_t *att = dlrt_keep(g, k ? dlrt_attention_dropout(g, qkv, (int)s->heads, 1, 0.5f)
                                        : dlrt_attention(g, qkv, (int)s->heads, 1));
    dlrt_exec_t *e = NULL;
    st = dlrt_graph_status(g);
    if (st == DLRT_OK) st = dlrt_exec_create(g, dev, 1, &e);
    if (st == DLRT_OK) st = dlrt_exec_write(e, qkv, qv, (size_t)(rows * w) * sizeof *qv);
    if (st == DLRT_OK) st = dlrt_exec_run(e, DLRT_RUN_FORWARD);
    if (st == DLRT_OK) st = dlrt_exec_read(e, att, y[k], (size_t)(rows * c) * sizeof(float));
    dlrt_exec_destroy(e);
    dlrt_graph_destroy(g);
  }
  if (tap_check(st, "%s: evaluations of attention with and without dropout", spec))
    ok(memcmp(y[0], y[1], (size_t)(rows * c) * sizeof(float)) == 0, "%s: an evaluation with "
       "attention dropout 0.5 gives dlrt_attention's bits", spec);
  free(qv), free(y[0]), free(y[1]);
}

/* dqkv by central differences through the dropped probabilities: the
 * training runs of one executor without an optimizer draw one mask. */
static void test_dropout_finite_differences(dlrt_device_t *dev) {
  static const attn_shape small[] = {{2, 5, 2, 3, 1}, {1, 33, 1, 2, 0}};
  for (size_t k = 0; k < sizeof small / sizeof small[0]; k++) {
    const attn_shape *s = &small[k];
    char name[96];
    shape_name(s, name, sizeof name);
    gcase c;
    case_begin(&c, "attention dropout 0.3 %s", name);
    c.fd_mode = DLRT_RUN_TRAIN;
    int64_t shape[3] = {s->batch, s->seq, width_of(s)};
    dlrt_tensor_t *qkv = cparam(&c, "qkv", 3, shape, VALUES_RANDOM);
    case_check(&c, dev, weighted(&c, dlrt_attention_dropout(c.g, qkv, (int)s->heads, s->causal,
                                                            0.3f)));
  }
}

/* ---------------------------------------------------------------- main */

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  double start = now_s();
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) test_against_host(dev, &shapes[k]);
  test_unfused(dev);
  test_finite_differences(dev);
  test_block_finite_differences(dev);
  test_checkpoint_and_precision(dev);
  for (size_t k = 0; k < N_DROP_SHAPES; k++) test_dropout(dev, k);
  test_dropout_evaluation(dev);
  test_dropout_finite_differences(dev);
  /* A plan does not depend on the device: made once, on the cpu. */
  if (tap_device_is_cpu(dev)) test_memory(dev);
  diag("%s: %.2f s", spec, now_s() - start);
}

int main(void) {
  test_exp();
  test_refusals();
  tap_for_each_device(run_device, NULL);
  for (size_t k = 0; k < N_DROP_SHAPES; k++) free(first_masks[k]);
  dlrt_shutdown();
  return done_testing();
}
