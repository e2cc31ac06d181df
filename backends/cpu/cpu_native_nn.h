/* cpu_native_nn.h — activations and their gradients, column sums, broadcast
 * ops (those three in every storage type: f32, f16, bf16), softmax and
 * softmax + cross-entropy (fp32), for a CPU (the native versions of
 * kernels/nn.h's, typed.h's sum_cols and shape.h's bcast kernels, which
 * define what they compute). A template: each instruction set's file
 * includes it after its target pragma (cpu_native_isa.h). */

/* Elements per task of the elementwise kernels. */
#define EW_BLOCK 4096

/* The elementwise kernels' arrays are of one storage type (the instance's
 * T: cpu_vec16.h loads and stores it); the arithmetic is fp32. */
typedef struct {
  void *y;
  const void *x, *dy, *b;
  int64_t count, m, op, kind;
} ew_job;

/* GELU's tanh form and its derivative (kernels/nn.h's DLRT__GELU_*), as
 * x sigma(2u): 0.5 (1 + tanh u) = sigma(2u) = 1 / (1 + e), e = exp(-2u).
 * One exp and one division, and no cancellation where the tanh form has
 * one (x < 0: 1 + tanh u, 1 - tanh^2 u). The derivative, sigma(2u) + 2 x
 * sigma(2u) (1 - sigma(2u)) u'(x), takes 1 - sigma(2u) as e sigma(2u)
 * where e <= 1 (sigma near 1) and as it is elsewhere. */
#define GELU_E(v) vf_exp(-2.0f * DLRT__GELU_K * ((v) + DLRT__GELU_A * (v) * (v) * (v)))
#define GELU_TANH(v)                                                                        \
  ({                                                                                        \
    vf gv_ = (v);                                                                           \
    gv_ / (1.0f + GELU_E(gv_));                                                             \
  })
#define GELU_TANH_GRAD(v)                                                                   \
  ({                                                                                        \
    vf dv_ = (v), de_ = GELU_E(dv_), ds_ = 1.0f / (1.0f + de_);                             \
    vf rest_ = vf_select(de_ > 1.0f, 1.0f - ds_, de_ * ds_);                                \
    ds_ + 2.0f * dv_ * ds_ * rest_ * DLRT__GELU_K * (1.0f + 3.0f * DLRT__GELU_A * dv_ * dv_); \
  })

/* Elements [lo, hi) of tasks [t0, t1) of EW_BLOCK; `n` at a time, the
 * tail through a padded copy (its other lanes 0). */
#define EW_RANGE(t0, t1, count, i, n)                                                       \
  for (int64_t i = (t0) * EW_BLOCK, end_ = (t1) * EW_BLOCK < (count) ? (t1) * EW_BLOCK       \
                                                                     : (count),             \
               n = end_ - i < VL ? end_ - i : VL;                                           \
       i < end_; i += VL, n = end_ - i < VL ? end_ - i : VL)
#define EW_LOAD(p, T, i, n) vt_load_n((p), T, (i), (n), 0.0f)
#define EW_STORE(p, T, i, n, v) vt_store_n((p), T, (i), (v), (n))

/* activation: kind 0 tanh, 1 sigmoid, 3 GELU's tanh form (2, the exact
 * GELU, runs the dialect's loop). */
static inline __attribute__((always_inline)) void activation_run(const ew_job *j, int64_t lo,
                                                                 int64_t hi, int T) {
  EW_RANGE(lo, hi, j->count, i, n) {
    vf v = EW_LOAD(j->x, T, i, n), y;
    if (j->kind == 0) y = vf_tanh(v);
    else if (j->kind == 1) y = 1.0f / (1.0f + vf_exp(-v));
    else y = GELU_TANH(v);
    EW_STORE(j->y, T, i, n, y);
  }
}

/* activation_grad: dx = dy f'; tanh and sigmoid from their output, the
 * GELUs from their input (`t`, here x). */
static inline __attribute__((always_inline)) void activation_grad_run(const ew_job *j,
                                                                      int64_t lo, int64_t hi,
                                                                      int T) {
  EW_RANGE(lo, hi, j->count, i, n) {
    vf v = EW_LOAD(j->x, T, i, n), d;
    if (j->kind == 0) d = 1.0f - v * v;
    else if (j->kind == 1) d = v * (1.0f - v);
    else d = GELU_TANH_GRAD(v);
    EW_STORE(j->y, T, i, n, EW_LOAD(j->dy, T, i, n) * d);
  }
}

/* ---- broadcast ops: y[i] = a[i] (op) b[i % m], a row of m at a time. ---- */

/* One row (n <= m values from column 0) of bcast (grad 0) or bcast_grad_b. */
static inline __attribute__((always_inline)) void bcast_row(const ew_job *j, int64_t at,
                                                            int64_t n, int grad, int T) {
  const void *u = j->x, *b = j->b, *dy = j->dy;
  void *y = j->y;
  int64_t c = 0;
  for (; c + VL <= n; c += VL) {
    vf x = vt_load(u, T, at + c), v = vt_load(b, T, c), r;
    if (grad) r = j->op == 2 ? vt_load(dy, T, at + c) * x : -vt_load(dy, T, at + c) * x / (v * v);
    else r = j->op == 0 ? x + v : j->op == 1 ? x - v : j->op == 2 ? x * v : x / v;
    vt_store(y, T, at + c, r);
  }
  for (; c < n; c++) {
    float x = vt_get(u, T, at + c), v = vt_get(b, T, c), r;
    if (grad) r = j->op == 2 ? vt_get(dy, T, at + c) * x : -vt_get(dy, T, at + c) * x / (v * v);
    else r = j->op == 0 ? x + v : j->op == 1 ? x - v : j->op == 2 ? x * v : x / v;
    vt_put(y, T, at + c, r);
  }
}

static inline __attribute__((always_inline)) void bcast_run(const ew_job *j, int64_t lo,
                                                            int64_t hi, int T) {
  for (int64_t r = lo; r < hi; r++) {
    int64_t at = r * j->m, n = j->count - at < j->m ? j->count - at : j->m;
    bcast_row(j, at, n, (int)j->kind, T);
  }
}

/* ---- sum_cols: s[c] = sum over rows of x[r, c] (+ beta s[c]), each
 * column's rows added in order (as the dialect's kernel: the same bits),
 * COL_BLOCK columns a task. ---- */

typedef struct {
  void *s;
  const void *x;
  int64_t rows, cols;
  float beta;
} sum_cols_job;

static inline __attribute__((always_inline)) void sum_cols_run(const sum_cols_job *j,
                                                               int64_t lo, int64_t hi, int T) {
  for (int64_t t = lo; t < hi; t++) {
    int64_t c0 = t * COL_BLOCK, n = j->cols - c0 < COL_BLOCK ? j->cols - c0 : COL_BLOCK;
    float acc[COL_BLOCK] = {0};
    if (n == COL_BLOCK) {
      enum { NV = COL_BLOCK / VL };
      vf av[NV];
      UNROLL for (int s = 0; s < NV; s++) av[s] = vf_splat(0.0f);
      for (int64_t r = 0, at = c0; r < j->rows; r++, at += j->cols)
        UNROLL for (int s = 0; s < NV; s++) av[s] += vt_load(j->x, T, at + s * VL);
      memcpy(acc, av, sizeof acc);
    } else {
      for (int64_t r = 0, at = c0; r < j->rows; r++, at += j->cols)
        for (int64_t c = 0; c < n; c++) acc[c] += vt_get(j->x, T, at + c);
    }
    for (int64_t c = 0; c < n; c++)
      vt_put(j->s, T, c0 + c,
             j->beta != 0.0f ? j->beta * vt_get(j->s, T, c0 + c) + acc[c] : acc[c]);
  }
}

/* Arguments: activation y, x, count, kind; activation_grad dx, dy, t,
 * count, kind; bcast y, a, b, count, m, op; bcast_grad_b t, dy, a, b,
 * count, m, op (kind 1 marks the gradient); sum_cols s, x, rows, cols,
 * beta. EW_TYPED(SUF, T) makes native_<kernel>_SUF of each for storage
 * type T; the exact GELU (kind 2) runs the dialect's kernel of that type. */
#define EW_TYPED(SUF, T)                                                                    \
  static void activation_part_##SUF(void *ctx, int64_t lo, int64_t hi, int part) {          \
    const ew_job *j = ctx;                                                                  \
    (void)part;                                                                             \
    if (j->kind == 2) {                                                                     \
      int64_t end = hi * EW_BLOCK < j->count ? hi * EW_BLOCK : j->count;                    \
      dlrt_k_activation_##SUF(lo * EW_BLOCK, end, j->y, j->x, j->count, j->kind);           \
      return;                                                                               \
    }                                                                                       \
    activation_run(j, lo, hi, T);                                                           \
  }                                                                                         \
  static void activation_grad_part_##SUF(void *ctx, int64_t lo, int64_t hi, int part) {     \
    const ew_job *j = ctx;                                                                  \
    (void)part;                                                                             \
    if (j->kind == 2) {                                                                     \
      int64_t end = hi * EW_BLOCK < j->count ? hi * EW_BLOCK : j->count;                    \
      dlrt_k_activation_grad_##SUF(lo * EW_BLOCK, end, j->y, j->dy, j->x, j->count,         \
                                   j->kind);                                                \
      return;                                                                               \
    }                                                                                       \
    activation_grad_run(j, lo, hi, T);                                                      \
  }                                                                                         \
  static int native_activation_##SUF(const dlrt__arg *a) {                                  \
    ew_job j = {.y = NA_BUF(0, void), .x = NA_BUF(1, void), .count = a[2].i, .kind = a[3].i}; \
    int64_t tasks = (j.count + EW_BLOCK - 1) / EW_BLOCK;                                    \
    cpu_native_parallel(tasks, cpu_native_parts(tasks, 8 * EW_BLOCK), activation_part_##SUF, \
                        &j);                                                                \
    return DLRT_OK;                                                                         \
  }                                                                                         \
  static int native_activation_grad_##SUF(const dlrt__arg *a) {                             \
    ew_job j = {.y = NA_BUF(0, void), .dy = NA_BUF(1, void), .x = NA_BUF(2, void),          \
                .count = a[3].i, .kind = a[4].i};                                           \
    int64_t tasks = (j.count + EW_BLOCK - 1) / EW_BLOCK;                                    \
    cpu_native_parallel(tasks, cpu_native_parts(tasks, 8 * EW_BLOCK),                       \
                        activation_grad_part_##SUF, &j);                                    \
    return DLRT_OK;                                                                         \
  }                                                                                         \
  static void bcast_part_##SUF(void *ctx, int64_t lo, int64_t hi, int part) {               \
    (void)part;                                                                             \
    bcast_run(ctx, lo, hi, T);                                                              \
  }                                                                                         \
  static int native_bcast_##SUF(const dlrt__arg *a) {                                       \
    ew_job j = {.y = NA_BUF(0, void), .x = NA_BUF(1, void), .b = NA_BUF(2, void),           \
                .count = a[3].i, .m = a[4].i, .op = a[5].i, .kind = 0};                     \
    if (j.m < 1) return DLRT_OK;                                                            \
    int64_t rows = (j.count + j.m - 1) / j.m;                                               \
    cpu_native_parallel(rows, cpu_native_parts(rows, j.m), bcast_part_##SUF, &j);           \
    return DLRT_OK;                                                                         \
  }                                                                                         \
  static int native_bcast_grad_b_##SUF(const dlrt__arg *a) {                                \
    ew_job j = {.y = NA_BUF(0, void), .dy = NA_BUF(1, void), .x = NA_BUF(2, void),          \
                .b = NA_BUF(3, void), .count = a[4].i, .m = a[5].i, .op = a[6].i,           \
                .kind = 1};                                                                 \
    if (j.m < 1) return DLRT_OK;                                                            \
    int64_t rows = (j.count + j.m - 1) / j.m;                                               \
    cpu_native_parallel(rows, cpu_native_parts(rows, j.m), bcast_part_##SUF, &j);           \
    return DLRT_OK;                                                                         \
  }                                                                                         \
  static void sum_cols_part_##SUF(void *ctx, int64_t lo, int64_t hi, int part) {            \
    (void)part;                                                                             \
    sum_cols_run(ctx, lo, hi, T);                                                           \
  }                                                                                         \
  static int native_sum_cols_##SUF(const dlrt__arg *a) {                                    \
    sum_cols_job j = {NA_BUF(0, void), NA_BUF(1, void), a[2].i, a[3].i, a[4].f};            \
    int64_t tasks = (j.cols + COL_BLOCK - 1) / COL_BLOCK;                                   \
    cpu_native_parallel(tasks, cpu_native_parts(tasks, j.rows * COL_BLOCK),                 \
                        sum_cols_part_##SUF, &j);                                           \
    return DLRT_OK;                                                                         \
  }
EW_TYPED(f32, DLRT_F32)
EW_TYPED(f16, DLRT_F16)
EW_TYPED(bf16, DLRT_BF16)

/* ---- softmax and softmax + cross-entropy over rows, a row a task. ---- */

typedef struct {
  float *y, *loss, *dz;
  const float *x, *dy;
  const int *labels;
  int64_t rows, cols;
  float smoothing, grad_scale;
} softmax_job;

/* The row's maximum (in *max_out) and its sum of exp(x - max). */
static float row_exp_sum(const float *x, int64_t cols, float *max_out) {
  vf mx = vf_splat(-__builtin_inff());
  for (int64_t c = 0; c < cols; c += VL) {
    vf v = vf_load_n(x + c, cols - c < VL ? cols - c : VL, -__builtin_inff());
    mx = vf_max(v, mx);
  }
  float m = vf_hmax_lanes(&mx);
  *max_out = m;
  return RL_ROW_SUM(cols, vf_exp(RL_AT(x, -__builtin_inff()) - m));
}

/* loss[r] = lse - sum q z, dz = (softmax(z) - q) grad_scale, q = (1 - eps)
 * onehot(label) + eps / classes. */
static void xent_part(void *ctx, int64_t lo, int64_t hi, int part) {
  const softmax_job *j = ctx;
  int64_t cols = j->cols;
  float off = j->smoothing / (float)cols, hit = 1.0f - j->smoothing;
  (void)part;
  for (int64_t r = lo; r < hi; r++) {
    const float *z = j->x + r * cols;
    float *dz = j->dz + r * cols;
    float m, sum = row_exp_sum(z, cols, &m);
    float lse = m + logf(sum);
    int label = j->labels[r];
#define Q_AT(at)                                                                            \
  (off + vf_select(vi_iota() + (int32_t)(at) == label, vf_splat(hit), vf_splat(0.0f)))
    float qz = RL_ROW_SUM(cols, Q_AT(at_) * RL_AT(z, 0.0f));
    for (int64_t c = 0; c < cols; c += VL) {
      int64_t n = cols - c < VL ? cols - c : VL;
      vf_store_n(dz + c, (vf_exp(vf_load_n(z + c, n, 0.0f) - lse) - Q_AT(c)) * j->grad_scale, n);
    }
#undef Q_AT
    j->loss[r] = lse - qz;
  }
}

static void softmax_part(void *ctx, int64_t lo, int64_t hi, int part) {
  const softmax_job *j = ctx;
  int64_t cols = j->cols;
  (void)part;
  for (int64_t r = lo; r < hi; r++) {
    const float *x = j->x + r * cols;
    float *y = j->y + r * cols;
    float m, sum = row_exp_sum(x, cols, &m);
    for (int64_t c = 0; c < cols; c += VL) {
      int64_t n = cols - c < VL ? cols - c : VL;
      vf_store_n(y + c, vf_exp(vf_load_n(x + c, n, 0.0f) - m) / sum, n);
    }
  }
}

/* dx = y (dy - sum(dy y)) per row. */
static void softmax_grad_part(void *ctx, int64_t lo, int64_t hi, int part) {
  const softmax_job *j = ctx;
  int64_t cols = j->cols;
  (void)part;
  for (int64_t r = lo; r < hi; r++) {
    const float *y = j->x + r * cols, *dy = j->dy + r * cols;
    float *dx = j->y + r * cols;
    float dot = RL_ROW_SUM(cols, RL_AT(dy, 0.0f) * RL_AT(y, 0.0f));
    for (int64_t c = 0; c < cols; c += VL) {
      int64_t n = cols - c < VL ? cols - c : VL;
      vf_store_n(dx + c, vf_load_n(y + c, n, 0.0f) * (vf_load_n(dy + c, n, 0.0f) - dot), n);
    }
  }
}

/* Arguments: softmax_xent z, labels, loss, dz, rows, classes, smoothing,
 * grad_scale; softmax y, x, rows, cols; softmax_grad dx, dy, y, rows, cols. */
static int native_softmax_xent(const dlrt__arg *a) {
  softmax_job j = {.x = NA_BUF(0, float), .labels = NA_BUF(1, int), .loss = NA_BUF(2, float),
                   .dz = NA_BUF(3, float), .rows = a[4].i, .cols = a[5].i,
                   .smoothing = a[6].f, .grad_scale = a[7].f};
  cpu_native_parallel(j.rows, cpu_native_parts(j.rows, 4 * j.cols), xent_part, &j);
  return DLRT_OK;
}

static int native_softmax(const dlrt__arg *a) {
  softmax_job j = {.y = NA_BUF(0, float), .x = NA_BUF(1, float), .rows = a[2].i,
                   .cols = a[3].i};
  cpu_native_parallel(j.rows, cpu_native_parts(j.rows, 3 * j.cols), softmax_part, &j);
  return DLRT_OK;
}

static int native_softmax_grad(const dlrt__arg *a) {
  softmax_job j = {.y = NA_BUF(0, float), .dy = NA_BUF(1, float), .x = NA_BUF(2, float),
                   .rows = a[3].i, .cols = a[4].i};
  cpu_native_parallel(j.rows, cpu_native_parts(j.rows, 2 * j.cols), softmax_grad_part, &j);
  return DLRT_OK;
}

/* ---- embedding_grad: dtable[v, :] = the sum of dy[k, :] over k with
 * ids[k] == v, k ascending (the dialect's order: the same bits). A task is
 * a block of EMB_ROWS rows of the table: it zeroes them, then adds the rows
 * of dy whose id falls in the block, in order, so that nobody scans the
 * ids once per row of a large vocabulary. ---- */

#define EMB_ROWS 64

typedef struct {
  float *dtable;
  const float *base; /* embedding_grad_acc: the gradient so far; NULL: zeros */
  const float *dy;
  const int *ids;
  int64_t count, vocab, dim;
} embed_job;

static void embedding_grad_part(void *ctx, int64_t lo, int64_t hi, int part) {
  const embed_job *j = ctx;
  int64_t v0 = lo * EMB_ROWS, v1 = hi * EMB_ROWS < j->vocab ? hi * EMB_ROWS : j->vocab;
  int64_t dim = j->dim;
  (void)part;
  size_t bytes = (size_t)((v1 - v0) * dim) * sizeof(float);
  if (!j->base)
    memset(j->dtable + v0 * dim, 0, bytes);
  else if (j->base != j->dtable) /* in place: the rows are already there */
    memcpy(j->dtable + v0 * dim, j->base + v0 * dim, bytes);
  for (int64_t k = 0; k < j->count; k++) {
    int64_t id = j->ids[k];
    if (id < v0 || id >= v1) continue;
    float *row = j->dtable + id * dim;
    const float *src = j->dy + k * dim;
    int64_t d = 0;
    for (; d + VL <= dim; d += VL) vf_store(row + d, vf_load(row + d) + vf_load(src + d));
    for (; d < dim; d++) row[d] += src[d];
  }
}

static int embedding_grad_run(embed_job *j) {
  int64_t tasks = (j->vocab + EMB_ROWS - 1) / EMB_ROWS;
  cpu_native_parallel(tasks, cpu_native_parts(tasks, EMB_ROWS * j->dim + j->count),
                      embedding_grad_part, j);
  return DLRT_OK;
}

/* Arguments: dtable, dy, ids, count, vocab, dim. */
static int native_embedding_grad(const dlrt__arg *a) {
  embed_job j = {NA_BUF(0, float), NULL, NA_BUF(1, float), NA_BUF(2, int), a[3].i, a[4].i,
                 a[5].i};
  return embedding_grad_run(&j);
}

/* Arguments: dtable, base, dy, ids, count, vocab, dim. */
static int native_embedding_grad_acc(const dlrt__arg *a) {
  embed_job j = {NA_BUF(0, float), NA_BUF(1, float), NA_BUF(2, float), NA_BUF(3, int), a[4].i,
                 a[5].i, a[6].i};
  return embedding_grad_run(&j);
}
