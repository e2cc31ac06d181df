/*
 * test-cpu-native.c — the CPU backend's native kernels (backends/cpu/cpu_native.h)
 * against the portable dialect's kernels they replace (the headers of kernels/,
 * compiled here as plain C), on the same inputs, for every instruction set this CPU
 * runs (generic, avx2, avx512): layer and batch norm and their gradients, the
 * activations and their gradients, broadcast ops, column sums, softmax, softmax +
 * cross-entropy, the Adam update, the embedding's gradient, and fused attention
 * forward and backward in f32, f16 and bf16, at shapes with tails (columns not a
 * multiple of 16, T not a multiple of the blocks, T past one block of keys, head
 * sizes 8 to 130; with dropout on the probabilities in f32 and bf16, the same
 * hashed mask), and sampling's attention_decode. The norms (each pair of storage
 * types), activations, broadcast ops and column sums in f16 and bf16 are held to the
 * native f32 kernels instead, on the
 * same values: their outputs must be the f32 kernels' floats rounded once, bit for bit
 * (one template computes both).
 *
 * Error measure: max |native - dialect| / max(max |dialect|, the scale of the terms
 * an output sums) over each output (normalised, as test-backend-ops); the
 * activations per element, against |dialect|, for the GELUs max(|dialect|, |x| / 10)
 * (as test-grad-ops: 1 + tanh(u) cancels for x < 0), for the gradients max(|dialect|,
 * |dy|). Bounds, derived: sums of k terms in two orders differ by up to 2 (2 sqrt(k)
 * + 2) 2^-24 of the sum of their |terms| (sum_bound; test-backend-ops derives the
 * one-sided bound), plus a few roundings; 1e-6 for the activations (the native exp
 * and tanh are within 1.33 ulp, libm's within 1, then a few roundings); 1e-5 for
 * attention (T terms per output, as test-attention bounds it against double), and
 * 4e-3 / 2e-2 for f16 / bf16 attention (one rounding of the output, 2^-11 and 2^-8,
 * on top). The broadcast ops, sum_cols with beta 0, adam_update and embedding_grad
 * compute the same operations in the same order: exactly equal (adam must be: see
 * cpu_native_optim.h).
 *
 * Then determinism: the outputs are the same bits for 1 and 3 threads, and the avx2
 * and avx512 builds give the same bits (both contract into FMAs; sums keep 16 lanes
 * on both).
 *
 * Built from the backend's own sources (its symbols are hidden in libdlrt): see
 * Makefile.am. Points: computed at run time (done_testing).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_native.h"
#include "cpu_pool.h"
#include "kernel_table.h"
/* The dialect's kernels, the reference. */
#include "attention.h"
#include "nn.h"
#include "norm.h"
#include "optim.h"
#include "shape.h"
#include "tap.h"
#include "typed.h"

/* ---------------------------------------------------------------- helpers */

static uint32_t rng_state;
static float uniform(float lo, float hi) {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 17, rng_state ^= rng_state << 5;
  return lo + (hi - lo) * (float)(rng_state >> 8) / 16777216.0f;
}
static float *randoms(size_t n, float lo, float hi) {
  float *p = malloc(n * sizeof *p + 64);
  if (!p) bail_out("out of memory");
  for (size_t i = 0; i < n; i++) p[i] = uniform(lo, hi);
  return p;
}
static float *zeros(size_t n) {
  float *p = calloc(n + 16, sizeof *p);
  if (!p) bail_out("out of memory");
  return p;
}

/* A launch's arguments, as lib/device passes them. */
typedef struct {
  dlrt__arg a[DLRT__MAX_ARGS];
  int n;
} args;
static void arg_buf(args *x, void *p) {
  x->a[x->n++] = (dlrt__arg){.kind = DLRT__ARG_BUFFER, .mem = {p, p}, .elem_size = 4};
}
static void arg_i64(args *x, int64_t v) {
  x->a[x->n++] = (dlrt__arg){.kind = DLRT__ARG_I64, .i = v};
}
static void arg_f32(args *x, float v) {
  x->a[x->n++] = (dlrt__arg){.kind = DLRT__ARG_F32, .f = v};
}

/* The outputs of one family of cases on one instruction set, concatenated
 * (compared across thread counts and instruction sets), and the worst error
 * against the dialect divided by its bound. */
typedef struct {
  unsigned char *bytes;
  size_t len, cap;
  double worst; /* error / bound, the largest */
  char where[160];
} result;

static void keep(result *r, const void *p, size_t bytes) {
  if (r->len + bytes > r->cap) {
    r->cap = (r->len + bytes) * 2;
    r->bytes = realloc(r->bytes, r->cap);
    if (!r->bytes) bail_out("out of memory");
  }
  memcpy(r->bytes + r->len, p, bytes);
  r->len += bytes;
}

/* The largest |p[i]| of n. */
static double largest(const float *p, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs(p[i]));
  return m;
}

/* What two sums of k terms in different orders (fp32, the error of each
 * below (2 sqrt(k) + 2) 2^-24 of the sum of the |terms|, as test-backend-ops
 * derives it) may differ by, relative to that sum; plus 4 roundings. */
static double sum_bound(int64_t k) { return (2 * (2 * sqrt((double)k) + 2) + 4) * 0x1p-24; }

/* Normalised error of n outputs (as floats) against the reference: max |got
 * - want| / max(max |want|, floor), over the bound; `floor` is the scale of
 * the terms an output sums (so that cancellation is not counted against the
 * kernel). NaN where one is and the other is not counts as infinite. */
static void compare(result *r, const char *what, const float *got, const float *want, size_t n,
                    double floor, double bound) {
  double big = fmax(1e-30, floor), err = 0;
  for (size_t i = 0; i < n; i++) big = fmax(big, fabs(want[i]));
  for (size_t i = 0; i < n; i++) {
    double e = isnan(got[i]) != isnan(want[i]) ? INFINITY
               : isnan(got[i])                 ? 0
                                               : fabs((double)got[i] - want[i]) / big;
    err = fmax(err, e);
  }
  if (!(err / bound <= r->worst)) {
    r->worst = err / bound;
    snprintf(r->where, sizeof r->where, "%s: error %.2e (bound %.0e)", what, err, bound);
  }
}

static int run(const cpu_native_isa *isa, int kernel, args *x) {
  if (!isa->fn[kernel]) bail_out("%s has no native kernel %d", isa->name, kernel);
  return isa->fn[kernel](x->a);
}

/* ---------------------------------------------------------------- norms */

static void family_norm(const cpu_native_isa *isa, result *r) {
  static const int64_t shapes[][2] = {{5, 1}, {7, 13}, {3, 128}, {2, 771}, {40, 48}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int per_row = 0; per_row < 2; per_row++) {
      int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols, k = per_row ? rows : cols;
      rng_state = 17 + (uint32_t)s;
      float *x = randoms(n, -2, 3), *dy = randoms(n, -1, 1);
      float *gamma = randoms(k, 0.5f, 1.5f), *beta = randoms(k, -1, 1);
      float *y = zeros(n), *mean = zeros(rows), *rstd = zeros(rows), *dx = zeros(n);
      float *dg = zeros(k), *db = zeros(k);
      float *y0 = zeros(n), *mean0 = zeros(rows), *rstd0 = zeros(rows), *dx0 = zeros(n);
      float *dg0 = zeros(k), *db0 = zeros(k);
      char what[96];
      snprintf(what, sizeof what, "%s %lld x %lld", per_row ? "batch norm" : "layer norm",
               (long long)rows, (long long)cols);
      args a = {0};
      arg_buf(&a, y), arg_buf(&a, mean), arg_buf(&a, rstd), arg_buf(&a, x), arg_buf(&a, gamma);
      arg_buf(&a, beta), arg_i64(&a, rows), arg_i64(&a, cols), arg_f32(&a, 1e-5f);
      arg_i64(&a, per_row);
      run(isa, DLRT__K_norm_rows_f32, &a);
      dlrt_k_norm_rows_f32(0, rows, y0, mean0, rstd0, x, gamma, beta, rows, cols, 1e-5f, per_row);
      /* The gradients from the dialect's statistics: both see the same inputs. */
      args g = {0};
      arg_buf(&g, dx), arg_buf(&g, dy), arg_buf(&g, x), arg_buf(&g, mean0), arg_buf(&g, rstd0);
      arg_buf(&g, gamma), arg_i64(&g, rows), arg_i64(&g, cols), arg_i64(&g, per_row);
      run(isa, DLRT__K_norm_rows_grad_f32, &g);
      dlrt_k_norm_rows_grad_f32(0, rows, dx0, dy, x, mean0, rstd0, gamma, rows, cols, per_row);
      args f = {0};
      arg_buf(&f, dg), arg_buf(&f, db), arg_buf(&f, dy), arg_buf(&f, x), arg_buf(&f, mean0);
      arg_buf(&f, rstd0), arg_i64(&f, rows), arg_i64(&f, cols), arg_i64(&f, per_row);
      run(isa, DLRT__K_norm_affine_grad_f32, &f);
      dlrt_k_norm_affine_grad_f32(0, k, dg0, db0, dy, x, mean0, rstd0, rows, cols, per_row);
      /* Scales: the mean sums x, the gradient of x sums rstd dy gamma (and its
       * products with xhat, |xhat| <= sqrt(cols)), dgamma and dbeta sum dy xhat and
       * dy over the other axis. The statistics' errors carry into y and dx. */
      double sx = largest(x, (size_t)n), sg = 0, sdy = 0, sdg = 0;
      for (int64_t i = 0; i < n; i++) {
        int64_t row = i / cols, col = i % cols;
        double term = fabs(dy[i] * gamma[per_row ? row : col]) * rstd0[row];
        sg = fmax(sg, term * sqrt((double)cols));
      }
      for (int64_t q = 0; q < k; q++) {
        double sum_g = 0, sum_b = 0;
        for (int64_t t = 0; t < (per_row ? cols : rows); t++) {
          int64_t row = per_row ? q : t, col = per_row ? t : q, i = row * cols + col;
          sum_g += fabs(dy[i] * (x[i] - mean0[row]) * rstd0[row]);
          sum_b += fabs(dy[i]);
        }
        sdg = fmax(sdg, sum_g), sdy = fmax(sdy, sum_b);
      }
      double row_sum = sum_bound(cols), col_sum = sum_bound(per_row ? cols : rows);
      compare(r, what, mean, mean0, (size_t)rows, sx, row_sum);
      compare(r, what, rstd, rstd0, (size_t)rows, 0, 2 * row_sum);
      compare(r, what, y, y0, (size_t)n, 0, 4 * row_sum);
      compare(r, what, dx, dx0, (size_t)n, sg, 4 * row_sum);
      compare(r, what, dg, dg0, (size_t)k, sdg, col_sum);
      compare(r, what, db, db0, (size_t)k, sdy, col_sum);
      float *outs[] = {y, mean, rstd, dx, dg, db};
      size_t sizes[] = {(size_t)n, (size_t)rows, (size_t)rows, (size_t)n, (size_t)k, (size_t)k};
      for (int i = 0; i < 6; i++) keep(r, outs[i], sizes[i] * sizeof(float));
      float *all[] = {x, dy, gamma, beta, y, mean, rstd, dx, dg, db, y0, mean0, rstd0, dx0,
                      dg0, db0};
      for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    }
}

/* ---------------------------------------------------------------- activations */

static void family_activation(const cpu_native_isa *isa, result *r) {
  static const char *const names[] = {"tanh", "sigmoid", "gelu", "gelu_tanh"};
  int64_t n = 4099;
  rng_state = 5;
  float *x = randoms((size_t)n, -9, 9), *dy = randoms((size_t)n, -1, 1);
  x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-6f, x[3] = -1e-6f, x[4] = 30.0f, x[5] = -30.0f;
  x[6] = 100.0f, x[7] = -100.0f, x[8] = NAN, x[9] = INFINITY, x[10] = -INFINITY;
  float *y = zeros((size_t)n), *y0 = zeros((size_t)n);
  for (int kind = 0; kind < 4; kind++)
    for (int grad = 0; grad < 2; grad++) {
      /* The gradients of tanh and sigmoid take their output, which lies in [-1, 1]. */
      float *in = x;
      float *out_x = zeros((size_t)n);
      if (grad && kind < 2) {
        dlrt_k_activation_f32(0, n, out_x, x, n, kind);
        in = out_x;
      }
      args a = {0};
      arg_buf(&a, y);
      if (grad) arg_buf(&a, dy);
      arg_buf(&a, in), arg_i64(&a, n), arg_i64(&a, kind);
      run(isa, grad ? DLRT__K_activation_grad_f32 : DLRT__K_activation_f32, &a);
      if (grad) dlrt_k_activation_grad_f32(0, n, y0, dy, in, n, kind);
      else dlrt_k_activation_f32(0, n, y0, in, n, kind);
      /* Per element, against |want| (plus the smallest normal, for outputs that
       * underflow); for the GELUs max(|want|, |x| / 10) (they cancel for x < 0); for the
       * gradients max(|want|, |dy|): f' is a difference of terms of size about 1 (1 - y^2,
       * 0.5 (1 + tanh u) ...), which an FMA or a rounding leaves within an ulp of 1. */
      double worst = 0;
      int64_t at = 0;
      for (int64_t i = 0; i < n; i++) {
        double want = y0[i], scale = fmax(fabs(want), 1.2e-38);
        if (kind >= 2 && !grad) scale = fmax(scale, 0.1 * fabs(x[i]));
        if (grad) scale = fmax(scale, fabs(dy[i]));
        double e = isnan(y[i]) != isnan(y0[i]) ? INFINITY
                   : isnan(y[i]) || y[i] == y0[i] ? 0
                                                  : fabs(y[i] - want) / scale;
        if (e > worst) worst = e, at = i;
      }
      if (worst / 1e-6 > r->worst) {
        r->worst = worst / 1e-6;
        snprintf(r->where, sizeof r->where, "%s%s at x = %.9g: %.9g, the dialect %.9g: error "
                 "%.2e (bound 1e-6)", names[kind], grad ? " gradient" : "", in[at], y[at],
                 y0[at], worst);
      }
      keep(r, y, (size_t)n * sizeof *y);
      free(out_x);
    }
  free(x), free(dy), free(y), free(y0);
}

/* ---------------------------------------------------------------- broadcast, sums */

static void family_bcast_sums(const cpu_native_isa *isa, result *r) {
  static const int64_t shapes[][2] = {{1, 1}, {7, 3}, {33, 17}, {64, 128}, {5, 300}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    int64_t rows = shapes[s][0], m = shapes[s][1], n = rows * m;
    rng_state = 99 + (uint32_t)s;
    float *a = randoms((size_t)n, -2, 2), *b = randoms((size_t)m, 0.5f, 2);
    float *dy = randoms((size_t)n, -1, 1);
    float *y = zeros((size_t)n), *y0 = zeros((size_t)n);
    char what[96];
    for (int op = 0; op < 4; op++) {
      args x = {0};
      arg_buf(&x, y), arg_buf(&x, a), arg_buf(&x, b), arg_i64(&x, n), arg_i64(&x, m);
      arg_i64(&x, op);
      run(isa, DLRT__K_bcast_f32, &x);
      dlrt_k_bcast_f32(0, n, y0, a, b, n, m, op);
      snprintf(what, sizeof what, "bcast op %d, %lld x %lld", op, (long long)rows, (long long)m);
      compare(r, what, y, y0, (size_t)n, 0, 1e-300); /* exact */
      keep(r, y, (size_t)n * sizeof *y);
      if (op < 2) continue;
      args g = {0};
      arg_buf(&g, y), arg_buf(&g, dy), arg_buf(&g, a), arg_buf(&g, b), arg_i64(&g, n);
      arg_i64(&g, m), arg_i64(&g, op);
      run(isa, DLRT__K_bcast_grad_b_f32, &g);
      dlrt_k_bcast_grad_b_f32(0, n, y0, dy, a, b, n, m, op);
      snprintf(what, sizeof what, "bcast_grad_b op %d, %lld x %lld", op, (long long)rows,
               (long long)m);
      compare(r, what, y, y0, (size_t)n, 0, 1e-300);
      keep(r, y, (size_t)n * sizeof *y);
    }
    /* Column sums of a (rows x m), beta 0 (exact: the same order) and 0.5. */
    for (int with_beta = 0; with_beta < 2; with_beta++) {
      float *col = randoms((size_t)m, -1, 1), *col0 = malloc((size_t)m * sizeof *col0 + 64);
      memcpy(col0, col, (size_t)m * sizeof *col);
      float beta = with_beta ? 0.5f : 0.0f;
      args x = {0};
      arg_buf(&x, col), arg_buf(&x, a), arg_i64(&x, rows), arg_i64(&x, m), arg_f32(&x, beta);
      run(isa, DLRT__K_sum_cols_f32, &x);
      dlrt_k_sum_cols_f32(0, m, col0, a, rows, m, beta);
      snprintf(what, sizeof what, "sum_cols %lld x %lld beta %g", (long long)rows, (long long)m,
               beta);
      compare(r, what, col, col0, (size_t)m, 0, with_beta ? 4 * 0x1p-24 : 1e-300);
      keep(r, col, (size_t)m * sizeof *col);
      free(col), free(col0);
    }
    free(a), free(b), free(dy), free(y), free(y0);
  }
}

/* ---------------------------------------------------------------- softmax */

static void family_softmax(const cpu_native_isa *isa, result *r) {
  static const int64_t shapes[][2] = {{3, 1}, {4, 17}, {6, 300}, {2, 1030}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
    rng_state = 7 + (uint32_t)s;
    float *z = randoms((size_t)n, -8, 8), *dy = randoms((size_t)n, -1, 1);
    float *y = zeros((size_t)n), *y0 = zeros((size_t)n);
    float *dx = zeros((size_t)n), *dx0 = zeros((size_t)n);
    float *loss = zeros((size_t)rows), *loss0 = zeros((size_t)rows);
    int *labels = malloc((size_t)rows * sizeof *labels);
    for (int64_t i = 0; i < rows; i++) labels[i] = (int)((i * 7919) % cols);
    char what[96];
    snprintf(what, sizeof what, "softmax %lld x %lld", (long long)rows, (long long)cols);
    args a = {0};
    arg_buf(&a, y), arg_buf(&a, z), arg_i64(&a, rows), arg_i64(&a, cols);
    run(isa, DLRT__K_softmax, &a);
    dlrt_k_softmax(0, rows, y0, z, rows, cols);
    /* Softmax: each p carries the error of its row's sum (relative, as the sum's
     * terms are positive) and of its exp; the gradient that of sum dy y, whose terms
     * are at most max |dy| y. */
    double bound = sum_bound(cols) + 4 * 0x1p-24;
    compare(r, what, y, y0, (size_t)n, 0, bound);
    args g = {0};
    arg_buf(&g, dx), arg_buf(&g, dy), arg_buf(&g, y0), arg_i64(&g, rows), arg_i64(&g, cols);
    run(isa, DLRT__K_softmax_grad, &g);
    dlrt_k_softmax_grad(0, rows, dx0, dy, y0, rows, cols);
    compare(r, what, dx, dx0, (size_t)n, largest(y0, (size_t)n) * largest(dy, (size_t)n), bound);
    keep(r, y, (size_t)n * sizeof *y), keep(r, dx, (size_t)n * sizeof *dx);
    for (int smooth = 0; smooth < 2 && isa->fn[DLRT__K_softmax_xent]; smooth++) {
      float eps = smooth ? 0.1f : 0.0f, scale = 1.0f / (float)rows;
      snprintf(what, sizeof what, "softmax_xent %lld x %lld smoothing %g", (long long)rows,
               (long long)cols, eps);
      args x = {0};
      arg_buf(&x, z), arg_buf(&x, labels), arg_buf(&x, loss), arg_buf(&x, dx);
      arg_i64(&x, rows), arg_i64(&x, cols), arg_f32(&x, eps), arg_f32(&x, scale);
      run(isa, DLRT__K_softmax_xent, &x);
      dlrt_k_softmax_xent(0, rows, z, labels, loss0, dx0, rows, cols, eps, scale);
      /* loss = lse - sum q z: the terms are at most max |z|; dz = (p - q) scale. */
      compare(r, what, loss, loss0, (size_t)rows, largest(z, (size_t)n), bound);
      compare(r, what, dx, dx0, (size_t)n, scale, bound);
      keep(r, loss, (size_t)rows * sizeof *loss), keep(r, dx, (size_t)n * sizeof *dx);
    }
    free(z), free(dy), free(y), free(y0), free(dx), free(dx0), free(loss), free(loss0);
    free(labels);
  }
}

/* ---------------------------------------------------------------- adam, embedding_grad */

/* Both exactly: adam must equal the dialect's kernel, which the spilling executor runs on
 * the host, bit for bit; embedding_grad adds in the same order. */
static void family_adam_embedding(const cpu_native_isa *isa, result *r) {
  static const int64_t counts[] = {1, 15, 16, 1000, 70001};
  for (size_t s = 0; s < sizeof counts / sizeof *counts; s++)
    for (int decoupled = 0; decoupled < 2; decoupled++) {
      int64_t n = counts[s];
      rng_state = 31 + (uint32_t)s;
      float *p = randoms((size_t)n, -1, 1), *m = randoms((size_t)n, -0.1f, 0.1f);
      float *v = randoms((size_t)n, 0, 0.01f), *g = randoms((size_t)n, -1, 1);
      float *p0 = zeros((size_t)n), *m0 = zeros((size_t)n), *v0 = zeros((size_t)n);
      memcpy(p0, p, (size_t)n * 4), memcpy(m0, m, (size_t)n * 4), memcpy(v0, v, (size_t)n * 4);
      float hp[8] = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1e-3f / (1 - 0.9f * 0.9f),
                     sqrtf(1 - 0.999f * 0.999f), 0.5f};
      args x = {0};
      arg_buf(&x, p), arg_buf(&x, m), arg_buf(&x, v), arg_buf(&x, g), arg_i64(&x, n);
      for (int i = 0; i < 8; i++) arg_f32(&x, hp[i]);
      arg_i64(&x, decoupled);
      run(isa, DLRT__K_adam_update, &x);
      dlrt_k_adam_update(0, n, p0, m0, v0, g, n, hp[0], hp[1], hp[2], hp[3], hp[4], hp[5], hp[6],
                         hp[7], decoupled);
      char what[64];
      snprintf(what, sizeof what, "adam%s, %lld values", decoupled ? "w" : "", (long long)n);
      compare(r, what, p, p0, (size_t)n, 0, 1e-300);
      compare(r, what, m, m0, (size_t)n, 0, 1e-300);
      compare(r, what, v, v0, (size_t)n, 0, 1e-300);
      keep(r, p, (size_t)n * 4), keep(r, m, (size_t)n * 4), keep(r, v, (size_t)n * 4);
      free(p), free(m), free(v), free(g), free(p0), free(m0), free(v0);
    }
  static const int64_t shapes[][3] = {{1, 1, 1}, {37, 5, 13}, {300, 200, 64}, {129, 1000, 48}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    int64_t count = shapes[s][0], vocab = shapes[s][1], dim = shapes[s][2];
    rng_state = 71 + (uint32_t)s;
    float *dy = randoms((size_t)(count * dim), -1, 1);
    float *t = randoms((size_t)(vocab * dim), 5, 6), *t0 = zeros((size_t)(vocab * dim));
    int *ids = malloc((size_t)count * sizeof *ids);
    for (int64_t k = 0; k < count; k++) ids[k] = (int)((k * 7 + k * k) % (vocab + 2)) - 1;
    args x = {0};
    arg_buf(&x, t), arg_buf(&x, dy), arg_buf(&x, ids), arg_i64(&x, count), arg_i64(&x, vocab);
    arg_i64(&x, dim);
    run(isa, DLRT__K_embedding_grad, &x);
    dlrt_k_embedding_grad(0, vocab, t0, dy, ids, count, vocab, dim);
    char what[96];
    snprintf(what, sizeof what, "embedding_grad %lld ids (some outside), vocabulary %lld, dim %lld",
             (long long)count, (long long)vocab, (long long)dim);
    compare(r, what, t, t0, (size_t)(vocab * dim), 0, 1e-300);
    keep(r, t, (size_t)(vocab * dim) * 4);
    /* Added to a gradient so far (a tied table), in place and not. */
    float *base = randoms((size_t)(vocab * dim), -2, 2), *acc = zeros((size_t)(vocab * dim));
    float *acc0 = zeros((size_t)(vocab * dim)), *same = malloc((size_t)(vocab * dim) * 4);
    memcpy(same, base, (size_t)(vocab * dim) * 4);
    args y = {0};
    arg_buf(&y, acc), arg_buf(&y, base), arg_buf(&y, dy), arg_buf(&y, ids), arg_i64(&y, count);
    arg_i64(&y, vocab), arg_i64(&y, dim);
    run(isa, DLRT__K_embedding_grad_acc, &y);
    args z = {0};
    arg_buf(&z, same), arg_buf(&z, same), arg_buf(&z, dy), arg_buf(&z, ids), arg_i64(&z, count);
    arg_i64(&z, vocab), arg_i64(&z, dim);
    run(isa, DLRT__K_embedding_grad_acc, &z);
    dlrt_k_embedding_grad_acc(0, vocab, acc0, base, dy, ids, count, vocab, dim);
    snprintf(what, sizeof what, "embedding_grad_acc, vocabulary %lld, dim %lld", (long long)vocab,
             (long long)dim);
    compare(r, what, acc, acc0, (size_t)(vocab * dim), 0, 1e-300);
    snprintf(what, sizeof what, "embedding_grad_acc in place, vocabulary %lld, dim %lld",
             (long long)vocab, (long long)dim);
    compare(r, what, same, acc0, (size_t)(vocab * dim), 0, 1e-300);
    keep(r, acc, (size_t)(vocab * dim) * 4);
    free(base), free(acc), free(acc0), free(same);
    free(dy), free(t), free(t0), free(ids);
  }
}

/* ---------------------------------------------------------------- attention */

typedef struct {
  int64_t batch, seq, heads, d;
  int causal;
} attn_shape;

/* T past one block of keys (128) and of queries; heads of 8 to 130. */
static const attn_shape attn_shapes[] = {
    {1, 1, 1, 8, 1},   {2, 37, 3, 24, 1}, {2, 37, 3, 24, 0}, {1, 70, 1, 64, 1},
    {1, 45, 2, 130, 1}, {1, 300, 1, 16, 1}, {2, 150, 2, 32, 0}, {3, 129, 1, 40, 1},
};

/* The f32 values of n elements of type `type`, and back (rounded). */
static void to_type(int type, const float *src, void *dst, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (type == DLRT_F32) ((float *)dst)[i] = src[i];
    else if (type == DLRT_F16) ((uint16_t *)dst)[i] = dlrt_float_to_half(src[i]);
    else ((uint16_t *)dst)[i] = dlrt_float_to_bf16(src[i]);
  }
}
static void from_type(int type, const void *src, float *dst, size_t n) {
  for (size_t i = 0; i < n; i++)
    dst[i] = type == DLRT_F32   ? ((const float *)src)[i]
             : type == DLRT_F16 ? dlrt_half_to_float(((const uint16_t *)src)[i])
                                : dlrt_as_float((uint32_t)((const uint16_t *)src)[i] << 16);
}

/* drop: dropout on the probabilities (p = 0.25, a fixed seed), which the
 * native kernels must draw as the dialect's do (attention.h's hash). */
static void family_attention(const cpu_native_isa *isa, result *r, int type, int drop) {
  int64_t seed = drop ? 0x123456789abcLL : 0, threshold = drop ? (int64_t)1 << 30 : 0;
  float keep_scale = drop ? 1.0f / 0.75f : 1.0f;
  static const char *const types[] = {"f32", "f16", "bf16"};
  double bound = type == DLRT_F32 ? 1e-5 : type == DLRT_F16 ? 4e-3 : 2e-2;
  size_t es = type == DLRT_F32 ? 4 : 2;
  for (size_t s = 0; s < sizeof attn_shapes / sizeof *attn_shapes; s++) {
    attn_shape sh = attn_shapes[s];
    int64_t c = sh.heads * sh.d, rows = DLRT__ATTN_ROWS(sh.d);
    int64_t groups = sh.batch * sh.heads * ((sh.seq + rows - 1) / rows);
    size_t nqkv = (size_t)(sh.batch * sh.seq * 3 * c), no = (size_t)(sh.batch * sh.seq * c);
    size_t nl = (size_t)(sh.batch * sh.heads * sh.seq);
    float scale = 1.0f / sqrtf((float)sh.d);
    rng_state = 1234 + (uint32_t)s;
    float *qkv_f = randoms(nqkv, -2, 2), *dout_f = randoms(no, -1, 1);
    void *qkv = zeros(nqkv), *dout = zeros(no), *o = zeros(no), *o0 = zeros(no);
    void *dqkv = zeros(nqkv), *dqkv0 = zeros(nqkv);
    float *lse = zeros(nl), *lse0 = zeros(nl), *dsum = zeros(nl), *dsum0 = zeros(nl);
    to_type(type, qkv_f, qkv, nqkv), to_type(type, dout_f, dout, no);
    char what[128];
    snprintf(what, sizeof what, "attention %s B%lld T%lld heads %lld D %lld %s%s", types[type],
             (long long)sh.batch, (long long)sh.seq, (long long)sh.heads, (long long)sh.d,
             sh.causal ? "causal" : "not causal", drop ? ", dropout 0.25" : "");
    int k_fwd = DLRT__K_attention_f32 + type, k_q = DLRT__K_attention_grad_q_f32 + type;
    int k_kv = DLRT__K_attention_grad_kv_f32 + type;
#define SIZES(x)                                                                           \
  arg_i64(x, sh.batch), arg_i64(x, sh.seq), arg_i64(x, sh.heads), arg_i64(x, sh.d),         \
      arg_i64(x, rows), arg_i64(x, sh.causal), arg_f32(x, scale), arg_i64(x, seed),         \
      arg_i64(x, threshold), arg_f32(x, keep_scale)
    args a = {0};
    arg_buf(&a, o), arg_buf(&a, lse), arg_buf(&a, qkv), SIZES(&a);
    int rc = run(isa, k_fwd, &a);
    /* The backward kernels from the dialect's o and lse: both see the same inputs. */
    if (type == DLRT_F32) {
      dlrt_k_attention_f32(0, groups, o0, lse0, qkv, sh.batch, sh.seq, sh.heads, sh.d, rows,
                           sh.causal, scale, seed, threshold, keep_scale);
    } else if (type == DLRT_F16) {
      dlrt_k_attention_f16(0, groups, o0, lse0, qkv, sh.batch, sh.seq, sh.heads, sh.d, rows,
                           sh.causal, scale, seed, threshold, keep_scale);
    } else {
      dlrt_k_attention_bf16(0, groups, o0, lse0, qkv, sh.batch, sh.seq, sh.heads, sh.d, rows,
                            sh.causal, scale, seed, threshold, keep_scale);
    }
    args g = {0};
    arg_buf(&g, dqkv), arg_buf(&g, dsum), arg_buf(&g, dout), arg_buf(&g, qkv), arg_buf(&g, o0);
    arg_buf(&g, lse0), SIZES(&g);
    if (rc == DLRT_OK) rc = run(isa, k_q, &g);
#undef SIZES
#define DIALECT_GRAD(SUF)                                                                   \
  do {                                                                                      \
    dlrt_k_attention_grad_q_##SUF(0, groups, dqkv0, dsum0, dout, qkv, o0, lse0, sh.batch,   \
                                  sh.seq, sh.heads, sh.d, rows, sh.causal, scale, seed,     \
                                  threshold, keep_scale);                                   \
    dlrt_k_attention_grad_kv_##SUF(0, groups, dqkv0, dout, qkv, lse0, dsum0, sh.batch,      \
                                   sh.seq, sh.heads, sh.d, rows, sh.causal, scale, seed,    \
                                   threshold, keep_scale);                                  \
  } while (0)
    if (type == DLRT_F32) DIALECT_GRAD(f32);
    else if (type == DLRT_F16) DIALECT_GRAD(f16);
    else DIALECT_GRAD(bf16);
#undef DIALECT_GRAD
    /* attention_grad_kv reads dsum (the dialect's: the same input for both). */
    args k = {0};
    arg_buf(&k, dqkv), arg_buf(&k, dout), arg_buf(&k, qkv), arg_buf(&k, lse0), arg_buf(&k, dsum0);
    arg_i64(&k, sh.batch), arg_i64(&k, sh.seq), arg_i64(&k, sh.heads), arg_i64(&k, sh.d);
    arg_i64(&k, rows), arg_i64(&k, sh.causal), arg_f32(&k, scale), arg_i64(&k, seed);
    arg_i64(&k, threshold), arg_f32(&k, keep_scale);
    if (rc == DLRT_OK) rc = run(isa, k_kv, &k);
    if (rc != DLRT_OK) {
      r->worst = INFINITY;
      snprintf(r->where, sizeof r->where, "%s: status %d", what, rc);
    }
    float *got = malloc(nqkv * sizeof *got), *want = malloc(nqkv * sizeof *want);
    from_type(type, o, got, no), from_type(type, o0, want, no);
    compare(r, what, got, want, no, 0, bound);
    compare(r, what, lse, lse0, nl, 0, type == DLRT_F32 ? 1e-5 : 1e-4);
    compare(r, what, dsum, dsum0, nl, 0, bound);
    from_type(type, dqkv, got, nqkv), from_type(type, dqkv0, want, nqkv);
    compare(r, what, got, want, nqkv, 0, bound);
    keep(r, o, no * es), keep(r, lse, nl * 4), keep(r, dsum, nl * 4), keep(r, dqkv, nqkv * es);
    free(got), free(want), free(qkv_f), free(dout_f), free(qkv), free(dout), free(o), free(o0);
    free(dqkv), free(dqkv0), free(lse), free(lse0), free(dsum), free(dsum0);
  }
}

static void family_attention_f32(const cpu_native_isa *isa, result *r) {
  family_attention(isa, r, DLRT_F32, 0);
}
static void family_attention_f16(const cpu_native_isa *isa, result *r) {
  family_attention(isa, r, DLRT_F16, 0);
}
static void family_attention_bf16(const cpu_native_isa *isa, result *r) {
  family_attention(isa, r, DLRT_BF16, 0);
}
static void family_attention_dropout(const cpu_native_isa *isa, result *r) {
  family_attention(isa, r, DLRT_F32, 1);
  family_attention(isa, r, DLRT_BF16, 1);
}

/* attention_decode (sampling): one query per sequence over caches that
 * start random (rows before each position are read, the position's row is
 * written from qkv), positions with tails of the dialect's tiles and one
 * outside the cache (zeros, nothing written); the caches must come out the
 * same bits, o within the attention's bound. */
static void family_attention_decode(const cpu_native_isa *isa, result *r) {
  static const struct {
    int64_t batch, capacity, heads, d;
    int32_t pos[3];
  } cases[] = {{1, 1, 1, 8, {0}},         {3, 40, 3, 24, {0, 37, 40}},
               {2, 200, 2, 64, {199, 70}}, {1, 50, 2, 130, {44}}};
  for (size_t s = 0; s < sizeof cases / sizeof *cases; s++) {
    int64_t b_n = cases[s].batch, cap = cases[s].capacity, heads = cases[s].heads;
    int64_t d = cases[s].d, c = heads * d, rows = DLRT__ATTN_ROWS(d);
    size_t nqkv = (size_t)(b_n * 3 * c), no = (size_t)(b_n * c), ncache = (size_t)(b_n * cap * c);
    float scale = 1.0f / sqrtf((float)d);
    rng_state = 77 + (uint32_t)s;
    float *qkv = randoms(nqkv, -2, 2), *kc = randoms(ncache, -2, 2), *vc = randoms(ncache, -2, 2);
    float *kc0 = malloc(ncache * sizeof *kc0), *vc0 = malloc(ncache * sizeof *vc0);
    float *o = zeros(no), *o0 = zeros(no);
    if (!kc0 || !vc0) bail_out("out of memory");
    memcpy(kc0, kc, ncache * sizeof *kc), memcpy(vc0, vc, ncache * sizeof *vc);
    char what[128];
    snprintf(what, sizeof what, "attention_decode B%lld capacity %lld heads %lld D %lld",
             (long long)b_n, (long long)cap, (long long)heads, (long long)d);
    args a = {0};
    arg_buf(&a, o), arg_buf(&a, kc), arg_buf(&a, vc), arg_buf(&a, qkv);
    arg_buf(&a, (void *)cases[s].pos);
    arg_i64(&a, b_n), arg_i64(&a, cap), arg_i64(&a, heads), arg_i64(&a, d), arg_i64(&a, rows);
    arg_f32(&a, scale);
    int rc = run(isa, DLRT__K_attention_decode, &a);
    dlrt_k_attention_decode(0, b_n * heads, o0, kc0, vc0, qkv, cases[s].pos, b_n, cap, heads, d,
                            rows, scale);
    if (rc != DLRT_OK || memcmp(kc, kc0, ncache * sizeof *kc) != 0 ||
        memcmp(vc, vc0, ncache * sizeof *vc) != 0) {
      r->worst = INFINITY;
      snprintf(r->where, sizeof r->where, "%s: status %d, or the caches differ", what, rc);
    }
    compare(r, what, o, o0, no, 0, 1e-5);
    keep(r, o, no * 4), keep(r, kc, ncache * 4), keep(r, vc, ncache * 4);
    free(qkv), free(kc), free(vc), free(kc0), free(vc0), free(o), free(o0);
  }
}

/* ---------------------------------------------------------------- 16 bits */

static size_t type_size(int type) { return type == DLRT_F32 ? 4 : 2; }

/* n floats as an array of `type` (rounded), in new storage; and p rounded to type
 * in place (the values such an array holds). */
static void *typed_copy(int type, const float *p, size_t n) {
  void *t = malloc(n * type_size(type) + 64);
  if (!t) bail_out("out of memory");
  to_type(type, p, t, n);
  return t;
}
static void round_to(int type, float *p, size_t n) {
  void *t = typed_copy(type, p, n);
  from_type(type, t, p, n);
  free(t);
}

/* Whether the n elements of `type` at got are want (the f32 kernel's outputs for the
 * same values) rounded once to type, bit for bit: the typed kernels compute the f32
 * kernels' floats and round each when it is stored. A mismatch counts as infinite. */
static void compare_rounded(result *r, const char *what, int type, const void *got,
                            const float *want, size_t n) {
  void *w = typed_copy(type, want, n);
  size_t es = type_size(type), at = n;
  for (size_t i = 0; i < n && at == n; i++) {
    float a, b;
    from_type(type, (const char *)got + i * es, &a, 1);
    from_type(type, (const char *)w + i * es, &b, 1);
    if (memcmp((const char *)got + i * es, (const char *)w + i * es, es) != 0 &&
        !(isnan(a) && isnan(b)))
      at = i;
  }
  if (at < n && !(r->worst >= INFINITY)) {
    float a, b;
    from_type(type, (const char *)got + at * es, &a, 1);
    from_type(type, (const char *)w + at * es, &b, 1);
    r->worst = INFINITY;
    snprintf(r->where, sizeof r->where, "%s: element %zu is %.9g, the f32 kernel's rounded "
             "%.9g", what, at, a, b);
  }
  keep(r, got, n * es);
  free(w);
}

/* The norm.h kernel for x of type tx and y of type ty (kernel_table.h). */
static int norm_id(int f32_kernel, int tx, int ty) {
  return tx == ty ? f32_kernel + ty : f32_kernel + 2 + ty;
}

/* Layer and batch norm with x (and dx) of type tx, y (and dy) of type ty, against
 * the native f32 kernels on the same values. */
static void typed_norm(const cpu_native_isa *isa, result *r, int tx, int ty) {
  static const char *const names[] = {"f32", "f16", "bf16"};
  static const int64_t shapes[][2] = {{5, 1}, {7, 13}, {3, 128}, {2, 771}, {40, 48}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int per_row = 0; per_row < 2; per_row++) {
      int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols, k = per_row ? rows : cols;
      rng_state = 23 + (uint32_t)s;
      float *x = randoms(n, -2, 3), *dy = randoms(n, -1, 1);
      float *gamma = randoms(k, 0.5f, 1.5f), *beta = randoms(k, -1, 1);
      round_to(tx, x, (size_t)n), round_to(ty, dy, (size_t)n);
      void *xt = typed_copy(tx, x, (size_t)n), *dyt = typed_copy(ty, dy, (size_t)n);
      void *yt = zeros(n), *dxt = zeros(n);
      float *y = zeros(n), *dx = zeros(n), *mean = zeros(rows), *rstd = zeros(rows);
      float *mean_t = zeros(rows), *rstd_t = zeros(rows), *dg = zeros(k), *db = zeros(k);
      float *dg_t = zeros(k), *db_t = zeros(k);
      char what[96];
      snprintf(what, sizeof what, "%s %lld x %lld, x %s, y %s",
               per_row ? "batch norm" : "layer norm", (long long)rows, (long long)cols, names[tx],
               names[ty]);
      for (int typed = 0; typed < 2; typed++) {
        args a = {0}, g = {0}, f = {0};
        arg_buf(&a, typed ? yt : y), arg_buf(&a, typed ? mean_t : mean);
        arg_buf(&a, typed ? rstd_t : rstd), arg_buf(&a, typed ? xt : x), arg_buf(&a, gamma);
        arg_buf(&a, beta), arg_i64(&a, rows), arg_i64(&a, cols), arg_f32(&a, 1e-5f);
        arg_i64(&a, per_row);
        run(isa, typed ? norm_id(DLRT__K_norm_rows_f32, tx, ty) : DLRT__K_norm_rows_f32, &a);
        arg_buf(&g, typed ? dxt : dx), arg_buf(&g, typed ? dyt : dy), arg_buf(&g, typed ? xt : x);
        arg_buf(&g, mean), arg_buf(&g, rstd), arg_buf(&g, gamma), arg_i64(&g, rows);
        arg_i64(&g, cols), arg_i64(&g, per_row);
        run(isa, typed ? norm_id(DLRT__K_norm_rows_grad_f32, tx, ty) : DLRT__K_norm_rows_grad_f32,
            &g);
        arg_buf(&f, typed ? dg_t : dg), arg_buf(&f, typed ? db_t : db);
        arg_buf(&f, typed ? dyt : dy), arg_buf(&f, typed ? xt : x), arg_buf(&f, mean);
        arg_buf(&f, rstd), arg_i64(&f, rows), arg_i64(&f, cols), arg_i64(&f, per_row);
        run(isa, typed ? norm_id(DLRT__K_norm_affine_grad_f32, tx, ty)
                       : DLRT__K_norm_affine_grad_f32, &f);
      }
      compare_rounded(r, what, DLRT_F32, mean_t, mean, (size_t)rows);
      compare_rounded(r, what, DLRT_F32, rstd_t, rstd, (size_t)rows);
      compare_rounded(r, what, ty, yt, y, (size_t)n);
      compare_rounded(r, what, tx, dxt, dx, (size_t)n);
      compare_rounded(r, what, DLRT_F32, dg_t, dg, (size_t)k);
      compare_rounded(r, what, DLRT_F32, db_t, db, (size_t)k);
      void *all[] = {x, dy, gamma, beta, xt, dyt, yt, dxt, y, dx, mean, rstd, mean_t, rstd_t,
                     dg, db, dg_t, db_t};
      for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    }
}

/* The activations (tanh, sigmoid, both GELUs) and their gradients, broadcast ops and
 * their b-side gradients, and column sums in `type`, against the native f32 kernels. */
static void typed_elementwise(const cpu_native_isa *isa, result *r, int type) {
  static const char *const names[] = {"f32", "f16", "bf16"};
  char what[96];
  int64_t n = 4099;
  rng_state = 7;
  float *x = randoms((size_t)n, -9, 9), *dy = randoms((size_t)n, -1, 1);
  x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-6f, x[3] = -1e-6f, x[4] = 30.0f, x[5] = -30.0f;
  x[6] = 100.0f, x[7] = -100.0f, x[8] = NAN, x[9] = INFINITY, x[10] = -INFINITY;
  round_to(type, x, (size_t)n), round_to(type, dy, (size_t)n);
  void *xt = typed_copy(type, x, (size_t)n), *dyt = typed_copy(type, dy, (size_t)n);
  float *y = zeros((size_t)n);
  void *yt = zeros((size_t)n);
  for (int kind = 0; kind < 4; kind++)
    for (int grad = 0; grad < 2; grad++) {
      for (int typed = 0; typed < 2; typed++) {
        args a = {0};
        arg_buf(&a, typed ? yt : y);
        if (grad) arg_buf(&a, typed ? dyt : dy);
        arg_buf(&a, typed ? xt : x), arg_i64(&a, n), arg_i64(&a, kind);
        int id = grad ? DLRT__K_activation_grad_f32 : DLRT__K_activation_f32;
        run(isa, typed ? id + type : id, &a);
      }
      snprintf(what, sizeof what, "activation %d%s %s", kind, grad ? " gradient" : "",
               names[type]);
      compare_rounded(r, what, type, yt, y, (size_t)n);
    }
  free(x), free(dy), free(xt), free(dyt), free(y), free(yt);
  static const int64_t shapes[][2] = {{1, 1}, {7, 3}, {33, 17}, {64, 128}, {5, 300}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    int64_t rows = shapes[s][0], m = shapes[s][1];
    n = rows * m;
    rng_state = 101 + (uint32_t)s;
    float *a = randoms((size_t)n, -2, 2), *b = randoms((size_t)m, 0.5f, 2);
    float *g = randoms((size_t)n, -1, 1), *col = randoms((size_t)m, -1, 1);
    round_to(type, a, (size_t)n), round_to(type, b, (size_t)m);
    round_to(type, g, (size_t)n), round_to(type, col, (size_t)m);
    void *at = typed_copy(type, a, (size_t)n), *bt = typed_copy(type, b, (size_t)m);
    void *gt = typed_copy(type, g, (size_t)n);
    float *out = zeros((size_t)n);
    void *out_t = zeros((size_t)n);
    for (int op = 0; op < 4; op++)
      for (int grad = 0; grad < 2; grad++) {
        if (grad && op < 2) continue; /* add and sub pass dy on */
        for (int typed = 0; typed < 2; typed++) {
          args q = {0};
          arg_buf(&q, typed ? out_t : out);
          if (grad) arg_buf(&q, typed ? gt : g);
          arg_buf(&q, typed ? at : a), arg_buf(&q, typed ? bt : b), arg_i64(&q, n);
          arg_i64(&q, m), arg_i64(&q, op);
          int id = grad ? DLRT__K_bcast_grad_b_f32 : DLRT__K_bcast_f32;
          run(isa, typed ? id + type : id, &q);
        }
        snprintf(what, sizeof what, "bcast%s op %d, %lld x %lld %s", grad ? "_grad_b" : "", op,
                 (long long)rows, (long long)m, names[type]);
        compare_rounded(r, what, type, out_t, out, (size_t)n);
      }
    for (int with_beta = 0; with_beta < 2; with_beta++) {
      float *s32 = malloc((size_t)m * sizeof *s32 + 64);
      memcpy(s32, col, (size_t)m * sizeof *col);
      void *st = typed_copy(type, col, (size_t)m);
      float beta = with_beta ? 0.5f : 0.0f;
      for (int typed = 0; typed < 2; typed++) {
        args q = {0};
        arg_buf(&q, typed ? st : s32), arg_buf(&q, typed ? at : a), arg_i64(&q, rows);
        arg_i64(&q, m), arg_f32(&q, beta);
        run(isa, typed ? DLRT__K_sum_cols_f32 + type : DLRT__K_sum_cols_f32, &q);
      }
      snprintf(what, sizeof what, "sum_cols %lld x %lld beta %g %s", (long long)rows,
               (long long)m, beta, names[type]);
      compare_rounded(r, what, type, st, s32, (size_t)m);
      free(s32), free(st);
    }
    void *all[] = {a, b, g, col, at, bt, gt, out, out_t};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
  }
}

static void family_typed(const cpu_native_isa *isa, result *r) {
  for (int type = DLRT_F16; type <= DLRT_BF16; type++) {
    typed_norm(isa, r, type, type);
    typed_norm(isa, r, DLRT_F32, type);
    typed_elementwise(isa, r, type);
  }
}

/* ---------------------------------------------------------------- driver */

typedef struct {
  const char *name;
  void (*run)(const cpu_native_isa *isa, result *r);
  const char *reference; /* what it is checked against: NULL, the dialect's kernels */
} family;

static const family families[] = {
    {"norm_rows, norm_rows_grad, norm_affine_grad", family_norm, NULL},
    {"activation, activation_grad (tanh, sigmoid, gelu, gelu_tanh)", family_activation, NULL},
    {"bcast, bcast_grad_b, sum_cols_f32", family_bcast_sums, NULL},
    {"softmax, softmax_grad, softmax_xent", family_softmax, NULL},
    {"adam_update, embedding_grad, embedding_grad_acc", family_adam_embedding, NULL},
    {"attention f32 (forward, grad_q, grad_kv)", family_attention_f32, NULL},
    {"attention f16", family_attention_f16, NULL},
    {"attention bf16", family_attention_bf16, NULL},
    {"attention with dropout (f32, bf16)", family_attention_dropout, NULL},
    {"attention_decode", family_attention_decode, NULL},
    {"norms, activations, broadcast ops and column sums in f16 and bf16", family_typed,
     "the native f32 kernels' floats rounded once, bit for bit"},
};

int main(void) {
  static const char *const isa_names[] = {"generic", "avx2", "avx512"};
  const cpu_native_isa *isas[3];
  for (int i = 0; i < 3; i++) {
    isas[i] = cpu_native_by_name(isa_names[i]);
    if (!isas[i]) diag("this CPU does not run the %s kernels: not tested", isa_names[i]);
  }
  ok(isas[0] != NULL, "the generic kernels run on every CPU");
  ok(cpu_native_selected() != NULL, "the kernels in use: %s (DLRT_CPU_ISA %s)",
     cpu_native_selected()->name, getenv("DLRT_CPU_ISA") ? getenv("DLRT_CPU_ISA") : "unset");
  ok(cpu_native_by_name("sse9") == NULL, "an unknown instruction set is not chosen");
  const cpu_native_isa *dialect = cpu_native_by_name("dialect");
  int none = dialect != NULL;
  for (int k = 0; none && k < DLRT__K_COUNT; k++) none = dialect->fn[k] == NULL;
  ok(none, "\"dialect\" names a table without native kernels (the dialect's run)");
  for (size_t f = 0; f < sizeof families / sizeof *families; f++) {
    result per_isa[3] = {{0}};
    for (int i = 0; i < 3; i++) {
      if (!isas[i]) continue;
      cpu_pool_set_threads(3);
      families[f].run(isas[i], &per_isa[i]);
      ok(per_isa[i].worst <= 1.0, "%s: %s match %s (worst: %s)", isa_names[i],
         families[f].name,
         families[f].reference ? families[f].reference : "the dialect's kernels",
         per_isa[i].worst > 0 ? per_isa[i].where : "exact");
    }
    /* One thread against three, on the best instruction set. */
    int best = isas[2] ? 2 : isas[1] ? 1 : 0;
    result one = {0};
    cpu_pool_set_threads(1);
    families[f].run(isas[best], &one);
    ok(one.len == per_isa[best].len && memcmp(one.bytes, per_isa[best].bytes, one.len) == 0,
       "%s: %s give the same bits on 1 and 3 threads", isa_names[best], families[f].name);
    if (isas[1] && isas[2])
      ok(per_isa[1].len == per_isa[2].len &&
             memcmp(per_isa[1].bytes, per_isa[2].bytes, per_isa[1].len) == 0,
         "%s: the avx2 and avx512 kernels give the same bits", families[f].name);
    else
      skip(1, "avx2 against avx512: this CPU lacks one of them");
    free(one.bytes);
    for (int i = 0; i < 3; i++) free(per_isa[i].bytes);
  }
  cpu_pool_shutdown();
  return done_testing();
}
