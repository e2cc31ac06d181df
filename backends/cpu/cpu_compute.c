/* cpu_compute.c — CPU GEMM through OpenBLAS (kernels of kernels/ run from
 * cpu_kernels.c). */
#include "config.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>

#include "cpu_internal.h"
#include "cpu_pool.h"
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

int cpu_gemm(void *stream, const dlrt_gemm_desc *d, dlrt_mem a, size_t a_off, dlrt_mem b,
             size_t b_off, dlrt_mem c, size_t c_off) {
  if (d->dtype != DLRT_F32)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "dlrt_gemm: the cpu backend computes GEMM in "
                           "f32 only, not %s; convert the operands to f32", dlrt_dtype_name(d->dtype));
  const int64_t blas_max = sizeof(blasint) == 4 ? INT32_MAX : INT64_MAX;
  if (d->m > blas_max || d->n > blas_max || d->k > blas_max || d->lda > blas_max ||
      d->ldb > blas_max || d->ldc > blas_max)
    return dlrt__set_error(DLRT_ERR_UNSUPPORTED, "dlrt_gemm: a dimension exceeds the %d-bit "
                           "integers of this OpenBLAS", (int)(8 * sizeof(blasint)));
  gemm_command g = {*d, (const float *)((char *)a.host + a_off),
                    (const float *)((char *)b.host + b_off), (float *)((char *)c.host + c_off)};
  return cpu_stream_enqueue(stream, run_gemm, &g, sizeof g);
}

