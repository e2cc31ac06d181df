/* cpu_native_norm.h — layer and batch norm over rows, and their gradients,
 * for a CPU (the native versions of kernels/norm.h's norm_rows,
 * norm_rows_grad and norm_affine_grad, which define what they compute), for
 * each pair of storage types norm.h has: x and dx of type TX, y and dy of
 * type TY (cpu_vec16.h loads and stores them; the arithmetic is the same
 * fp32 for every pair). A template: each instruction set's file includes it
 * after its target pragma (cpu_native_isa.h). x is rows x cols; sums along
 * a row run in RL lanes (RL_ROW_SUM), sums down a column add the rows in
 * order. */

typedef struct {
  void *y, *dx;
  float *mean, *rstd, *dgamma, *dbeta;
  const void *x, *dy;
  const float *gamma, *beta, *mean_in, *rstd_in;
  int64_t rows, cols, per_row;
  float eps;
} norm_job;

/* y = (x - mean) rstd gamma + beta per row, mean and rstd saved. */
static inline __attribute__((always_inline)) void norm_rows_run(const norm_job *j, int64_t lo,
                                                                int64_t hi, int tx, int ty) {
  int64_t cols = j->cols;
  for (int64_t r = lo; r < hi; r++) {
    const void *x = (const char *)j->x + r * cols * (tx == DLRT_F32 ? 4 : 2);
    void *y = (char *)j->y + r * cols * (ty == DLRT_F32 ? 4 : 2);
    float m = RL_ROW_SUM(cols, RL_AT_T(x, tx, 0.0f)) / (float)cols;
    float var = RL_ROW_SUM(cols, (RL_AT_T(x, tx, m) - m) * (RL_AT_T(x, tx, m) - m)) / (float)cols;
    float rs = 1.0f / sqrtf(var + j->eps);
    j->mean[r] = m;
    j->rstd[r] = rs;
    const float *gamma = j->per_row ? NULL : j->gamma, *beta = j->per_row ? NULL : j->beta;
    float g = j->per_row ? j->gamma[r] : 0.0f, b = j->per_row ? j->beta[r] : 0.0f;
    for (int64_t c = 0; c < cols; c += VL) {
      int64_t n = cols - c < VL ? cols - c : VL;
      vf xhat = (vt_load_n(x, tx, c, n, 0.0f) - m) * rs;
      vf out = gamma ? xhat * vf_load_n(gamma + c, n, 0.0f) + vf_load_n(beta + c, n, 0.0f)
                     : xhat * g + b;
      vt_store_n(y, ty, c, out, n);
    }
  }
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma, per row. */
static inline __attribute__((always_inline)) void norm_rows_grad_run(const norm_job *j,
                                                                     int64_t lo, int64_t hi,
                                                                     int tx, int ty) {
  int64_t cols = j->cols;
  for (int64_t r = lo; r < hi; r++) {
    const void *x = (const char *)j->x + r * cols * (tx == DLRT_F32 ? 4 : 2);
    const void *dy = (const char *)j->dy + r * cols * (ty == DLRT_F32 ? 4 : 2);
    void *dx = (char *)j->dx + r * cols * (tx == DLRT_F32 ? 4 : 2);
    float m = j->mean_in[r], rs = j->rstd_in[r];
    float mg, mgx;
    if (j->per_row) {
      float gamma = j->gamma[r];
      mg = RL_ROW_SUM(cols, RL_AT_T(dy, ty, 0.0f) * gamma) / (float)cols;
      mgx = RL_ROW_SUM(cols, RL_AT_T(dy, ty, 0.0f) * gamma * ((RL_AT_T(x, tx, m) - m) * rs)) /
            (float)cols;
      for (int64_t c = 0; c < cols; c += VL) {
        int64_t n = cols - c < VL ? cols - c : VL;
        vf xhat = (vt_load_n(x, tx, c, n, 0.0f) - m) * rs;
        vt_store_n(dx, tx, c, rs * (vt_load_n(dy, ty, c, n, 0.0f) * gamma - mg - xhat * mgx), n);
      }
      continue;
    }
    const float *gamma = j->gamma;
    mg = RL_ROW_SUM(cols, RL_AT_T(dy, ty, 0.0f) * RL_AT(gamma, 0.0f)) / (float)cols;
    mgx = RL_ROW_SUM(cols, RL_AT_T(dy, ty, 0.0f) * RL_AT(gamma, 0.0f) *
                               ((RL_AT_T(x, tx, m) - m) * rs)) /
          (float)cols;
    for (int64_t c = 0; c < cols; c += VL) {
      int64_t n = cols - c < VL ? cols - c : VL;
      vf xhat = (vt_load_n(x, tx, c, n, 0.0f) - m) * rs;
      vf g = vt_load_n(dy, ty, c, n, 0.0f) * vf_load_n(gamma + c, n, 0.0f);
      vt_store_n(dx, tx, c, rs * (g - mg - xhat * mgx), n);
    }
  }
}

/* Columns per task of the sums down columns (here and sum_cols): a task
 * streams rows of 256 bytes (of fp32). */
#define COL_BLOCK 64

/* dgamma[k] = sum dy xhat, dbeta[k] = sum dy. Layer norm: k is a column,
 * a task a block of COL_BLOCK columns summing the rows in order; batch
 * norm (per_row): k is a row, a task a row. */
static inline __attribute__((always_inline)) void norm_affine_grad_run(const norm_job *j,
                                                                       int64_t lo, int64_t hi,
                                                                       int tx, int ty) {
  int64_t rows = j->rows, cols = j->cols;
  for (int64_t t = lo; t < hi; t++) {
    if (j->per_row) {
      const void *x = (const char *)j->x + t * cols * (tx == DLRT_F32 ? 4 : 2);
      const void *dy = (const char *)j->dy + t * cols * (ty == DLRT_F32 ? 4 : 2);
      float m = j->mean_in[t], rs = j->rstd_in[t];
      j->dgamma[t] = RL_ROW_SUM(cols, RL_AT_T(dy, ty, 0.0f) * (RL_AT_T(x, tx, m) - m) * rs);
      j->dbeta[t] = RL_ROW_SUM(cols, RL_AT_T(dy, ty, 0.0f));
      continue;
    }
    int64_t c0 = t * COL_BLOCK, n = cols - c0 < COL_BLOCK ? cols - c0 : COL_BLOCK;
    float g[COL_BLOCK] = {0}, b[COL_BLOCK] = {0};
    if (n == COL_BLOCK) {
      enum { NV = COL_BLOCK / VL };
      vf gv[NV], bv[NV];
      UNROLL for (int s = 0; s < NV; s++) gv[s] = bv[s] = vf_splat(0.0f);
      for (int64_t r = 0; r < rows; r++) {
        int64_t at = r * cols + c0;
        float m = j->mean_in[r], rs = j->rstd_in[r];
        UNROLL for (int s = 0; s < NV; s++) {
          vf d = vt_load(j->dy, ty, at + s * VL);
          gv[s] += d * (vt_load(j->x, tx, at + s * VL) - m) * rs;
          bv[s] += d;
        }
      }
      memcpy(g, gv, sizeof g);
      memcpy(b, bv, sizeof b);
    } else {
      for (int64_t r = 0; r < rows; r++) {
        int64_t at = r * cols + c0;
        float m = j->mean_in[r], rs = j->rstd_in[r];
        for (int64_t c = 0; c < n; c++) {
          float d = vt_get(j->dy, ty, at + c);
          g[c] += d * (vt_get(j->x, tx, at + c) - m) * rs;
          b[c] += d;
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
 * rstd, rows, cols, per_row. NORM_TYPED(SUF, TX, TY) makes the three
 * native_<kernel>_SUF for one pair of storage types. */
#define NORM_TYPED(SUF, TX, TY)                                                             \
  static void norm_rows_part_##SUF(void *ctx, int64_t lo, int64_t hi, int part) {           \
    (void)part;                                                                             \
    norm_rows_run(ctx, lo, hi, TX, TY);                                                     \
  }                                                                                         \
  static void norm_rows_grad_part_##SUF(void *ctx, int64_t lo, int64_t hi, int part) {      \
    (void)part;                                                                             \
    norm_rows_grad_run(ctx, lo, hi, TX, TY);                                                \
  }                                                                                         \
  static void norm_affine_grad_part_##SUF(void *ctx, int64_t lo, int64_t hi, int part) {    \
    (void)part;                                                                             \
    norm_affine_grad_run(ctx, lo, hi, TX, TY);                                              \
  }                                                                                         \
  static int native_norm_rows_##SUF(const dlrt__arg *a) {                                   \
    norm_job j = {.y = NA_BUF(0, void), .mean = NA_BUF(1, float), .rstd = NA_BUF(2, float), \
                  .x = NA_BUF(3, void), .gamma = NA_BUF(4, float), .beta = NA_BUF(5, float), \
                  .rows = a[6].i, .cols = a[7].i, .eps = a[8].f, .per_row = a[9].i};        \
    cpu_native_parallel(j.rows, cpu_native_parts(j.rows, 3 * j.cols), norm_rows_part_##SUF, \
                        &j);                                                                \
    return DLRT_OK;                                                                         \
  }                                                                                         \
  static int native_norm_rows_grad_##SUF(const dlrt__arg *a) {                              \
    norm_job j = {.dx = NA_BUF(0, void), .dy = NA_BUF(1, void), .x = NA_BUF(2, void),       \
                  .mean_in = NA_BUF(3, float), .rstd_in = NA_BUF(4, float),                 \
                  .gamma = NA_BUF(5, float), .rows = a[6].i, .cols = a[7].i,                \
                  .per_row = a[8].i};                                                       \
    cpu_native_parallel(j.rows, cpu_native_parts(j.rows, 3 * j.cols),                       \
                        norm_rows_grad_part_##SUF, &j);                                     \
    return DLRT_OK;                                                                         \
  }                                                                                         \
  static int native_norm_affine_grad_##SUF(const dlrt__arg *a) {                            \
    norm_job j = {.dgamma = NA_BUF(0, float), .dbeta = NA_BUF(1, float),                    \
                  .dy = NA_BUF(2, void), .x = NA_BUF(3, void), .mean_in = NA_BUF(4, float), \
                  .rstd_in = NA_BUF(5, float), .rows = a[6].i, .cols = a[7].i,              \
                  .per_row = a[8].i};                                                       \
    int64_t tasks = j.per_row ? j.rows : (j.cols + COL_BLOCK - 1) / COL_BLOCK;              \
    int64_t cost = j.per_row ? 2 * j.cols : 2 * j.rows * COL_BLOCK;                         \
    cpu_native_parallel(tasks, cpu_native_parts(tasks, cost), norm_affine_grad_part_##SUF,  \
                        &j);                                                                \
    return DLRT_OK;                                                                         \
  }
NORM_TYPED(f32, DLRT_F32, DLRT_F32)
NORM_TYPED(f16, DLRT_F16, DLRT_F16)
NORM_TYPED(bf16, DLRT_BF16, DLRT_BF16)
NORM_TYPED(f16_f32, DLRT_F32, DLRT_F16)
NORM_TYPED(bf16_f32, DLRT_F32, DLRT_BF16)
