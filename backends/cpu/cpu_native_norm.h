/* cpu_native_norm.h — layer and batch norm over rows, and their gradients,
 * for a CPU (the native versions of kernels/norm.h's norm_rows,
 * norm_rows_grad and norm_affine_grad, which define what they compute).
 * A template: each instruction set's file includes it after its target
 * pragma (cpu_native_isa.h). x is rows x cols; sums along a row run in RL
 * lanes (RL_ROW_SUM), sums down a column add the rows in order. */

typedef struct {
  float *y, *mean, *rstd, *dx, *dgamma, *dbeta;
  const float *x, *dy, *gamma, *beta, *mean_in, *rstd_in;
  int64_t rows, cols, per_row;
  float eps;
} norm_job;

/* y = (x - mean) rstd gamma + beta per row, mean and rstd saved. */
static void norm_rows_part(void *ctx, int64_t lo, int64_t hi, int part) {
  const norm_job *j = ctx;
  int64_t cols = j->cols;
  (void)part;
  for (int64_t r = lo; r < hi; r++) {
    const float *x = j->x + r * cols;
    float *y = j->y + r * cols;
    float m = RL_ROW_SUM(cols, RL_AT(x, 0.0f)) / (float)cols;
    float var = RL_ROW_SUM(cols, (RL_AT(x, m) - m) * (RL_AT(x, m) - m)) / (float)cols;
    float rs = 1.0f / sqrtf(var + j->eps);
    j->mean[r] = m;
    j->rstd[r] = rs;
    const float *gamma = j->per_row ? NULL : j->gamma, *beta = j->per_row ? NULL : j->beta;
    float g = j->per_row ? j->gamma[r] : 0.0f, b = j->per_row ? j->beta[r] : 0.0f;
    for (int64_t c = 0; c < cols; c += VL) {
      int64_t n = cols - c < VL ? cols - c : VL;
      vf xhat = (vf_load_n(x + c, n, 0.0f) - m) * rs;
      vf_store_n(y + c, gamma ? xhat * vf_load_n(gamma + c, n, 0.0f) + vf_load_n(beta + c, n, 0.0f)
                              : xhat * g + b, n);
    }
  }
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma, per row. */
static void norm_rows_grad_part(void *ctx, int64_t lo, int64_t hi, int part) {
  const norm_job *j = ctx;
  int64_t cols = j->cols;
  (void)part;
  for (int64_t r = lo; r < hi; r++) {
    const float *x = j->x + r * cols, *dy = j->dy + r * cols;
    float *dx = j->dx + r * cols;
    float m = j->mean_in[r], rs = j->rstd_in[r];
    float mg, mgx;
    if (j->per_row) {
      float gamma = j->gamma[r];
      mg = RL_ROW_SUM(cols, RL_AT(dy, 0.0f) * gamma) / (float)cols;
      mgx = RL_ROW_SUM(cols, RL_AT(dy, 0.0f) * gamma * ((RL_AT(x, m) - m) * rs)) / (float)cols;
      for (int64_t c = 0; c < cols; c += VL) {
        int64_t n = cols - c < VL ? cols - c : VL;
        vf xhat = (vf_load_n(x + c, n, 0.0f) - m) * rs;
        vf_store_n(dx + c, rs * (vf_load_n(dy + c, n, 0.0f) * gamma - mg - xhat * mgx), n);
      }
      continue;
    }
    const float *gamma = j->gamma;
    mg = RL_ROW_SUM(cols, RL_AT(dy, 0.0f) * RL_AT(gamma, 0.0f)) / (float)cols;
    mgx = RL_ROW_SUM(cols, RL_AT(dy, 0.0f) * RL_AT(gamma, 0.0f) * ((RL_AT(x, m) - m) * rs)) /
          (float)cols;
    for (int64_t c = 0; c < cols; c += VL) {
      int64_t n = cols - c < VL ? cols - c : VL;
      vf xhat = (vf_load_n(x + c, n, 0.0f) - m) * rs;
      vf g = vf_load_n(dy + c, n, 0.0f) * vf_load_n(gamma + c, n, 0.0f);
      vf_store_n(dx + c, rs * (g - mg - xhat * mgx), n);
    }
  }
}

/* Columns per task of the sums down columns (here and sum_cols): a task
 * streams rows of 256 bytes. */
#define COL_BLOCK 64

/* dgamma[k] = sum dy xhat, dbeta[k] = sum dy. Layer norm: k is a column,
 * a task a block of COL_BLOCK columns summing the rows in order; batch
 * norm (per_row): k is a row, a task a row. */
static void norm_affine_grad_part(void *ctx, int64_t lo, int64_t hi, int part) {
  const norm_job *j = ctx;
  int64_t rows = j->rows, cols = j->cols;
  (void)part;
  for (int64_t t = lo; t < hi; t++) {
    if (j->per_row) {
      const float *x = j->x + t * cols, *dy = j->dy + t * cols;
      float m = j->mean_in[t], rs = j->rstd_in[t];
      j->dgamma[t] = RL_ROW_SUM(cols, RL_AT(dy, 0.0f) * (RL_AT(x, m) - m) * rs);
      j->dbeta[t] = RL_ROW_SUM(cols, RL_AT(dy, 0.0f));
      continue;
    }
    int64_t c0 = t * COL_BLOCK, n = cols - c0 < COL_BLOCK ? cols - c0 : COL_BLOCK;
    float g[COL_BLOCK] = {0}, b[COL_BLOCK] = {0};
    if (n == COL_BLOCK) {
      enum { NV = COL_BLOCK / VL };
      vf gv[NV], bv[NV];
      UNROLL for (int s = 0; s < NV; s++) gv[s] = bv[s] = vf_splat(0.0f);
      for (int64_t r = 0; r < rows; r++) {
        const float *x = j->x + r * cols + c0, *dy = j->dy + r * cols + c0;
        float m = j->mean_in[r], rs = j->rstd_in[r];
        UNROLL for (int s = 0; s < NV; s++) {
          vf d = vf_load(dy + s * VL);
          gv[s] += d * (vf_load(x + s * VL) - m) * rs;
          bv[s] += d;
        }
      }
      memcpy(g, gv, sizeof g);
      memcpy(b, bv, sizeof b);
    } else {
      for (int64_t r = 0; r < rows; r++) {
        const float *x = j->x + r * cols + c0, *dy = j->dy + r * cols + c0;
        float m = j->mean_in[r], rs = j->rstd_in[r];
        for (int64_t c = 0; c < n; c++) {
          g[c] += dy[c] * (x[c] - m) * rs;
          b[c] += dy[c];
        }
      }
    }
    memcpy(j->dgamma + c0, g, (size_t)n * sizeof *g);
    memcpy(j->dbeta + c0, b, (size_t)n * sizeof *b);
  }
}

/* Arguments in kernel_table.h's order: norm_rows y, mean, rstd, x, gamma,
 * beta, rows, cols, eps, per_row; norm_rows_grad dx, dy, x, mean, rstd,
 * gamma, rows, cols, per_row; norm_affine_grad dgamma, dbeta, dy, x, mean,
 * rstd, rows, cols, per_row. */
static int native_norm_rows(const dlrt__arg *a) {
  norm_job j = {.y = NA_BUF(0, float), .mean = NA_BUF(1, float), .rstd = NA_BUF(2, float),
                .x = NA_BUF(3, float), .gamma = NA_BUF(4, float), .beta = NA_BUF(5, float),
                .rows = a[6].i, .cols = a[7].i, .eps = a[8].f, .per_row = a[9].i};
  cpu_native_parallel(j.rows, cpu_native_parts(j.rows, 3 * j.cols), norm_rows_part, &j);
  return DLRT_OK;
}

static int native_norm_rows_grad(const dlrt__arg *a) {
  norm_job j = {.dx = NA_BUF(0, float), .dy = NA_BUF(1, float), .x = NA_BUF(2, float),
                .mean_in = NA_BUF(3, float), .rstd_in = NA_BUF(4, float),
                .gamma = NA_BUF(5, float), .rows = a[6].i, .cols = a[7].i, .per_row = a[8].i};
  cpu_native_parallel(j.rows, cpu_native_parts(j.rows, 3 * j.cols), norm_rows_grad_part, &j);
  return DLRT_OK;
}

static int native_norm_affine_grad(const dlrt__arg *a) {
  norm_job j = {.dgamma = NA_BUF(0, float), .dbeta = NA_BUF(1, float), .dy = NA_BUF(2, float),
                .x = NA_BUF(3, float), .mean_in = NA_BUF(4, float),
                .rstd_in = NA_BUF(5, float), .rows = a[6].i, .cols = a[7].i,
                .per_row = a[8].i};
  int64_t tasks = j.per_row ? j.rows : (j.cols + COL_BLOCK - 1) / COL_BLOCK;
  int64_t cost = j.per_row ? 2 * j.cols : 2 * j.rows * COL_BLOCK;
  cpu_native_parallel(tasks, cpu_native_parts(tasks, cost), norm_affine_grad_part, &j);
  return DLRT_OK;
}
