/* cpu_native_attention.h — fused multi-head self-attention, forward and
 * backward, for a CPU: the native versions of kernels/attention.h's
 * attention, attention_grad_q and attention_grad_kv (whose header defines
 * the layout of qkv, o, lse and dsum and the formulas). A template: each
 * instruction set's file includes it after its target pragma
 * (cpu_native_isa.h).
 *
 * A task is one head of one sequence, or a run of its query (key) blocks
 * when there are too few heads to keep the threads busy. It copies what it
 * reads of the head into its part's scratch, converted to fp32: queries
 * times scale and dO as rows, keys and values as rows or transposed (D x
 * T), each row padded to Dp = D rounded up to 16 floats. Blocks of
 * ATT_QB queries then walk blocks of keys: the scores of a block (at most
 * ATT_QB x ATT_KB floats) come from a register-blocked product (att_mm),
 * softmax is online across key blocks (FlashAttention's running maximum
 * and sum) and exact within one, and the backward pass recomputes p from
 * the saved lse. The scratch is O(T D) per part; nothing of size T x T
 * exists. The launch's `rows` (the dialect's tile) is not used.
 *
 * Each element of o, dq, dk, dv sums its terms in one order fixed by the
 * shape (keys or queries ascending, from block boundaries at multiples of
 * the block sizes), whichever task computes it: the results do not depend
 * on how the heads are cut into tasks or on the thread count.
 *
 * Dropout on the probabilities (threshold > 0) multiplies each p by
 * attention.h's dlrt__attn_keep of (seed, head, query, key), the portable
 * kernels' mask, in the forward pass after the row sums and again in both
 * backward passes; threshold 0 takes the paths without it. */
#include "attention.h" /* dlrt__attn_keep: the portable kernels' mask */

#define ATT_QB 32  /* queries per block: forward, dq */
#define ATT_KB 128 /* keys per block: forward, dq */
#define ATT_QBK 64 /* queries per block: dk, dv */
#define ATT_KBK 32 /* keys per block: dk, dv */

static inline int64_t att_round(int64_t n) { return (n + VL - 1) / VL * VL; }

/* att_mm's block: MM_R rows x 2 registers of columns in registers. */
#define MM_R 4

/* R rows x NC registers of c at once (R <= MM_R, NC <= 2), see att_mm. */
static inline __attribute__((always_inline)) void att_block(float *c, int64_t ldc, const float *a,
                                                            int64_t a_row, int64_t a_col,
                                                            const float *b, int64_t ldb,
                                                            int64_t depth, int accumulate,
                                                            const int R, const int NC) {
  vf acc[MM_R][2];
  UNROLL for (int r = 0; r < R; r++)
    UNROLL for (int s = 0; s < NC; s++)
      acc[r][s] = accumulate ? vf_load(c + r * ldc + s * VL) : vf_splat(0.0f);
  for (int64_t k = 0; k < depth; k++) {
    vf bv[2];
    UNROLL for (int s = 0; s < NC; s++) bv[s] = vf_load(b + k * ldb + s * VL);
    UNROLL for (int r = 0; r < R; r++) {
      float ar = a[r * a_row + k * a_col];
      UNROLL for (int s = 0; s < NC; s++) acc[r][s] = vf_fma(vf_splat(ar), bv[s], acc[r][s]);
    }
  }
  UNROLL for (int r = 0; r < R; r++)
    UNROLL for (int s = 0; s < NC; s++) vf_store(c + r * ldc + s * VL, acc[r][s]);
}

/* c (rows x cols, row stride ldc) = (accumulate ? c : 0) + A B, with
 * A(i, k) = a[i a_row + k a_col] (k < depth) and B(k, j) = b[k ldb + j];
 * cols is a multiple of 16 (and of VL), b readable that far. Each element
 * adds its depth terms in order k = 0, 1, ... (an FMA each), whichever
 * block of registers holds it: the same bits for every VL. */
static void att_mm(float *c, int64_t ldc, const float *a, int64_t a_row, int64_t a_col,
                   const float *b, int64_t ldb, int64_t rows, int64_t cols, int64_t depth,
                   int accumulate) {
  int64_t i = 0;
  for (; i + MM_R <= rows; i += MM_R) {
    int64_t j = 0;
    for (; j + 2 * VL <= cols; j += 2 * VL)
      att_block(c + i * ldc + j, ldc, a + i * a_row, a_row, a_col, b + j, ldb, depth,
                accumulate, MM_R, 2);
    for (; j < cols; j += VL)
      att_block(c + i * ldc + j, ldc, a + i * a_row, a_row, a_col, b + j, ldb, depth,
                accumulate, MM_R, 1);
  }
  for (; i < rows; i++) {
    int64_t j = 0;
    for (; j + 2 * VL <= cols; j += 2 * VL)
      att_block(c + i * ldc + j, ldc, a + i * a_row, a_row, a_col, b + j, ldb, depth,
                accumulate, 1, 2);
    for (; j < cols; j += VL)
      att_block(c + i * ldc + j, ldc, a + i * a_row, a_row, a_col, b + j, ldb, depth,
                accumulate, 1, 1);
  }
}

typedef struct {
  int type;             /* DLRT_F32, DLRT_F16 or DLRT_BF16: qkv, o, dout, dqkv */
  void *out;            /* forward: o; backward: dqkv */
  float *lse_out, *dsum_out;
  const void *qkv, *o, *dout;
  const float *lse, *dsum;
  int64_t batch, seq, heads, d, causal;
  float scale;
  int64_t seed, threshold; /* dropout's (threshold 0: none) */
  float keep_scale;
  /* derived */
  int64_t c, dp, tp;    /* C, D padded, T padded (to 16) */
  int64_t chunks;       /* tasks per head */
  int64_t blocks;       /* query (key) blocks per head */
  size_t per_part;      /* floats of scratch per part */
  float *scratch;
} att_job;

/* n values of a typed array from element `at`, times mul, into dst. Inlined:
 * rows are short (D), so a call per row would cost more than the row. */
static inline __attribute__((always_inline)) void att_load(const void *base, int type,
                                                           int64_t at, int64_t n, float mul,
                                                           float *dst) {
  if (type == DLRT_F32) {
    const float *p = (const float *)base + at;
    int64_t i = 0;
    for (; i + VL <= n; i += VL) vf_store(dst + i, vf_load(p + i) * mul);
    for (; i < n; i++) dst[i] = p[i] * mul;
  } else if (type == DLRT_F16) {
    const uint16_t *p = (const uint16_t *)base + at;
    for (int64_t i = 0; i < n; i++) dst[i] = dlrt_half_to_float(p[i]) * mul;
  } else {
    const uint16_t *p = (const uint16_t *)base + at;
    for (int64_t i = 0; i < n; i++) dst[i] = dlrt_as_float((uint32_t)p[i] << 16) * mul;
  }
}

/* n floats times mul into a typed array from element `at` (rounded once). */
static inline __attribute__((always_inline)) void att_store(void *base, int type, int64_t at,
                                                            int64_t n, const float *src,
                                                            float mul) {
  if (type == DLRT_F32) {
    float *p = (float *)base + at;
    int64_t i = 0;
    for (; i + VL <= n; i += VL) vf_store(p + i, vf_load(src + i) * mul);
    for (; i < n; i++) p[i] = src[i] * mul;
  } else if (type == DLRT_F16) {
    uint16_t *p = (uint16_t *)base + at;
    for (int64_t i = 0; i < n; i++) p[i] = dlrt_float_to_half(src[i] * mul);
  } else {
    uint16_t *p = (uint16_t *)base + at;
    for (int64_t i = 0; i < n; i++) p[i] = dlrt_float_to_bf16(src[i] * mul);
  }
}

/* Element (b, t, part third, head h, column 0) of qkv (or of o and dout,
 * part -1: B x T x C) is att_at(bh, part) + t att_stride(part). */
static inline int64_t att_at(const att_job *j, int64_t bh, int part) {
  int64_t b = bh / j->heads, h = bh - b * j->heads;
  return part < 0 ? b * j->seq * j->c + h * j->d : b * j->seq * 3 * j->c + part * j->c + h * j->d;
}
static inline int64_t att_stride(const att_job *j, int part) {
  return part < 0 ? j->c : 3 * j->c;
}

/* Rows of a head lie 3C (or C) elements apart, too far for the hardware's
 * prefetchers to follow in time: the gathers ask for the row ATT_AHEAD
 * rows on (its cache lines) while they copy this one. */
#define ATT_AHEAD 8
static inline void att_prefetch(const att_job *j, const void *base, int64_t at, int64_t n) {
  const char *p = (const char *)base + at * (j->type == DLRT_F32 ? 4 : 2);
  int64_t bytes = n * (j->type == DLRT_F32 ? 4 : 2);
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b);
}

/* Rows t0 .. t0 + n - 1 of head bh's third `part` of qkv (-1: of `src`, B
 * x T x C) times mul, into dst (n x dp, padding columns 0). */
static void att_rows(const att_job *j, const void *src, int64_t bh, int part, int64_t t0,
                     int64_t n, float mul, float *dst) {
  int64_t at = att_at(j, bh, part) + t0 * att_stride(j, part), stride = att_stride(j, part);
  for (int64_t t = 0; t < n; t++, at += stride) {
    float *row = dst + t * j->dp;
    if (t + ATT_AHEAD < n) att_prefetch(j, src, at + ATT_AHEAD * stride, j->d);
    att_load(src, j->type, at, j->d, mul, row);
    for (int64_t k = j->d; k < j->dp; k++) row[k] = 0.0f;
  }
}

/* The same rows of qkv transposed: dst[k ld + t] (D x ld), columns n .. ld
 * - 1 zero (ld >= n rounded up to VL); `rows` is VL x dp floats of room. A
 * block of VL rows at a time, transposed in registers. */
static void att_cols(const att_job *j, int64_t bh, int part, int64_t t0, int64_t n,
                     int64_t ld, float *rows, float *dst) {
  int64_t stride = att_stride(j, part), at = att_at(j, bh, part) + t0 * stride;
  int64_t d = j->d, dp = j->dp;
  for (int64_t tb = 0; tb < n; tb += VL) {
    int64_t nt = n - tb < VL ? n - tb : VL;
    for (int64_t i = 0; i < VL; i++) {
      float *row = rows + i * dp;
      if (i >= nt) {
        memset(row, 0, (size_t)dp * sizeof *row);
        continue;
      }
      int64_t src = at + (tb + i) * stride;
      if (tb + i + ATT_AHEAD < n) att_prefetch(j, j->qkv, src + ATT_AHEAD * stride, d);
      att_load(j->qkv, j->type, src, d, 1.0f, row);
      for (int64_t k = d; k < dp; k++) row[k] = 0.0f;
    }
    for (int64_t k0 = 0; k0 < d; k0 += VL) {
      vf r[VL];
      for (int i = 0; i < VL; i++) r[i] = vf_load(rows + i * dp + k0);
      vf_transpose(r);
      for (int64_t k = 0; k < VL && k0 + k < d; k++) vf_store(dst + (k0 + k) * ld + tb, r[k]);
    }
  }
  int64_t done = (n + VL - 1) / VL * VL;
  for (int64_t k = 0; k < d; k++)
    memset(dst + k * ld + done, 0, (size_t)(ld - done) * sizeof *dst);
}

/* Keys of query row `q` (global) counted in a block of n keys from k0:
 * the causal mask keeps keys <= q. */
static inline int64_t att_keys(const att_job *j, int64_t q, int64_t k0, int64_t n) {
  if (!j->causal) return n;
  int64_t keys = q - k0 + 1;
  return keys < 0 ? 0 : keys < n ? keys : n;
}

/* Tasks per head: 1 when there are heads enough for every part, else up to
 * one per block. */
static void att_plan(att_job *j, int64_t block) {
  j->c = j->heads * j->d;
  j->dp = att_round(j->d);
  j->tp = att_round(j->seq);
  j->blocks = (j->seq + block - 1) / block;
  int64_t heads = j->batch * j->heads, want = 4 * (int64_t)cpu_pool_size();
  j->chunks = heads >= want ? 1 : (want + heads - 1) / heads;
  if (j->chunks > j->blocks) j->chunks = j->blocks;
  if (j->chunks < 1) j->chunks = 1;
}

/* The blocks [first, end) of task `task`'s head (task / chunks). */
static void att_task_blocks(const att_job *j, int64_t task, int64_t *first, int64_t *end) {
  int64_t chunk = task % j->chunks;
  *first = j->blocks * chunk / j->chunks;
  *end = j->blocks * (chunk + 1) / j->chunks;
}

static int att_alloc(att_job *j, int parts) {
  size_t bytes = (size_t)parts * j->per_part * sizeof(float);
  j->scratch = bytes ? aligned_alloc(64, (bytes + 63) / 64 * 64) : NULL;
  if (bytes && !j->scratch)
    return dlrt__set_error(DLRT_ERR_OOM, "attention: out of host memory for %zu bytes of "
                           "scratch (cpu)", bytes);
  return DLRT_OK;
}

/* ---------------------------------------------------------------- forward */

static void att_forward_part(void *ctx, int64_t lo, int64_t hi, int part) {
  const att_job *j = ctx;
  int64_t d = j->d, dp = j->dp, tp = j->tp, T = j->seq;
  float *kt = j->scratch + (size_t)part * j->per_part; /* keys, D x tp */
  float *v = kt + d * tp;                              /* values, tp x dp */
  float *q = v + tp * dp;                              /* queries x scale, QB x dp */
  float *o = q + ATT_QB * dp;                          /* sum of p v, QB x dp */
  float *s = o + ATT_QB * dp;                          /* scores, then p, QB x KB */
  float *m = s + ATT_QB * ATT_KB, *l = m + ATT_QB, *alpha = l + ATT_QB;
  float *row = alpha + ATT_QB;                         /* VL x dp */
  for (int64_t task = lo; task < hi; task++) {
    int64_t bh = task / j->chunks, b0, b1;
    att_task_blocks(j, task, &b0, &b1);
    int64_t q_end = b1 * ATT_QB < T ? b1 * ATT_QB : T;
    int64_t keys = j->causal ? q_end : T;
    att_cols(j, bh, 1, 0, keys, tp, row, kt);
    att_rows(j, j->qkv, bh, 2, 0, keys, 1.0f, v);
    for (int64_t blk = b0; blk < b1; blk++) {
      int64_t i0 = blk * ATT_QB, bq = T - i0 < ATT_QB ? T - i0 : ATT_QB;
      int64_t key_end = j->causal ? i0 + bq : T;
      att_rows(j, j->qkv, bh, 0, i0, bq, j->scale, q);
      memset(o, 0, (size_t)(bq * dp) * sizeof *o);
      for (int64_t i = 0; i < bq; i++) m[i] = -__builtin_inff(), l[i] = 0.0f;
      for (int64_t k0 = 0; k0 < key_end; k0 += ATT_KB) {
        int64_t kb = key_end - k0 < ATT_KB ? key_end - k0 : ATT_KB, kb16 = att_round(kb);
        att_mm(s, ATT_KB, q, dp, 1, kt + k0, tp, bq, kb16, d, 0);
        for (int64_t i = 0; i < bq; i++) {
          float *si = s + i * ATT_KB;
          int64_t n = att_keys(j, i0 + i, k0, kb);
          vf mx = vf_splat(m[i]);
          for (int64_t c = 0; c < n; c += VL) {
            vf sv = vf_load_n(si + c, n - c < VL ? n - c : VL, -__builtin_inff());
            mx = vf_max(sv, mx);
          }
          float mi = n ? vf_hmax_lanes(&mx) : m[i];
          for (int64_t c = 0; c < kb16; c += VL) {
            vf p = vf_exp(vf_load(si + c) - mi);
            vf_store(si + c, vf_select(vi_iota() + (int32_t)c < (int32_t)n, p, vf_splat(0.0f)));
          }
          float sum = RL_ROW_SUM(kb16, RL_AT(si, 0.0f));
          alpha[i] = n ? expf(m[i] - mi) : 1.0f; /* 0 on the first block (m = -inf) */
          l[i] = l[i] * alpha[i] + sum;
          m[i] = mi;
          for (int64_t c = 0; j->threshold && c < n; c++)
            si[c] *= dlrt__attn_keep(j->seed, j->threshold, j->keep_scale, bh, i0 + i, k0 + c);
          if (k0 > 0)
            for (int64_t c = 0; c < dp; c += VL)
              vf_store(o + i * dp + c, vf_load(o + i * dp + c) * alpha[i]);
        }
        att_mm(o, dp, s, ATT_KB, 1, v + k0 * dp, dp, bq, dp, kb, 1);
      }
      for (int64_t i = 0; i < bq; i++) {
        att_store(j->out, j->type, att_at(j, bh, -1) + (i0 + i) * j->c, d, o + i * dp,
                  1.0f / l[i]);
        j->lse_out[bh * T + i0 + i] = m[i] + logf(l[i]);
      }
    }
  }
}

/* ------------------------------------------------------- backward: dq, D */

/* A row of the backward tiles with dropout: scores si (width columns, a
 * multiple of VL; the first n keys counted) into p z, and dO v in di into
 * ds = p (z dp - D_i), for query q and keys from k0. */
static void att_drop_grad_row(const att_job *j, float *si, float *di, int64_t width, int64_t n,
                              float lse, float dsum, int64_t bh, int64_t q, int64_t k0) {
  for (int64_t c = 0; c < width; c += VL) {
    vi idx = vi_iota() + (int32_t)c;
    vf_store(si + c, vf_select(idx < (int32_t)n, vf_exp(vf_load(si + c) - lse), vf_splat(0.0f)));
  }
  for (int64_t c = 0; c < width; c++) {
    float p = si[c], z = dlrt__attn_keep(j->seed, j->threshold, j->keep_scale, bh, q, k0 + c);
    si[c] = p * z;
    di[c] = p * (di[c] * z - dsum);
  }
}

static void att_grad_q_part(void *ctx, int64_t lo, int64_t hi, int part) {
  const att_job *j = ctx;
  int64_t d = j->d, dp = j->dp, tp = j->tp, T = j->seq;
  float *kt = j->scratch + (size_t)part * j->per_part; /* keys, D x tp */
  float *vt = kt + d * tp;                             /* values, D x tp */
  float *k = vt + d * tp;                              /* keys, tp x dp */
  float *q = k + tp * dp;                              /* queries x scale, QB x dp */
  float *dout = q + ATT_QB * dp;                       /* dO, QB x dp */
  float *dq = dout + ATT_QB * dp;                      /* sum of ds k, QB x dp */
  float *s = dq + ATT_QB * dp;                         /* scores, then p, QB x KB */
  float *dpm = s + ATT_QB * ATT_KB;                    /* dO v, then ds, QB x KB */
  float *lse = dpm + ATT_QB * ATT_KB, *dsum = lse + ATT_QB;
  float *row = dsum + ATT_QB;                          /* VL x dp */
  for (int64_t task = lo; task < hi; task++) {
    int64_t bh = task / j->chunks, b0, b1;
    att_task_blocks(j, task, &b0, &b1);
    int64_t q_end = b1 * ATT_QB < T ? b1 * ATT_QB : T;
    int64_t keys = j->causal ? q_end : T;
    att_cols(j, bh, 1, 0, keys, tp, row, kt);
    att_cols(j, bh, 2, 0, keys, tp, row, vt);
    att_rows(j, j->qkv, bh, 1, 0, keys, 1.0f, k);
    for (int64_t blk = b0; blk < b1; blk++) {
      int64_t i0 = blk * ATT_QB, bq = T - i0 < ATT_QB ? T - i0 : ATT_QB;
      int64_t key_end = j->causal ? i0 + bq : T;
      att_rows(j, j->qkv, bh, 0, i0, bq, j->scale, q);
      att_rows(j, j->dout, bh, -1, i0, bq, 1.0f, dout);
      for (int64_t i = 0; i < bq; i++) {
        /* D_i = dO_i . o_i */
        att_load(j->o, j->type, att_at(j, bh, -1) + (i0 + i) * j->c, d, 1.0f, row);
        for (int64_t c = d; c < dp; c++) row[c] = 0.0f;
        const float *doi = dout + i * dp;
        dsum[i] = RL_ROW_SUM(dp, RL_AT(doi, 0.0f) * RL_AT(row, 0.0f));
        j->dsum_out[bh * T + i0 + i] = dsum[i];
        lse[i] = j->lse[bh * T + i0 + i];
      }
      memset(dq, 0, (size_t)(bq * dp) * sizeof *dq);
      for (int64_t k0 = 0; k0 < key_end; k0 += ATT_KB) {
        int64_t kb = key_end - k0 < ATT_KB ? key_end - k0 : ATT_KB, kb16 = att_round(kb);
        att_mm(s, ATT_KB, q, dp, 1, kt + k0, tp, bq, kb16, d, 0);
        att_mm(dpm, ATT_KB, dout, dp, 1, vt + k0, tp, bq, kb16, d, 0);
        for (int64_t i = 0; i < bq; i++) {
          int64_t n = att_keys(j, i0 + i, k0, kb);
          float *si = s + i * ATT_KB, *di = dpm + i * ATT_KB;
          if (j->threshold) {
            att_drop_grad_row(j, si, di, kb16, n, lse[i], dsum[i], bh, i0 + i, k0);
            continue;
          }
          for (int64_t c = 0; c < kb16; c += VL) {
            vi idx = vi_iota() + (int32_t)c;
            vf p = vf_select(idx < (int32_t)n, vf_exp(vf_load(si + c) - lse[i]), vf_splat(0.0f));
            vf_store(si + c, p);
            vf_store(di + c, p * (vf_load(di + c) - dsum[i]));
          }
        }
        att_mm(dq, dp, dpm, ATT_KB, 1, k + k0 * dp, dp, bq, dp, kb, 1);
      }
      for (int64_t i = 0; i < bq; i++)
        att_store(j->out, j->type, att_at(j, bh, 0) + (i0 + i) * 3 * j->c, d, dq + i * dp,
                  j->scale);
    }
  }
}

/* ----------------------------------------------------- backward: dk, dv */

static void att_grad_kv_part(void *ctx, int64_t lo, int64_t hi, int part) {
  const att_job *j = ctx;
  int64_t d = j->d, dp = j->dp, tp = j->tp, T = j->seq;
  const int64_t ldk = att_round(ATT_KBK);
  float *q = j->scratch + (size_t)part * j->per_part; /* queries x scale, tp x dp */
  float *dout = q + tp * dp;                          /* dO, tp x dp */
  float *lse = dout + tp * dp, *dsum = lse + tp;      /* tp each */
  float *kt = dsum + tp;                              /* keys of the block, D x ldk */
  float *vt = kt + d * ldk;                           /* values of the block, D x ldk */
  float *s = vt + d * ldk;                            /* scores, then p, QBK x ldk */
  float *dpm = s + ATT_QBK * ldk;                     /* dO v, then ds, QBK x ldk */
  float *dk = dpm + ATT_QBK * ldk, *dv = dk + ATT_KBK * dp; /* KBK x dp each */
  float *row = dv + ATT_KBK * dp;                     /* VL x dp */
  for (int64_t task = lo; task < hi; task++) {
    int64_t bh = task / j->chunks, b0, b1;
    att_task_blocks(j, task, &b0, &b1);
    int64_t q_start = j->causal ? b0 * ATT_KBK : 0;
    att_rows(j, j->qkv, bh, 0, q_start, T - q_start, j->scale, q + q_start * dp);
    att_rows(j, j->dout, bh, -1, q_start, T - q_start, 1.0f, dout + q_start * dp);
    for (int64_t t = q_start; t < T; t++) {
      lse[t] = j->lse[bh * T + t];
      dsum[t] = j->dsum[bh * T + t];
    }
    for (int64_t blk = b0; blk < b1; blk++) {
      int64_t k0 = blk * ATT_KBK, bk = T - k0 < ATT_KBK ? T - k0 : ATT_KBK;
      att_cols(j, bh, 1, k0, bk, ldk, row, kt);
      att_cols(j, bh, 2, k0, bk, ldk, row, vt);
      memset(dk, 0, (size_t)(ATT_KBK * dp) * sizeof *dk);
      memset(dv, 0, (size_t)(ATT_KBK * dp) * sizeof *dv);
      /* Causal: queries from this block's first key on. */
      for (int64_t q0 = j->causal ? k0 : 0; q0 < T; q0 += ATT_QBK) {
        int64_t bq = T - q0 < ATT_QBK ? T - q0 : ATT_QBK;
        att_mm(s, ldk, q + q0 * dp, dp, 1, kt, ldk, bq, ldk, d, 0);
        att_mm(dpm, ldk, dout + q0 * dp, dp, 1, vt, ldk, bq, ldk, d, 0);
        for (int64_t i = 0; i < bq; i++) {
          int64_t n = att_keys(j, q0 + i, k0, bk);
          float *si = s + i * ldk, *di = dpm + i * ldk;
          if (j->threshold) {
            att_drop_grad_row(j, si, di, ldk, n, lse[q0 + i], dsum[q0 + i], bh, q0 + i, k0);
            continue;
          }
          for (int64_t c = 0; c < ldk; c += VL) {
            vi idx = vi_iota() + (int32_t)c;
            vf p = vf_select(idx < (int32_t)n, vf_exp(vf_load(si + c) - lse[q0 + i]),
                             vf_splat(0.0f));
            vf_store(si + c, p);
            vf_store(di + c, p * (vf_load(di + c) - dsum[q0 + i]));
          }
        }
        /* dv += p^T dO, dk += ds^T (q scale): p and ds read transposed. */
        att_mm(dv, dp, s, 1, ldk, dout + q0 * dp, dp, bk, dp, bq, 1);
        att_mm(dk, dp, dpm, 1, ldk, q + q0 * dp, dp, bk, dp, bq, 1);
      }
      for (int64_t t = 0; t < bk; t++) {
        int64_t at = att_at(j, bh, 1) + (k0 + t) * 3 * j->c;
        att_store(j->out, j->type, at, d, dk + t * dp, 1.0f);
        att_store(j->out, j->type, at + j->c, d, dv + t * dp, 1.0f);
      }
    }
  }
}

/* ---------------------------------------------------------------- launches */

/* The sizes after the arrays: batch, seq, heads, head_dim, rows (unused),
 * causal, scale, then dropout's seed, threshold and keep_scale, from
 * argument `at`. */
static void att_sizes(att_job *j, const dlrt__arg *a, int at) {
  j->batch = a[at].i, j->seq = a[at + 1].i, j->heads = a[at + 2].i, j->d = a[at + 3].i;
  j->causal = a[at + 5].i, j->scale = a[at + 6].f;
  j->seed = a[at + 7].i, j->threshold = a[at + 8].i, j->keep_scale = a[at + 9].f;
}

static int att_run(att_job *j, int64_t block, cpu_native_part_fn fn, size_t (*scratch)(att_job *)) {
  if (j->batch * j->heads * j->seq * j->d == 0) return DLRT_OK;
  att_plan(j, block);
  j->per_part = (scratch(j) + 15) / 16 * 16;
  int64_t tasks = j->batch * j->heads * j->chunks;
  int parts = cpu_native_parts(tasks, j->seq * j->seq * j->d / j->chunks);
  int rc = att_alloc(j, parts);
  if (rc < 0) return rc;
  cpu_native_parallel(tasks, parts, fn, j);
  free(j->scratch);
  return DLRT_OK;
}

static size_t att_forward_scratch(att_job *j) {
  return (size_t)(j->d * j->tp + j->tp * j->dp + 2 * ATT_QB * j->dp + ATT_QB * ATT_KB +
                  3 * ATT_QB + VL * j->dp);
}
static size_t att_grad_q_scratch(att_job *j) {
  return (size_t)(2 * j->d * j->tp + j->tp * j->dp + 3 * ATT_QB * j->dp +
                  2 * ATT_QB * ATT_KB + 2 * ATT_QB + VL * j->dp);
}
static size_t att_grad_kv_scratch(att_job *j) {
  int64_t ldk = att_round(ATT_KBK);
  return (size_t)(2 * j->tp * j->dp + 2 * j->tp + 2 * j->d * ldk + 2 * ATT_QBK * ldk +
                  2 * ATT_KBK * j->dp + VL * j->dp);
}

/* Arguments (kernel_table.h): attention o, lse, qkv, sizes;
 * attention_grad_q dqkv, dsum, dout, qkv, o, lse, sizes;
 * attention_grad_kv dqkv, dout, qkv, lse, dsum, sizes. */
static int att_forward(const dlrt__arg *a, int type) {
  att_job j = {.type = type, .out = NA_BUF(0, void), .lse_out = NA_BUF(1, float),
               .qkv = NA_BUF(2, void)};
  att_sizes(&j, a, 3);
  return att_run(&j, ATT_QB, att_forward_part, att_forward_scratch);
}

static int att_grad_q(const dlrt__arg *a, int type) {
  att_job j = {.type = type, .out = NA_BUF(0, void), .dsum_out = NA_BUF(1, float),
               .dout = NA_BUF(2, void), .qkv = NA_BUF(3, void), .o = NA_BUF(4, void),
               .lse = NA_BUF(5, float)};
  att_sizes(&j, a, 6);
  return att_run(&j, ATT_QB, att_grad_q_part, att_grad_q_scratch);
}

static int att_grad_kv(const dlrt__arg *a, int type) {
  att_job j = {.type = type, .out = NA_BUF(0, void), .dout = NA_BUF(1, void),
               .qkv = NA_BUF(2, void), .lse = NA_BUF(3, float), .dsum = NA_BUF(4, float)};
  att_sizes(&j, a, 5);
  return att_run(&j, ATT_KBK, att_grad_kv_part, att_grad_kv_scratch);
}

#define ATT_ENTRIES(SUF, TYPE)                                                              \
  static int native_attention_##SUF(const dlrt__arg *a) { return att_forward(a, TYPE); }    \
  static int native_attention_grad_q_##SUF(const dlrt__arg *a) { return att_grad_q(a, TYPE); } \
  static int native_attention_grad_kv_##SUF(const dlrt__arg *a) { return att_grad_kv(a, TYPE); }
ATT_ENTRIES(f32, DLRT_F32)
ATT_ENTRIES(f16, DLRT_F16)
ATT_ENTRIES(bf16, DLRT_BF16)
#undef ATT_ENTRIES
