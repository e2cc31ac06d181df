/* cpu_compute.c — CPU GEMM through OpenBLAS: fp32 directly, fp16 and bf16
 * in tiles widened to fp32 (kernels of kernels/ run from cpu_kernels.c). */
#include "config.h"

#include <cblas.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "cpu_pool.h"
#include "dialect.h" /* the kernels' fp16 / bf16 conversions */
#include "util/status.h"

const char *cpu_blas_version(void) {
  static char version[64];
  if (!version[0]) {
    /* "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64":
     * keep the name and version, and name the kernels it picked. */
    char name[16] = "", number[16] = "";
    sscanf(openblas_get_config(), "%15s %15s", name, number);
    snprintf(version, sizeof version, "%s %s (%s kernels)", name, number,
             openblas_get_corename());
  }
  return version;
}

/* dlrt_set_cpu_threads: the public entry lives here, beside OpenBLAS. */
int dlrt_set_cpu_threads(int threads) {
  DLRT__CHECK_ARG(threads >= 0, "dlrt_set_cpu_threads: %d threads", threads);
  cpu_set_threads(threads); /* GEMM too: see run_gemm */
  return DLRT_OK;
}

void cpu_blas_single_threaded(void) { openblas_set_num_threads(1); }

/* ---------------------------------------------------------------- GEMM */

typedef struct {
  dlrt_gemm_desc d;
  const float *a, *b;
  float *c;
} gemm_command;

/* One OpenBLAS call on a block of C: rows [lo, hi) of C (split_rows), else
 * columns [lo, hi); each element still sums its whole K in one call, so the
 * result does not depend on the split. */
static void gemm_block(const gemm_command *g, int64_t i, int split_rows, int64_t lo, int64_t hi) {
  const dlrt_gemm_desc *d = &g->d;
  const float *a = g->a + i * d->stride_a, *b = g->b + i * d->stride_b;
  float *c = g->c + i * d->stride_c;
  int64_t m = d->m, n = d->n;
  if (split_rows) {
    a += d->trans_a ? lo : lo * d->lda;
    c += lo * d->ldc;
    m = hi - lo;
  } else {
    b += d->trans_b ? lo * d->ldb : lo;
    c += lo;
    n = hi - lo;
  }
  cblas_sgemm(CblasRowMajor, d->trans_a ? CblasTrans : CblasNoTrans,
              d->trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n, (blasint)d->k,
              d->alpha, a, (blasint)d->lda, b, (blasint)d->ldb, d->beta, c, (blasint)d->ldc);
}

typedef struct {
  const gemm_command *g;
  int64_t blocks; /* per batch item */
  int64_t span;   /* rows or columns per block */
  int split_rows;
} gemm_split;

static void gemm_slice(void *ctx, int64_t s) {
  const gemm_split *p = ctx;
  int64_t i = s / p->blocks, lo = (s % p->blocks) * p->span;
  int64_t end = p->split_rows ? p->g->d.m : p->g->d.n;
  gemm_block(p->g, i, p->split_rows, lo, lo + p->span < end ? lo + p->span : end);
}

/* OpenBLAS runs single-threaded and the backend's own pool spreads blocks
 * of C over its threads: with OpenBLAS's threads as well, the two pools
 * fought for the cores (OpenBLAS's spin after each call starved the
 * kernels that follow a GEMM: cnn training went 28% faster this way). */
static int run_gemm(void *payload) {
  const gemm_command *g = payload;
  const dlrt_gemm_desc *d = &g->d;
  int threads = cpu_pool_size();
  double flops = 2.0 * (double)d->m * (double)d->n * (double)d->k;
  if (threads <= 1 || flops < 4e6) { /* below ~1 ms of one core: not worth waking a team */
    for (int64_t i = 0; i < d->batch; i++) gemm_block(g, i, 1, 0, d->m);
    return DLRT_OK;
  }
  /* Split the longer side of C into a block per thread, in multiples of 16
   * (whole micro-tiles for OpenBLAS's kernels). */
  gemm_split p = {.g = g, .split_rows = d->m >= d->n};
  int64_t side = p.split_rows ? d->m : d->n;
  p.span = (side + threads - 1) / threads;
  p.span = (p.span + 15) / 16 * 16;
  p.blocks = (side + p.span - 1) / p.span;
  cpu_pool_run(d->batch * p.blocks, gemm_slice, &p);
  return DLRT_OK;
}

/* ------------------------------------------------- fp16 / bf16 GEMM */

/* C = alpha * op(A) op(B) + beta * C with A, B, C in fp16 or bf16 and fp32
 * accumulation, without full-size fp32 copies: C is cut into tiles, and for
 * each tile K runs in chunks of HALF_KC; the chunk's panels of A and B are
 * widened into fp32 scratch (per thread, at most 768 KiB), one sgemm adds
 * their product into an fp32 accumulator tile, and the tile is narrowed once
 * (round to nearest even) after alpha and beta are applied in fp32, or
 * stored as it is into an fp32 C (c_f32).
 * Tiles and chunks depend on the shape only, and every tile is one sequence
 * of sgemm calls on one thread, so the result is the same bits for any
 * thread count. */
#define HALF_TILE 256    /* largest tile side */
#define HALF_MIN_TILE 64 /* smallest, when small matrices are split */
#define HALF_KC 256      /* K per chunk */
#define HALF_WANT_TILES 16

typedef struct {
  dlrt_gemm_desc d;
  const uint16_t *a, *b;
  void *c; /* 16-bit words, or floats with d.c_f32 */
} half_gemm_command;

/* Widen a row of 16-bit words into floats, narrow one back. */
typedef void (*widen_row_fn)(const uint16_t *restrict, float *restrict, int64_t);
typedef void (*narrow_row_fn)(const float *restrict, uint16_t *restrict, int64_t);

typedef struct {
  const half_gemm_command *g;
  int64_t tm, tn, kc;         /* tile rows, columns, K chunk (clamped to the shape) */
  int64_t tiles_m, tiles_n, tiles;
  size_t per_thread;          /* floats of scratch per slice */
  widen_row_fn widen;
  narrow_row_fn narrow;
  float *scratch;
  atomic_llong next;          /* the next tile to take */
} half_split;

static inline float bf16_to_f32(uint16_t h) { return dlrt_as_float((uint32_t)h << 16); }

/* Converts `cols` values of a row (widening words into floats, or
 * narrowing back): blocks of 16 with a fixed trip count, which the
 * compiler vectorizes at -O2, then the rest one by one. */
#define CONVERT_ROW(name, S, D, convert)                                         \
  static void name(const S *restrict src, D *restrict dst, int64_t cols) {       \
    int64_t j = 0;                                                               \
    for (; j + 16 <= cols; j += 16)                                              \
      for (int q = 0; q < 16; q++) dst[j + q] = convert(src[j + q]);             \
    for (; j < cols; j++) dst[j] = convert(src[j]);                              \
  }
CONVERT_ROW(widen_row_f16, uint16_t, float, dlrt_half_to_float)
CONVERT_ROW(widen_row_bf16, uint16_t, float, bf16_to_f32)

/* binary32 -> bfloat16: dlrt_float_to_bf16 of dialect.h with masks (the
 * same bits for all 2^32 inputs). */
static inline uint16_t f32_to_bf16(float f) {
  uint32_t u = dlrt_as_uint(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x40u;
  uint32_t is_nan = 0u - (uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
  return (uint16_t)((quiet & is_nan) | (rounded & ~is_nan));
}

CONVERT_ROW(narrow_row_f16, float, uint16_t, dlrt_float_to_half)
CONVERT_ROW(narrow_row_bf16, float, uint16_t, f32_to_bf16)

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
/* x86 F16C, 8 words an instruction (4x the loop above). The same floats
 * as dlrt_half_to_float except that a signaling NaN comes out quiet (same payload),
 * as any fp32 arithmetic makes it: the GEMM's results are the same bits. */
__attribute__((target("avx,f16c"))) static void widen_row_f16c(const uint16_t *restrict src,
                                                               float *restrict dst,
                                                               int64_t cols) {
  int64_t j = 0;
  for (; j + 8 <= cols; j += 8)
    _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + j))));
  for (; j < cols; j++) dst[j] = dlrt_half_to_float(src[j]);
}

/* Rounds to nearest even as dlrt_float_to_half does, NaN and overflow
 * included (the same bits for all 2^32 inputs). */
__attribute__((target("avx,f16c"))) static void narrow_row_f16c(const float *restrict src,
                                                                uint16_t *restrict dst,
                                                                int64_t cols) {
  int64_t j = 0;
  for (; j + 8 <= cols; j += 8)
    _mm_storeu_si128((__m128i *)(dst + j),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + j),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; j < cols; j++) dst[j] = dlrt_float_to_half(src[j]);
}

static int have_f16c(void) {
  return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
}
#else
static int have_f16c(void) { return 0; }
#define widen_row_f16c widen_row_f16
#define narrow_row_f16c narrow_row_f16
#endif

/* Widens rows x cols of a matrix of 16-bit words (leading dimension ld)
 * into dst, packed (leading dimension cols). */
static void widen_block(widen_row_fn row, const uint16_t *src, int64_t ld, int64_t rows,
                        int64_t cols, float *dst) {
  for (int64_t r = 0; r < rows; r++) row(src + r * ld, dst + r * cols, cols);
}

static void half_tile(const half_split *p, int64_t t, float *ap, float *bp, float *acc) {
  const dlrt_gemm_desc *d = &p->g->d;
  int64_t per_batch = p->tiles_m * p->tiles_n, bi = t / per_batch;
  int64_t i0 = (t % per_batch) / p->tiles_n * p->tm, j0 = (t % per_batch) % p->tiles_n * p->tn;
  int64_t mm = d->m - i0 < p->tm ? d->m - i0 : p->tm;
  int64_t nn = d->n - j0 < p->tn ? d->n - j0 : p->tn;
  const uint16_t *a = p->g->a + bi * d->stride_a, *b = p->g->b + bi * d->stride_b;
  int64_t c_at = bi * d->stride_c + i0 * d->ldc + j0;
  /* alpha == 0 or k == 0: A and B are not read (as in BLAS). */
  int product = d->k > 0 && d->alpha != 0.0f;
  for (int64_t p0 = 0; product && p0 < d->k; p0 += p->kc) {
    int64_t kk = d->k - p0 < p->kc ? d->k - p0 : p->kc;
    /* Each panel keeps its operand's layout: rows are read contiguously. */
    if (d->trans_a) widen_block(p->widen, a + p0 * d->lda + i0, d->lda, kk, mm, ap);
    else widen_block(p->widen, a + i0 * d->lda + p0, d->lda, mm, kk, ap);
    if (d->trans_b) widen_block(p->widen, b + j0 * d->ldb + p0, d->ldb, nn, kk, bp);
    else widen_block(p->widen, b + p0 * d->ldb + j0, d->ldb, kk, nn, bp);
    cblas_sgemm(CblasRowMajor, d->trans_a ? CblasTrans : CblasNoTrans,
                d->trans_b ? CblasTrans : CblasNoTrans, (blasint)mm, (blasint)nn, (blasint)kk,
                1.0f, ap, (blasint)(d->trans_a ? mm : kk), bp, (blasint)(d->trans_b ? kk : nn),
                p0 ? 1.0f : 0.0f, acc, (blasint)nn);
  }
  /* C = alpha * acc + beta * C in fp32, narrowed once (or stored in an fp32
   * C), a row at a time (the B panel holds a row of C widened); beta == 0
   * leaves C unread. */
  const float alpha = d->alpha, beta = d->beta;
  for (int64_t r = 0; r < mm; r++) {
    uint16_t *row = d->c_f32 ? NULL : (uint16_t *)p->g->c + c_at + r * d->ldc;
    float *wide = d->c_f32 ? (float *)p->g->c + c_at + r * d->ldc : NULL;
    float *v = acc + r * nn;
    if (product)
      for (int64_t j = 0; j < nn; j++) v[j] = alpha * v[j];
    else
      for (int64_t j = 0; j < nn; j++) v[j] = 0.0f;
    if (beta != 0.0f) {
      const float *old = wide ? wide : bp;
      if (!wide) p->widen(row, bp, nn);
      for (int64_t j = 0; j < nn; j++) v[j] += beta * old[j];
    }
    if (wide) memcpy(wide, v, (size_t)nn * sizeof *v);
    else p->narrow(v, row, nn);
  }
}

/* One slice per thread, with its own scratch; tiles are taken one at a time
 * from a shared counter (which thread runs a tile never changes its bits). */
static void half_slice(void *ctx, int64_t s) {
  half_split *p = ctx;
  float *ap = p->scratch + (size_t)s * p->per_thread;
  float *bp = ap + p->tm * p->kc, *acc = bp + p->kc * p->tn;
  for (;;) {
    int64_t t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
    if (t >= p->tiles) break;
    half_tile(p, t, ap, bp, acc);
  }
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int run_half_gemm(void *payload) {
  const half_gemm_command *g = payload;
  const dlrt_gemm_desc *d = &g->d;
  /* Tiles of up to HALF_TILE square; a small C is cut finer (down to
   * HALF_MIN_TILE) until there are HALF_WANT_TILES tiles to share out. From
   * the shape alone, never from the thread count. */
  int64_t tm = HALF_TILE, tn = HALF_TILE;
  while (d->batch * ceil_div(d->m, tm) * ceil_div(d->n, tn) < HALF_WANT_TILES) {
    int split_m = tm > HALF_MIN_TILE && tm / 2 < d->m;
    int split_n = tn > HALF_MIN_TILE && tn / 2 < d->n;
    if (split_m && (tm >= tn || !split_n)) tm /= 2;
    else if (split_n) tn /= 2;
    else break;
  }
  half_split p = {.g = g, .tm = tm < d->m ? tm : d->m, .tn = tn < d->n ? tn : d->n,
                  .kc = HALF_KC < d->k ? HALF_KC : d->k};
  if (p.kc < 1) p.kc = 1;
  p.tiles_m = ceil_div(d->m, p.tm);
  p.tiles_n = ceil_div(d->n, p.tn);
  p.tiles = d->batch * p.tiles_m * p.tiles_n;
  int f16c = have_f16c();
  p.widen = d->dtype == DLRT_BF16 ? widen_row_bf16 : f16c ? widen_row_f16c : widen_row_f16;
  p.narrow = d->dtype == DLRT_BF16 ? narrow_row_bf16 : f16c ? narrow_row_f16c : narrow_row_f16;
  atomic_init(&p.next, 0);
  double flops = 2.0 * (double)d->m * (double)d->n * (double)d->k * (double)d->batch;
  int64_t slices = flops < 4e6 ? 1 : cpu_pool_size(); /* as run_gemm */
  if (slices > p.tiles) slices = p.tiles;
  if (slices < 1) slices = 1;
  /* Panels and accumulator, each slice's rounded to a 64-byte line. */
  p.per_thread = ((size_t)(p.tm * p.kc + p.kc * p.tn + p.tm * p.tn) + 15) / 16 * 16;
  size_t bytes = (size_t)slices * p.per_thread * sizeof(float);
  p.scratch = aligned_alloc(64, bytes);
  if (!p.scratch)
    return dlrt__set_error(DLRT_ERR_OOM, "dlrt_gemm: out of host memory for %zu bytes of "
                           "%s GEMM scratch", bytes, dlrt_dtype_name(d->dtype));
  if (slices == 1) half_slice(&p, 0);
  else cpu_pool_run(slices, half_slice, &p);
  free(p.scratch);
  return DLRT_OK;
}

int cpu_gemm(void *stream, const dlrt_gemm_desc *d, dlrt_mem a, size_t a_off, dlrt_mem b,
             size_t b_off, dlrt_mem c, size_t c_off) {
  if (d->dtype != DLRT_F32 && d->dtype != DLRT_F16 && d->dtype != DLRT_BF16)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "dlrt_gemm: the cpu backend computes GEMM in "
                           "f32, f16 and bf16 only, not %s", dlrt_dtype_name(d->dtype));
  const int64_t blas_max = sizeof(blasint) == 4 ? INT32_MAX : INT64_MAX;
  if (d->m > blas_max || d->n > blas_max || d->k > blas_max || d->lda > blas_max ||
      d->ldb > blas_max || d->ldc > blas_max)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "dlrt_gemm: a dimension exceeds the %d-bit "
                           "integers of this OpenBLAS", (int)(8 * sizeof(blasint)));
  if (d->dtype != DLRT_F32) {
    half_gemm_command h = {*d, (const uint16_t *)((char *)a.host + a_off),
                           (const uint16_t *)((char *)b.host + b_off), (char *)c.host + c_off};
    return cpu_stream_enqueue(stream, run_half_gemm, &h, sizeof h);
  }
  gemm_command g = {*d, (const float *)((char *)a.host + a_off),
                    (const float *)((char *)b.host + b_off), (float *)((char *)c.host + c_off)};
  return cpu_stream_enqueue(stream, run_gemm, &g, sizeof g);
}

