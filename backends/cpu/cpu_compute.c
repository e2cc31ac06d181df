/* cpu_compute.c — CPU GEMM through OpenBLAS (kernels of kernels/ run from
 * cpu_kernels.c). */
#include "config.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>

#include "cpu_internal.h"
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
  openblas_set_num_threads(threads > 0 ? threads : openblas_get_num_procs());
  cpu_set_threads(threads);
  return DLRT_OK;
}

/* ---------------------------------------------------------------- GEMM */

typedef struct {
  dlrt_gemm_desc d;
  const float *a, *b;
  float *c;
} gemm_command;

static int run_gemm(void *payload) {
  const gemm_command *g = payload;
  const dlrt_gemm_desc *d = &g->d;
  enum CBLAS_TRANSPOSE ta = d->trans_a ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE tb = d->trans_b ? CblasTrans : CblasNoTrans;
  for (int64_t i = 0; i < d->batch; i++)
    cblas_sgemm(CblasRowMajor, ta, tb, (blasint)d->m, (blasint)d->n, (blasint)d->k, d->alpha,
                g->a + i * d->stride_a, (blasint)d->lda, g->b + i * d->stride_b,
                (blasint)d->ldb, d->beta, g->c + i * d->stride_c, (blasint)d->ldc);
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

