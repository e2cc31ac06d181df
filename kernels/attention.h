/* attention.h — fused multi-head self-attention, forward and backward, in
 * the portable dialect (FlashAttention's scheme, Dao et al. 2022; the
 * backward pass as FlashAttention-2's, without atomics).
 *
 * qkv is B x T x 3C, the output of GPT-2's c_attn: row t holds the queries
 * of every head, then the keys, then the values; head h's are the D = C /
 * heads columns from h D in each third. o is B x T x C (head h in columns
 * h D .. h D + D - 1), lse B x heads x T (fp32).
 *
 *   forward:  o_i = sum_j p_ij v_j,  p_ij = exp(s_ij - lse_i),
 *             s_ij = scale q_i . k_j (keys j <= i only when causal),
 *             lse_i = log sum_j exp(s_ij)
 *   backward: D_i = dO_i . o_i;  ds_ij = p_ij (dO_i . v_j - D_i)
 *             dq_i = scale sum_j ds_ij k_j,  dk_j = scale sum_i ds_ij q_i,
 *             dv_j = sum_i p_ij dO_i
 *
 * Nothing of size T x T is ever stored: a work-group takes a tile of rows
 * (queries, or keys in dK / dV) and walks the tiles of the other side
 * through local memory, with an online softmax in the forward pass (a
 * running row maximum and sum, the accumulator rescaled as the maximum
 * grows) and the probabilities recomputed from q, k and lse in the
 * backward pass. The forward pass saves only lse; the backward pass takes
 * two kernels, one per tile of queries (dQ, and D into `dsum`, B x heads x
 * T) and one per tile of keys (dK, dV, reading dsum): each output element
 * is written by one work-item, so results are deterministic.
 *
 * Every tile in local memory holds at most DLRT__ATTN_TILE floats: rows x D
 * (queries, keys, values, dO and the accumulators) or rows x rows (scores),
 * rows = DLRT__ATTN_ROWS(D) (kernel_table.h), which the launch passes.
 * Dropout on the probabilities (dlrt_attention_dropout; threshold > 0):
 * p_ij is replaced by p_ij z_ij with z_ij = keep_scale = 1 / (1 - prob) when
 * dlrt__attn_hash(seed, b heads + h, i, j) >= threshold (prob 2^32), else
 * 0; the row sums and lse stay those of the undropped p. The mask is never
 * stored: the backward kernels hash the same (seed, bh, i, j) again, and
 *   o_i = sum_j p_ij z_ij v_j,  dv_j = sum_i p_ij z_ij dO_i,
 *   ds_ij = p_ij (z_ij dO_i . v_j - D_i),  D_i = dO_i . o_i still.
 * With threshold 0 no hash is computed and the results are those without
 * dropout, bit for bit.
 *
 * Loads convert the storage type to fp32 and all arithmetic is fp32; o and
 * dqkv are rounded once when stored. Each score, probability and sum adds
 * its terms in the same order on every device (see dlrt__attn_mm) and exp
 * is the kernels' own (dlrt__attn_exp), so the devices differ only by
 * their log (one per row, for lse). */
#include "dialect.h"

/* The tile size the OpenCL program is built with (it does not see
 * kernel_table.h, whose DLRT__ATTN_TILE the host sizes launches with). */
#define DLRT__ATTN_TILE_FLOATS 1024
#ifndef DLRT__ATTN_TILE
#define DLRT__ATTN_TILE DLRT__ATTN_TILE_FLOATS
#elif DLRT__ATTN_TILE != DLRT__ATTN_TILE_FLOATS
#error "kernels/attention.h: DLRT__ATTN_TILE of kernel_table.h differs from DLRT__ATTN_TILE_FLOATS"
#endif
/* The most rows of a tile (the per-row statistics' arrays). */
#define DLRT__ATTN_ROWS_MAX 32

#if defined(__OPENCL_VERSION__)
#define DLRT__ATTN_LOCAL __local
#else
#define DLRT__ATTN_LOCAL
#endif

/* A phase's work of n elements shared by the group. GPUs: work-item lid
 * takes every DLRT_WG-th element. The CPU runs a phase as a loop over the
 * work-items: there work-item 0 takes them all, in order, which lets the
 * loops below be vector loops. DLRT__ATTN_SHARE_2D: the same over the
 * elements e = i * cols + k of a rows x cols tile, with i and k (on the
 * CPU without a division per element). */
#if defined(__OPENCL_VERSION__) || defined(__CUDACC__)
#define DLRT__ATTN_GPU 1
#define DLRT__ATTN_SHARE(e, lid, n) for (int e = (lid); e < (n); e += DLRT_WG)
#define DLRT__ATTN_SHARE_2D(e, i, k, lid, rows, cols)                                          \
  for (int e = (lid), i = 0, k = 0;                                                            \
       e < (rows) * (cols) && (i = e / (cols), k = e - i * (cols), 1); e += DLRT_WG)
#else
#define DLRT__ATTN_GPU 0
#define DLRT__ATTN_SHARE(e, lid, n) for (int e = (lid) ? (n) : 0; e < (n); e++)
#define DLRT__ATTN_SHARE_2D(e, i, k, lid, rows, cols)                                          \
  for (int i = (lid) ? (rows) : 0; i < (rows); i++)                                            \
    for (int k = 0, e = i * (cols); k < (cols); k++, e++)
#endif

/* e^x from arithmetic alone, Cephes' expf: x = n ln 2 + r with n an integer
 * and |r| <= ln 2 / 2 (ln 2 in two parts), e^r by a polynomial, 2^n put
 * into the exponent bits. Unlike libm's expf it vectorizes on the CPU
 * (where expf calls took a third of the kernels' time), and it rounds
 * alike on every device. Within 2 ulp of e^x for x in [-87.3, 88]
 * (test-attention checks it), 0 below (e^x < 2^-126 there: no subnormals)
 * and for -inf, NaN for NaN; the kernels' x are at most a few ulp above 0. */
DLRT_INLINE float dlrt__attn_exp(float x) {
  float xc = x < -87.3f ? -87.3f : x > 88.0f ? 88.0f : x;
  /* n = x log2(e) rounded to an integer: adding 1.5 x 2^23 rounds it so. */
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r +
               4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f) * (r * r) +
            r + 1.0f;
  float two_n = DLRT_AS_FLOAT((unsigned int)((int)n + 127) << 23);
  return x < -87.3f ? 0.0f : p * two_n;
}

#if !DLRT__ATTN_GPU
/* dlrt__attn_mm's rows [i0, i1) and columns [j0, j1) a row at a time (the
 * CPU's edges of its register blocks), in the same order per element. */
static inline void dlrt__attn_mm_rows(float *out, int ldo, const float *a, int a_row, int a_col,
                                      const float *b, int ldb, int i0, int i1, int j0, int j1,
                                      int depth, int mode, const float *scale) {
  for (int i = i0; i < i1; i++) {
    float *o = out + i * ldo;
    if (mode == 0)
      for (int j = j0; j < j1; j++) o[j] = 0.0f;
    else if (mode == 2)
      for (int j = j0; j < j1; j++) o[j] *= scale[i];
    for (int k = 0; k < depth; k++) {
      float aik = a[i * a_row + k * a_col];
      const float *bk = b + k * ldb;
      for (int j = j0; j < j1; j++) o[j] += aik * bk[j];
    }
  }
}
#endif

/* out (rows x cols, row stride ldo) = start + A B, A rows x depth with
 * element (i, k) at a[i * a_row + k * a_col] (a_row = 1, a_col = ld: A is
 * stored transposed), B depth x cols at b[k * ldb + j]. start is 0
 * (mode 0), out (mode 1) or out * scale[i] (mode 2). Each element adds its
 * depth terms in order k = 0, 1, ... onto its start: a GPU's work-item
 * computes one element so, the CPU a row at a time as vector loops over
 * j, with the same rounding. Called inside a phase by every work-item. */
DLRT_INLINE void dlrt__attn_mm(DLRT__ATTN_LOCAL float *out, int ldo,
                               DLRT__ATTN_LOCAL const float *a, int a_row, int a_col,
                               DLRT__ATTN_LOCAL const float *b, int ldb, int rows, int cols,
                               int depth, int mode, DLRT__ATTN_LOCAL const float *scale,
                               int lid) {
#if DLRT__ATTN_GPU
  for (int e = lid; e < rows * cols; e += DLRT_WG) {
    int i = e / cols, j = e - i * cols;
    float acc = mode == 0 ? 0.0f : mode == 1 ? out[i * ldo + j] : out[i * ldo + j] * scale[i];
    for (int k = 0; k < depth; k++) acc += a[i * a_row + k * a_col] * b[k * ldb + j];
    out[i * ldo + j] = acc;
  }
#else
  /* Blocks of 4 rows x 8 columns summed in registers over the whole depth
   * (GCC's vectors of 4 floats, whose arithmetic rounds as the scalar's;
   * a vector of b serves 4 rows), the edges a row at a time. */
  typedef float v4 __attribute__((vector_size(16)));
  if (lid != 0) return;
  int i = 0;
  for (; i + 4 <= rows; i += 4) {
    int j = 0;
    for (; j + 8 <= cols; j += 8) {
      v4 c[4][2];
      for (int u = 0; u < 4; u++) /* out * 1 is out, bit for bit */
        for (int h = 0; h < 2; h++) {
          if (mode == 0) {
            c[u][h] = (v4){0.0f, 0.0f, 0.0f, 0.0f};
          } else {
            memcpy(&c[u][h], out + (i + u) * ldo + j + 4 * h, sizeof c[u][h]);
            c[u][h] *= mode == 2 ? scale[i + u] : 1.0f;
          }
        }
      for (int k = 0; k < depth; k++) {
        v4 b0, b1;
        memcpy(&b0, b + k * ldb + j, sizeof b0);
        memcpy(&b1, b + k * ldb + j + 4, sizeof b1);
        for (int u = 0; u < 4; u++) {
          float aik = a[(i + u) * a_row + k * a_col];
          c[u][0] += aik * b0;
          c[u][1] += aik * b1;
        }
      }
      for (int u = 0; u < 4; u++)
        for (int h = 0; h < 2; h++)
          memcpy(out + (i + u) * ldo + j + 4 * h, &c[u][h], sizeof c[u][h]);
    }
    if (j < cols) dlrt__attn_mm_rows(out, ldo, a, a_row, a_col, b, ldb, i, i + 4, j, cols,
                                     depth, mode, scale);
  }
  if (i < rows)
    dlrt__attn_mm_rows(out, ldo, a, a_row, a_col, b, ldb, i, rows, 0, cols, depth, mode, scale);
#endif
}

/* The online softmax over one tile of scores s (bq x bk, row stride ld):
 * key j of row i counts when j <= i + diag (diag = the tile's first query
 * minus its first key when causal; T otherwise). The row maximum m grows
 * to cover the tile, the row sum l is rescaled by alpha = exp(m_old - m)
 * (kept for the accumulator) and gains the tile's exp(s - m), which replace
 * s (0 for masked keys). The tile's sum adds four interleaved partial sums
 * ((s0 + s1) + (s2 + s3)): an order every device follows, and a vector on
 * the CPU. Tiles start on multiples of one row count, so a causal row
 * always has key 0 of its tile or an earlier one: m is finite after the
 * first tile. */
DLRT_INLINE void dlrt__attn_softmax_tile(DLRT__ATTN_LOCAL float *s, int ld,
                                         DLRT__ATTN_LOCAL float *m, DLRT__ATTN_LOCAL float *l,
                                         DLRT__ATTN_LOCAL float *alpha, int bq, int bk,
                                         DLRT_INDEX diag, int lid) {
  DLRT__ATTN_SHARE(i, lid, bq) {
    DLRT__ATTN_LOCAL float *row = s + i * ld;
    int keys = i + diag + 1 < bk ? (int)(i + diag + 1) : bk;
    float mx = m[i], s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (int j = 0; j < keys; j++) mx = row[j] > mx ? row[j] : mx; /* fmax's; inlines */
    for (int j = 0; j < bk; j++) row[j] = j < keys ? dlrt__attn_exp(row[j] - mx) : 0.0f;
    int j = 0;
    for (; j + 4 <= keys; j += 4)
      s0 += row[j], s1 += row[j + 1], s2 += row[j + 2], s3 += row[j + 3];
    for (; j < keys; j++) s0 += row[j];
    alpha[i] = dlrt__attn_exp(m[i] - mx); /* 0 on the first tile (m = -inf) */
    l[i] = l[i] * alpha[i] + ((s0 + s1) + (s2 + s3));
    m[i] = mx;
  }
}

/* murmur3's 32-bit finaliser. */
DLRT_INLINE unsigned int dlrt__attn_mix(unsigned int h) {
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return h;
}

/* The dropout hash of probability (query i, key j) of head bh = b heads + h:
 * counter-based, a function of these and the seed alone (the executor
 * folds the step and the op into the seed, 63 bits), so the forward and the
 * backward kernels of every device draw the same mask without storing it. */
DLRT_INLINE unsigned int dlrt__attn_hash(DLRT_INDEX seed, DLRT_INDEX bh, DLRT_INDEX i,
                                         DLRT_INDEX j) {
  unsigned int h = dlrt__attn_mix((unsigned int)seed ^ (unsigned int)(seed >> 32) * 0x9e3779b9u ^
                                  (unsigned int)bh * 0x85ebca6bu);
  h = dlrt__attn_mix(h ^ (unsigned int)i * 0xc2b2ae35u);
  return dlrt__attn_mix(h ^ (unsigned int)j * 0x27d4eb2fu);
}

/* Dropout's factor z of (i, j): keep_scale, or 0 for a dropped one. */
DLRT_INLINE float dlrt__attn_keep(DLRT_INDEX seed, DLRT_INDEX threshold, float keep_scale,
                                  DLRT_INDEX bh, DLRT_INDEX i, DLRT_INDEX j) {
  return (DLRT_INDEX)dlrt__attn_hash(seed, bh, i, j) >= threshold ? keep_scale : 0.0f;
}

/* The forward pass's dropout on a tile of exp(s - m) (bq x bk, row stride
 * ld; its first query q0 and key k0 in the sequence), after
 * dlrt__attn_softmax_tile has summed them into l. */
DLRT_INLINE void dlrt__attn_drop_tile(DLRT__ATTN_LOCAL float *s, int ld, int bq, int bk,
                                      DLRT_INDEX seed, DLRT_INDEX threshold, float keep_scale,
                                      DLRT_INDEX bh, DLRT_INDEX q0, DLRT_INDEX k0, int lid) {
  DLRT__ATTN_SHARE_2D(e, i, j, lid, bq, bk) {
    s[i * ld + j] *= dlrt__attn_keep(seed, threshold, keep_scale, bh, q0 + i, k0 + j);
  }
}

/* The backward pass's tile: scores s into p = exp(s - lse_i) (0 for masked
 * keys, as dlrt__attn_softmax_tile masks), and dp = dO_i . v_j into
 * ds = p (dp - D_i). With dropout (threshold > 0; the tile's first query
 * q0 and key k0 in the sequence) s becomes p z and ds = p (z dp - D_i).
 * GPUs: an element per work-item; the CPU a row at a time (a vector loop). */
DLRT_INLINE void dlrt__attn_grad_tile(DLRT__ATTN_LOCAL float *s, DLRT__ATTN_LOCAL float *dp,
                                      int ld, DLRT__ATTN_LOCAL const float *lse,
                                      DLRT__ATTN_LOCAL const float *dsum, int bq, int bk,
                                      DLRT_INDEX diag, DLRT_INDEX seed, DLRT_INDEX threshold,
                                      float keep_scale, DLRT_INDEX bh, DLRT_INDEX q0,
                                      DLRT_INDEX k0, int lid) {
#if DLRT__ATTN_GPU
  for (int e = lid; e < bq * bk; e += DLRT_WG) {
    int i = e / bk, j = e - i * bk;
    float p = j <= i + diag ? dlrt__attn_exp(s[i * ld + j] - lse[i]) : 0.0f;
    if (threshold) {
      float z = dlrt__attn_keep(seed, threshold, keep_scale, bh, q0 + i, k0 + j);
      s[i * ld + j] = p * z;
      dp[i * ld + j] = p * (dp[i * ld + j] * z - dsum[i]);
    } else {
      s[i * ld + j] = p;
      dp[i * ld + j] = p * (dp[i * ld + j] - dsum[i]);
    }
  }
#else
  if (lid != 0) return;
  for (int i = 0; i < bq; i++) {
    float *si = s + i * ld, *dpi = dp + i * ld, lse_i = lse[i], dsum_i = dsum[i];
    int keys = i + diag + 1 < bk ? (int)(i + diag + 1) : bk;
    if (threshold) {
      for (int j = 0; j < bk; j++) {
        float p = j < keys ? dlrt__attn_exp(si[j] - lse_i) : 0.0f;
        float z = dlrt__attn_keep(seed, threshold, keep_scale, bh, q0 + i, k0 + j);
        si[j] = p * z;
        dpi[j] = p * (dpi[j] * z - dsum_i);
      }
      continue;
    }
    for (int j = 0; j < bk; j++) {
      float p = j < keys ? dlrt__attn_exp(si[j] - lse_i) : 0.0f;
      si[j] = p;
      dpi[j] = p * (dpi[j] - dsum_i);
    }
  }
#endif
}

/* Tile geometry shared by the three kernels: group `grp` of batch x heads x
 * tiles is tile `first / rows` of head h of sequence b; `base` is element
 * (b, 0, h D) of qkv and `obase` of o (row t at base + 3 C t, obase + C t). */
#define DLRT__ATTN_GEOMETRY(grp)                                                               \
  DLRT_INDEX bh = (grp) / tiles, b = bh / heads, h = bh - b * heads;                           \
  DLRT_INDEX first = ((grp) - bh * tiles) * rows;                                              \
  int n_first = seq - first < rows ? (int)(seq - first) : r;                                   \
  DLRT_INDEX base = b * seq * 3 * c + h * head_dim, obase = b * seq * c + h * head_dim

/* Loads n rows of one third of qkv (part 0 queries, 1 keys, 2 values) from
 * row t0, times `mul`, into local tiles: x row-major (x[j D + k]) when
 * row_major, xt transposed (xt[k rows + j]) when transposed. Inside a
 * phase of the kernels below (it reads their lid, d, r, c, base, qkv). */
#define DLRT__ATTN_LOAD(LD, x, row_major, xt, transposed, part, t0, n, mul)                    \
  DLRT__ATTN_SHARE_2D(e, j, k, lid, (n), d) {                                                  \
    float v = LD(qkv, base + ((t0) + j) * 3 * c + (part) * c + k) * (mul);                     \
    if (row_major) x[e] = v;                                                                   \
    if (transposed) xt[k * r + j] = v;                                                         \
  }

/* DLRT__ATTN_KERNELS(SUFFIX, T, LD, ST): the kernels for storage type T.
 * Arguments after the arrays: batch, seq (T), heads, head_dim (D), rows
 * (DLRT__ATTN_ROWS(D)), causal (0 or 1), scale (1 / sqrt(D)), and
 * dropout's seed, threshold (0: none) and keep_scale (see the top). */
#define DLRT__ATTN_KERNELS(SUF, T, LD, ST)                                                     \
/* o and lse from qkv; one work-group per tile of queries. */                                  \
DLRT_KERNEL(dlrt_k_attention_##SUF)(DLRT_RANGE DLRT_PTR(T, o), DLRT_PTR(float, lse),           \
                                    DLRT_CPTR(T, qkv), DLRT_INDEX batch, DLRT_INDEX seq,       \
                                    DLRT_INDEX heads, DLRT_INDEX head_dim, DLRT_INDEX rows,    \
                                    DLRT_INDEX causal, float scale, DLRT_INDEX seed,           \
                                    DLRT_INDEX threshold, float keep_scale) {                  \
  DLRT_BIND(T, o);                                                                             \
  DLRT_BIND(float, lse);                                                                       \
  DLRT_CBIND(T, qkv);                                                                          \
  DLRT_LOCAL(float, q_t, DLRT__ATTN_TILE);   /* queries times scale, rows x D */               \
  DLRT_LOCAL(float, kt_t, DLRT__ATTN_TILE);  /* keys, D x rows */                              \
  DLRT_LOCAL(float, v_t, DLRT__ATTN_TILE);   /* values, rows x D */                            \
  DLRT_LOCAL(float, acc_t, DLRT__ATTN_TILE); /* sum of p v, rows x D */                        \
  DLRT_LOCAL(float, s_t, DLRT__ATTN_TILE);   /* scores, then p, rows x rows */                 \
  DLRT_LOCAL(float, m_t, DLRT__ATTN_ROWS_MAX);                                                 \
  DLRT_LOCAL(float, l_t, DLRT__ATTN_ROWS_MAX);                                                 \
  DLRT_LOCAL(float, alpha_t, DLRT__ATTN_ROWS_MAX);                                             \
  int d = (int)head_dim, r = (int)rows;                                                        \
  DLRT_INDEX c = heads * head_dim, tiles = (seq + rows - 1) / rows;                            \
  DLRT_FOR_EACH_GROUP(grp, batch * heads * tiles) {                                            \
    DLRT__ATTN_GEOMETRY(grp);                                                                  \
    int bq = n_first;                                                                          \
    DLRT_INDEX key_end = causal ? first + bq : seq;                                            \
    DLRT_PHASE(lid) {                                                                          \
      DLRT__ATTN_LOAD(LD, q_t, 1, q_t, 0, 0, first, bq, scale);                                \
      DLRT__ATTN_SHARE(e, lid, bq * d) acc_t[e] = 0.0f;                                        \
      DLRT__ATTN_SHARE(i, lid, bq) {                                                           \
        m_t[i] = DLRT_MINUS_INF;                                                               \
        l_t[i] = 0.0f;                                                                         \
      }                                                                                        \
    }                                                                                          \
    DLRT_BARRIER();                                                                            \
    for (DLRT_INDEX k0 = 0; k0 < key_end; k0 += rows) {                                        \
      int bk = key_end - k0 < rows ? (int)(key_end - k0) : r;                                  \
      DLRT_PHASE(lid) {                                                                        \
        DLRT__ATTN_LOAD(LD, kt_t, 0, kt_t, 1, 1, k0, bk, 1.0f);                                \
        DLRT__ATTN_LOAD(LD, v_t, 1, v_t, 0, 2, k0, bk, 1.0f);                                  \
      }                                                                                        \
      DLRT_BARRIER();                                                                          \
      DLRT_PHASE(lid) { dlrt__attn_mm(s_t, r, q_t, d, 1, kt_t, r, bq, bk, d, 0, m_t, lid); }   \
      DLRT_BARRIER();                                                                          \
      DLRT_PHASE(lid) {                                                                        \
        dlrt__attn_softmax_tile(s_t, r, m_t, l_t, alpha_t, bq, bk, causal ? first - k0 : seq,  \
                                lid);                                                          \
      }                                                                                        \
      DLRT_BARRIER();                                                                          \
      if (threshold) {                                                                         \
        DLRT_PHASE(lid) {                                                                      \
          dlrt__attn_drop_tile(s_t, r, bq, bk, seed, threshold, keep_scale, bh, first, k0,     \
                               lid);                                                           \
        }                                                                                      \
        DLRT_BARRIER();                                                                        \
      }                                                                                        \
      DLRT_PHASE(lid) {                                                                        \
        dlrt__attn_mm(acc_t, d, s_t, r, 1, v_t, d, bq, d, bk, 2, alpha_t, lid);                \
      }                                                                                        \
      DLRT_BARRIER();                                                                          \
    }                                                                                          \
    DLRT_PHASE(lid) {                                                                          \
      DLRT__ATTN_SHARE_2D(e, i, k, lid, bq, d) {                                               \
        ST(o, obase + (first + i) * c + k, acc_t[e] / l_t[i]);                                 \
      }                                                                                        \
      DLRT__ATTN_SHARE(i, lid, bq) lse[bh * seq + first + i] = m_t[i] + DLRT_LOG(l_t[i]);      \
    }                                                                                          \
    DLRT_BARRIER();                                                                            \
  }                                                                                            \
}                                                                                              \
/* dq into dqkv's query columns, and dsum = D (B x heads x T) for                              \
 * attention_grad_kv; one work-group per tile of queries. */                                   \
DLRT_KERNEL(dlrt_k_attention_grad_q_##SUF)(DLRT_RANGE DLRT_PTR(T, dqkv),                       \
                                           DLRT_PTR(float, dsum), DLRT_CPTR(T, dout),          \
                                           DLRT_CPTR(T, qkv), DLRT_CPTR(T, o),                 \
                                           DLRT_CPTR(float, lse), DLRT_INDEX batch,            \
                                           DLRT_INDEX seq, DLRT_INDEX heads,                   \
                                           DLRT_INDEX head_dim, DLRT_INDEX rows,               \
                                           DLRT_INDEX causal, float scale, DLRT_INDEX seed,    \
                                           DLRT_INDEX threshold, float keep_scale) {           \
  DLRT_BIND(T, dqkv);                                                                          \
  DLRT_BIND(float, dsum);                                                                      \
  DLRT_CBIND(T, dout);                                                                         \
  DLRT_CBIND(T, qkv);                                                                          \
  DLRT_CBIND(T, o);                                                                            \
  DLRT_CBIND(float, lse);                                                                      \
  DLRT_LOCAL(float, q_t, DLRT__ATTN_TILE);   /* queries times scale, rows x D */               \
  DLRT_LOCAL(float, do_t, DLRT__ATTN_TILE);  /* dO, rows x D */                                \
  DLRT_LOCAL(float, dq_t, DLRT__ATTN_TILE);  /* sum of ds k, rows x D */                       \
  DLRT_LOCAL(float, k_t, DLRT__ATTN_TILE);   /* keys, rows x D */                              \
  DLRT_LOCAL(float, kt_t, DLRT__ATTN_TILE);  /* keys, D x rows */                              \
  DLRT_LOCAL(float, vt_t, DLRT__ATTN_TILE);  /* values, D x rows */                            \
  DLRT_LOCAL(float, s_t, DLRT__ATTN_TILE);   /* scores, then p, rows x rows */                 \
  DLRT_LOCAL(float, dp_t, DLRT__ATTN_TILE);  /* dO v, then ds, rows x rows */                  \
  DLRT_LOCAL(float, lse_t, DLRT__ATTN_ROWS_MAX);                                               \
  DLRT_LOCAL(float, dsum_t, DLRT__ATTN_ROWS_MAX);                                              \
  int d = (int)head_dim, r = (int)rows;                                                        \
  DLRT_INDEX c = heads * head_dim, tiles = (seq + rows - 1) / rows;                            \
  DLRT_FOR_EACH_GROUP(grp, batch * heads * tiles) {                                            \
    DLRT__ATTN_GEOMETRY(grp);                                                                  \
    int bq = n_first;                                                                          \
    DLRT_INDEX key_end = causal ? first + bq : seq;                                            \
    DLRT_PHASE(lid) {                                                                          \
      DLRT__ATTN_LOAD(LD, q_t, 1, q_t, 0, 0, first, bq, scale);                                \
      DLRT__ATTN_SHARE_2D(e, i, k, lid, bq, d) {                                               \
        do_t[e] = LD(dout, obase + (first + i) * c + k);                                       \
        dq_t[e] = 0.0f;                                                                        \
      }                                                                                        \
      DLRT__ATTN_SHARE(i, lid, bq) lse_t[i] = lse[bh * seq + first + i];                       \
    }                                                                                          \
    DLRT_BARRIER();                                                                            \
    DLRT_PHASE(lid) {                                                                          \
      DLRT__ATTN_SHARE(i, lid, bq) {                                                           \
        float a = 0.0f;                                                                        \
        for (int k = 0; k < d; k++) a += do_t[i * d + k] * LD(o, obase + (first + i) * c + k); \
        dsum_t[i] = a;                                                                         \
        dsum[bh * seq + first + i] = a;                                                        \
      }                                                                                        \
    }                                                                                          \
    DLRT_BARRIER();                                                                            \
    for (DLRT_INDEX k0 = 0; k0 < key_end; k0 += rows) {                                        \
      int bk = key_end - k0 < rows ? (int)(key_end - k0) : r;                                  \
      DLRT_PHASE(lid) {                                                                        \
        DLRT__ATTN_LOAD(LD, k_t, 1, kt_t, 1, 1, k0, bk, 1.0f);                                 \
        DLRT__ATTN_LOAD(LD, vt_t, 0, vt_t, 1, 2, k0, bk, 1.0f);                                \
      }                                                                                        \
      DLRT_BARRIER();                                                                          \
      DLRT_PHASE(lid) {                                                                        \
        dlrt__attn_mm(s_t, r, q_t, d, 1, kt_t, r, bq, bk, d, 0, lse_t, lid);                   \
        dlrt__attn_mm(dp_t, r, do_t, d, 1, vt_t, r, bq, bk, d, 0, lse_t, lid);                 \
      }                                                                                        \
      DLRT_BARRIER();                                                                          \
      DLRT_PHASE(lid) {                                                                        \
        dlrt__attn_grad_tile(s_t, dp_t, r, lse_t, dsum_t, bq, bk, causal ? first - k0 : seq,   \
                             seed, threshold, keep_scale, bh, first, k0, lid);                 \
      }                                                                                        \
      DLRT_BARRIER();                                                                          \
      DLRT_PHASE(lid) { dlrt__attn_mm(dq_t, d, dp_t, r, 1, k_t, d, bq, d, bk, 1, lse_t, lid); } \
      DLRT_BARRIER();                                                                          \
    }                                                                                          \
    DLRT_PHASE(lid) {                                                                          \
      DLRT__ATTN_SHARE_2D(e, i, k, lid, bq, d) {                                               \
        ST(dqkv, base + (first + i) * 3 * c + k, dq_t[e] * scale);                             \
      }                                                                                        \
    }                                                                                          \
    DLRT_BARRIER();                                                                            \
  }                                                                                            \
}                                                                                              \
/* dk and dv into dqkv's key and value columns, from dsum (attention_grad_q                    \
 * wrote it first); one work-group per tile of keys. */                                        \
DLRT_KERNEL(dlrt_k_attention_grad_kv_##SUF)(DLRT_RANGE DLRT_PTR(T, dqkv), DLRT_CPTR(T, dout),  \
                                            DLRT_CPTR(T, qkv), DLRT_CPTR(float, lse),          \
                                            DLRT_CPTR(float, dsum), DLRT_INDEX batch,          \
                                            DLRT_INDEX seq, DLRT_INDEX heads,                  \
                                            DLRT_INDEX head_dim, DLRT_INDEX rows,              \
                                            DLRT_INDEX causal, float scale, DLRT_INDEX seed,   \
                                            DLRT_INDEX threshold, float keep_scale) {          \
  DLRT_BIND(T, dqkv);                                                                          \
  DLRT_CBIND(T, dout);                                                                         \
  DLRT_CBIND(T, qkv);                                                                          \
  DLRT_CBIND(float, lse);                                                                      \
  DLRT_CBIND(float, dsum);                                                                     \
  DLRT_LOCAL(float, kt_t, DLRT__ATTN_TILE);  /* keys, D x rows */                              \
  DLRT_LOCAL(float, vt_t, DLRT__ATTN_TILE);  /* values, D x rows */                            \
  DLRT_LOCAL(float, q_t, DLRT__ATTN_TILE);   /* queries times scale, rows x D */               \
  DLRT_LOCAL(float, do_t, DLRT__ATTN_TILE);  /* dO, rows x D */                                \
  DLRT_LOCAL(float, dk_t, DLRT__ATTN_TILE);  /* sum of ds q scale, rows x D */                 \
  DLRT_LOCAL(float, dv_t, DLRT__ATTN_TILE);  /* sum of p dO, rows x D */                       \
  DLRT_LOCAL(float, s_t, DLRT__ATTN_TILE);   /* scores, then p, rows x rows */                 \
  DLRT_LOCAL(float, dp_t, DLRT__ATTN_TILE);  /* dO v, then ds, rows x rows */                  \
  DLRT_LOCAL(float, lse_t, DLRT__ATTN_ROWS_MAX);                                               \
  DLRT_LOCAL(float, dsum_t, DLRT__ATTN_ROWS_MAX);                                              \
  int d = (int)head_dim, r = (int)rows;                                                        \
  DLRT_INDEX c = heads * head_dim, tiles = (seq + rows - 1) / rows;                            \
  DLRT_FOR_EACH_GROUP(grp, batch * heads * tiles) {                                            \
    DLRT__ATTN_GEOMETRY(grp);                                                                  \
    int bk = n_first;                                                                          \
    DLRT_PHASE(lid) {                                                                          \
      DLRT__ATTN_LOAD(LD, kt_t, 0, kt_t, 1, 1, first, bk, 1.0f);                               \
      DLRT__ATTN_LOAD(LD, vt_t, 0, vt_t, 1, 2, first, bk, 1.0f);                               \
      DLRT__ATTN_SHARE(e, lid, bk * d) {                                                       \
        dk_t[e] = 0.0f;                                                                        \
        dv_t[e] = 0.0f;                                                                        \
      }                                                                                        \
    }                                                                                          \
    DLRT_BARRIER();                                                                            \
    /* Causal: queries from this tile's first key on (tiles are aligned). */                   \
    for (DLRT_INDEX q0 = causal ? first : 0; q0 < seq; q0 += rows) {                           \
      int bq = seq - q0 < rows ? (int)(seq - q0) : r;                                          \
      DLRT_PHASE(lid) {                                                                        \
        DLRT__ATTN_LOAD(LD, q_t, 1, q_t, 0, 0, q0, bq, scale);                                 \
        DLRT__ATTN_SHARE_2D(e, i, k, lid, bq, d) {                                             \
          do_t[e] = LD(dout, obase + (q0 + i) * c + k);                                        \
        }                                                                                      \
        DLRT__ATTN_SHARE(i, lid, bq) {                                                         \
          lse_t[i] = lse[bh * seq + q0 + i];                                                   \
          dsum_t[i] = dsum[bh * seq + q0 + i];                                                 \
        }                                                                                      \
      }                                                                                        \
      DLRT_BARRIER();                                                                          \
      DLRT_PHASE(lid) {                                                                        \
        dlrt__attn_mm(s_t, r, q_t, d, 1, kt_t, r, bq, bk, d, 0, lse_t, lid);                   \
        dlrt__attn_mm(dp_t, r, do_t, d, 1, vt_t, r, bq, bk, d, 0, lse_t, lid);                 \
      }                                                                                        \
      DLRT_BARRIER();                                                                          \
      DLRT_PHASE(lid) {                                                                        \
        dlrt__attn_grad_tile(s_t, dp_t, r, lse_t, dsum_t, bq, bk, causal ? q0 - first : seq,   \
                             seed, threshold, keep_scale, bh, q0, first, lid);                 \
      }                                                                                        \
      DLRT_BARRIER();                                                                          \
      /* dv += p^T dO, dk += ds^T (q scale): p and ds read transposed. */                      \
      DLRT_PHASE(lid) {                                                                        \
        dlrt__attn_mm(dv_t, d, s_t, 1, r, do_t, d, bk, d, bq, 1, lse_t, lid);                  \
        dlrt__attn_mm(dk_t, d, dp_t, 1, r, q_t, d, bk, d, bq, 1, lse_t, lid);                  \
      }                                                                                        \
      DLRT_BARRIER();                                                                          \
    }                                                                                          \
    DLRT_PHASE(lid) {                                                                          \
      DLRT__ATTN_SHARE_2D(e, j, k, lid, bk, d) {                                               \
        ST(dqkv, base + (first + j) * 3 * c + c + k, dk_t[e]);                                 \
        ST(dqkv, base + (first + j) * 3 * c + 2 * c + k, dv_t[e]);                             \
      }                                                                                        \
    }                                                                                          \
    DLRT_BARRIER();                                                                            \
  }                                                                                            \
}
DLRT__ATTN_KERNELS(f32, float, DLRT_LD_F32, DLRT_ST_F32)
DLRT__ATTN_KERNELS(f16, DLRT_U16, DLRT_LD_F16, DLRT_ST_F16)
DLRT__ATTN_KERNELS(bf16, DLRT_U16, DLRT_LD_BF16, DLRT_ST_BF16)

/* One new token per sequence over key / value caches (dlrt_attention_decode;
 * sampling). qkv is B x 1 x 3C as above; the caches kc, vc are B x
 * capacity x C (row t: position t's keys, resp. values, of every head, head
 * h in columns h D ..); pos (B) is each sequence's position p, read here so
 * that one launch serves every position. One work-group per head of each
 * sequence writes the token's key and value into row p of the caches and
 * attends the query over rows 0 .. p: the forward kernel's tiles of `rows`
 * keys from key 0, its online softmax and its products, with one query row,
 * so each output element sums its terms in the training kernel's order for
 * row p, bit for bit (the masked keys it adds there are zeros). The row p
 * is read from qkv, not from the cache the group is writing (no global
 * fence between them). A p outside [0, capacity) writes nothing and gives
 * zeros. Work O(p D) per head. fp32 only. */
DLRT_KERNEL(dlrt_k_attention_decode)(DLRT_RANGE DLRT_PTR(float, o), DLRT_PTR(float, kc),
                                     DLRT_PTR(float, vc), DLRT_CPTR(float, qkv),
                                     DLRT_CPTR(int, pos), DLRT_INDEX batch,
                                     DLRT_INDEX capacity, DLRT_INDEX heads,
                                     DLRT_INDEX head_dim, DLRT_INDEX rows, float scale) {
  DLRT_BIND(float, o);
  DLRT_BIND(float, kc);
  DLRT_BIND(float, vc);
  DLRT_CBIND(float, qkv);
  DLRT_CBIND(int, pos);
  DLRT_LOCAL(float, q_t, DLRT__ATTN_TILE);   /* the query times scale, 1 x D */
  DLRT_LOCAL(float, kt_t, DLRT__ATTN_TILE);  /* keys, D x rows */
  DLRT_LOCAL(float, v_t, DLRT__ATTN_TILE);   /* values, rows x D */
  DLRT_LOCAL(float, acc_t, DLRT__ATTN_TILE); /* sum of p v, 1 x D */
  DLRT_LOCAL(float, s_t, DLRT__ATTN_ROWS_MAX); /* scores, then p, 1 x rows */
  DLRT_LOCAL(float, m_t, 1);
  DLRT_LOCAL(float, l_t, 1);
  DLRT_LOCAL(float, alpha_t, 1);
  int d = (int)head_dim, r = (int)rows;
  DLRT_INDEX c = heads * head_dim;
  DLRT_FOR_EACH_GROUP(grp, batch * heads) {
    DLRT_INDEX b = grp / heads, h = grp - b * heads, p = pos[b];
    DLRT_INDEX keys = p >= 0 && p < capacity ? p + 1 : 0;
    /* This token's query of head h in qkv; head h's column 0 of cache row 0. */
    DLRT_INDEX qbase = b * 3 * c + h * head_dim, cbase = b * capacity * c + h * head_dim;
    DLRT_PHASE(lid) {
      DLRT__ATTN_SHARE(k, lid, d) {
        q_t[k] = qkv[qbase + k] * scale;
        acc_t[k] = 0.0f;
        if (keys) {
          kc[cbase + p * c + k] = qkv[qbase + c + k];
          vc[cbase + p * c + k] = qkv[qbase + 2 * c + k];
        }
      }
      if (lid == 0) {
        m_t[0] = DLRT_MINUS_INF;
        l_t[0] = 0.0f;
      }
    }
    DLRT_BARRIER();
    for (DLRT_INDEX k0 = 0; k0 < keys; k0 += rows) {
      int bk = keys - k0 < rows ? (int)(keys - k0) : r;
      DLRT_PHASE(lid) {
        DLRT__ATTN_SHARE_2D(e, j, k, lid, bk, d) {
          DLRT_INDEX t = k0 + j, at = cbase + t * c + k;
          kt_t[k * r + j] = t == p ? qkv[qbase + c + k] : kc[at];
          v_t[e] = t == p ? qkv[qbase + 2 * c + k] : vc[at];
        }
      }
      DLRT_BARRIER();
      DLRT_PHASE(lid) { dlrt__attn_mm(s_t, r, q_t, d, 1, kt_t, r, 1, bk, d, 0, m_t, lid); }
      DLRT_BARRIER();
      DLRT_PHASE(lid) { dlrt__attn_softmax_tile(s_t, r, m_t, l_t, alpha_t, 1, bk, bk, lid); }
      DLRT_BARRIER();
      DLRT_PHASE(lid) { dlrt__attn_mm(acc_t, d, s_t, r, 1, v_t, d, 1, d, bk, 2, alpha_t, lid); }
      DLRT_BARRIER();
    }
    DLRT_PHASE(lid) {
      DLRT__ATTN_SHARE(k, lid, d) o[b * c + h * head_dim + k] = keys ? acc_t[k] / l_t[0] : 0.0f;
    }
    DLRT_BARRIER();
  }
}
