/* cpu_native_norm.h — layer and batch norm over rows, and their gradients,
 * for a CPU (the native versions of kernels/norm.h's norm_rows,
 * norm_rows_grad and norm_affine_grad, which define what they compute).
 * A template: each instruction set's file includes it after its target
 * pragma (cpu_native_isa.h). x is rows x cols; a row's sums run in 16
 * lanes over its columns, combined in a fixed tree (vf_sum). */

/* A row's sum of EXPR(v) over its columns, v the vector of columns
 * [c, c + VL) loaded by LOAD(c, n) (n = VL but at the tail); the tail's
 * other lanes must make EXPR 0. */
#define ROW_SUM(cols, LOAD, EXPR)                                                           \
  ({                                                                                        \
    vf acc_ = vf_splat(0.0f);                                                               \
    int64_t c_ = 0;                                                                         \
    for (; c_ + VL <= (cols); c_ += VL) {                                                   \
      vf v = LOAD(c_, VL);                                                                  \
      acc_ += (EXPR);                                                                       \
    }                                                                                       \
    if (c_ < (cols)) {                                                                      \
      vf v = LOAD(c_, (cols)-c_);                                                           \
      acc_ += (EXPR);                                                                       \
    }                                                                                       \
    vf_sum(acc_);                                                                           \
  })

typedef struct {
  float *y, *mean, *rstd, *dx, *dgamma, *dbeta;
  const float *x, *dy, *gamma, *beta, *mean_in, *rstd_in;
  int64_t rows, cols, per_row;
  float eps;
} norm_job;

/* x's row r, columns [c, c + n), other lanes `fill`. */
#define X_AT(c, n) ((n) == VL ? vf_load(xr + (c)) : vf_load_part(xr + (c), (n), fill))

/* y = (x - mean) rstd gamma + beta per row, mean and rstd saved. */
static void norm_rows_part(void *ctx, int64_t lo, int64_t hi, int part) {
  const norm_job *j = ctx;
  int64_t cols = j->cols;
  (void)part;
  for (int64_t r = lo; r < hi; r++) {
    const float *xr = j->x + r * cols;
    float *yr = j->y + r * cols;
    float fill = 0.0f;
    float m = ROW_SUM(cols, X_AT, v) / (float)cols;
    fill = m; /* the tail's lanes: x - mean = 0 */
    float var = ROW_SUM(cols, X_AT, (v - m) * (v - m)) / (float)cols;
    float rs = 1.0f / sqrtf(var + j->eps);
    j->mean[r] = m;
    j->rstd[r] = rs;
    if (j->per_row) {
      float g = j->gamma[r], b = j->beta[r];
      for (int64_t c = 0; c < cols; c++) yr[c] = (xr[c] - m) * rs * g + b;
      continue;
    }
    int64_t c = 0;
    for (; c + VL <= cols; c += VL)
      vf_store(yr + c,
               (vf_load(xr + c) - m) * rs * vf_load(j->gamma + c) + vf_load(j->beta + c));
    for (; c < cols; c++) yr[c] = (xr[c] - m) * rs * j->gamma[c] + j->beta[c];
  }
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma, per row. */
static void norm_rows_grad_part(void *ctx, int64_t lo, int64_t hi, int part) {
  const norm_job *j = ctx;
  int64_t cols = j->cols;
  (void)part;
  for (int64_t r = lo; r < hi; r++) {
    const float *xr = j->x + r * cols, *dyr = j->dy + r * cols;
    float *dxr = j->dx + r * cols;
    float m = j->mean_in[r], rs = j->rstd_in[r];
    float sg = 0.0f, sgx = 0.0f;
    if (j->per_row) {
      float gamma = j->gamma[r];
      vf a = vf_splat(0.0f), b = vf_splat(0.0f);
      int64_t c = 0;
      for (; c + VL <= cols; c += VL) {
        vf g = vf_load(dyr + c) * gamma;
        a += g;
        b += g * ((vf_load(xr + c) - m) * rs);
      }
      if (c < cols) {
        vf g = vf_load_part(dyr + c, cols - c, 0.0f) * gamma;
        a += g;
        b += g * ((vf_load_part(xr + c, cols - c, m) - m) * rs);
      }
      sg = vf_sum(a), sgx = vf_sum(b);
      float mg = sg / (float)cols, mgx = sgx / (float)cols;
      for (c = 0; c + VL <= cols; c += VL) {
        vf xhat = (vf_load(xr + c) - m) * rs;
        vf_store(dxr + c, rs * (vf_load(dyr + c) * gamma - mg - xhat * mgx));
      }
      for (; c < cols; c++) dxr[c] = rs * (dyr[c] * gamma - mg - (xr[c] - m) * rs * mgx);
      continue;
    }
    vf a = vf_splat(0.0f), b = vf_splat(0.0f);
    int64_t c = 0;
    for (; c + VL <= cols; c += VL) {
      vf g = vf_load(dyr + c) * vf_load(j->gamma + c);
      a += g;
      b += g * ((vf_load(xr + c) - m) * rs);
    }
    if (c < cols) {
      vf g = vf_load_part(dyr + c, cols - c, 0.0f) * vf_load_part(j->gamma + c, cols - c, 0.0f);
      a += g;
      b += g * ((vf_load_part(xr + c, cols - c, m) - m) * rs);
    }
    sg = vf_sum(a), sgx = vf_sum(b);
    float mg = sg / (float)cols, mgx = sgx / (float)cols;
    for (c = 0; c + VL <= cols; c += VL) {
      vf xhat = (vf_load(xr + c) - m) * rs;
      vf g = vf_load(dyr + c) * vf_load(j->gamma + c);
      vf_store(dxr + c, rs * (g - mg - xhat * mgx));
    }
    for (; c < cols; c++)
      dxr[c] = rs * (dyr[c] * j->gamma[c] - mg - (xr[c] - m) * rs * mgx);
  }
}

/* Columns per task of the column sums below: 4 vectors, so that a task
 * streams rows of 256 bytes. */
#define COL_BLOCK (4 * VL)

/* dgamma[k] = sum dy xhat, dbeta[k] = sum dy. Layer norm: k is a column,
 * a task a block of COL_BLOCK columns summing the rows in order; batch
 * norm (per_row): k is a row, a task a row. */
static void norm_affine_grad_part(void *ctx, int64_t lo, int64_t hi, int part) {
  const norm_job *j = ctx;
  int64_t rows = j->rows, cols = j->cols;
  (void)part;
  for (int64_t t = lo; t < hi; t++) {
    if (j->per_row) {
      const float *xr = j->x + t * cols, *dyr = j->dy + t * cols;
      float m = j->mean_in[t], rs = j->rstd_in[t];
      vf g = vf_splat(0.0f), b = vf_splat(0.0f);
      int64_t c = 0;
      for (; c + VL <= cols; c += VL) {
        vf d = vf_load(dyr + c);
        g += d * (vf_load(xr + c) - m) * rs;
        b += d;
      }
      if (c < cols) {
        vf d = vf_load_part(dyr + c, cols - c, 0.0f);
        g += d * (vf_load_part(xr + c, cols - c, m) - m) * rs;
        b += d;
      }
      j->dgamma[t] = vf_sum(g);
      j->dbeta[t] = vf_sum(b);
      continue;
    }
    int64_t c0 = t * COL_BLOCK, n = cols - c0 < COL_BLOCK ? cols - c0 : COL_BLOCK;
    float g[COL_BLOCK] = {0}, b[COL_BLOCK] = {0};
    if (n == COL_BLOCK) {
      vf g0 = vf_splat(0.0f), g1 = g0, g2 = g0, g3 = g0, b0 = g0, b1 = g0, b2 = g0, b3 = g0;
      for (int64_t r = 0; r < rows; r++) {
        const float *xr = j->x + r * cols + c0, *dyr = j->dy + r * cols + c0;
        float m = j->mean_in[r], rs = j->rstd_in[r];
        vf d0 = vf_load(dyr), d1 = vf_load(dyr + VL), d2 = vf_load(dyr + 2 * VL),
           d3 = vf_load(dyr + 3 * VL);
        g0 += d0 * (vf_load(xr) - m) * rs;
        g1 += d1 * (vf_load(xr + VL) - m) * rs;
        g2 += d2 * (vf_load(xr + 2 * VL) - m) * rs;
        g3 += d3 * (vf_load(xr + 3 * VL) - m) * rs;
        b0 += d0, b1 += d1, b2 += d2, b3 += d3;
      }
      vf_store(g, g0), vf_store(g + VL, g1), vf_store(g + 2 * VL, g2), vf_store(g + 3 * VL, g3);
      vf_store(b, b0), vf_store(b + VL, b1), vf_store(b + 2 * VL, b2), vf_store(b + 3 * VL, b3);
    } else {
      for (int64_t r = 0; r < rows; r++) {
        const float *xr = j->x + r * cols + c0, *dyr = j->dy + r * cols + c0;
        float m = j->mean_in[r], rs = j->rstd_in[r];
        for (int64_t c = 0; c < n; c++) {
          g[c] += dyr[c] * (xr[c] - m) * rs;
          b[c] += dyr[c];
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
