/*
 * sgemm-vs-openblas — fp32 GEMM (C = A * B, n x n, row-major) through dlrt
 * against cblas_sgemm called directly on plain arrays: a benchmark, not a test.
 *
 *   bench/sgemm-vs-openblas [--n N] [--reps R] [--device SPEC]
 *
 * The dlrt side is what a caller sees: dlrt_gemm on a stream plus
 * dlrt_stream_synchronize, buffers from the caching allocator. OpenBLAS stays
 * the reference whatever --device says. After warm-ups the two alternate call
 * by call (dlrt, openblas, dlrt, ...) so that clock, thermal and load changes
 * hit both alike. Both sides run under the same OPENBLAS_NUM_THREADS.
 *
 * Exit status: 0 done and the results match, 1 a failure or a mismatch,
 * 2 usage error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cblas.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlrt.h"

enum { WARMUPS = 3 };
/* Largest |dlrt - openblas| allowed, relative to the largest |openblas|:
 * fp32 rounding differences sit near 1e-6; TF32 or fp16 math would not pass. */
static const double TOLERANCE = 1e-4;

typedef struct {
  double median, min, max; /* GFLOP/s */
} summary;

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts `v` in place. */
static summary summarize(double *v, int count) {
  summary s;
  qsort(v, (size_t)count, sizeof *v, compare_doubles);
  s.min = v[0];
  s.max = v[count - 1];
  s.median = count % 2 ? v[count / 2] : (v[count / 2 - 1] + v[count / 2]) / 2;
  return s;
}

static int parse_long(const char *text, long lo, long hi, long *out) {
  char *end;
  long v = strtol(text, &end, 10);
  if (end == text || *end || v < lo || v > hi)
    return 0;
  *out = v;
  return 1;
}

static void usage(FILE *out) {
  fputs("Usage: sgemm-vs-openblas [--n N] [--reps R] [--device SPEC]\n"
        "Times fp32 C = A * B (N x N) through dlrt and through OpenBLAS directly.\n\n"
        "  --n N          matrix size (default 1024)\n"
        "  --reps R       timed calls of each, interleaved (default 21)\n"
        "  --device SPEC  device for the dlrt side (default cpu; e.g. opencl:0)\n",
        out);
}

/* Reports a failed dlrt call; returns 1 for the exit status. */
static int fail(const char *what, int rc) {
  const char *detail = dlrt_last_error();
  fprintf(stderr, "sgemm-vs-openblas: %s: %s\n", what,
          detail && *detail ? detail : dlrt_strerror(rc));
  return 1;
}

static void *aligned_bytes(size_t bytes) {
  return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

/* Copies host data into a device buffer: through the host pointer where the
 * device has one, else with a copy on `stream`. */
static int upload(dlrt_buffer_t *dst, const float *src, size_t bytes,
                  dlrt_stream_t *stream) {
  void *host = dlrt_buffer_host_ptr(dst);
  if (host) {
    memcpy(host, src, bytes);
    return DLRT_OK;
  }
  int rc = dlrt_copy_h2d(dst, 0, src, bytes, stream);
  return rc ? rc : dlrt_stream_synchronize(stream);
}

static int download(float *dst, dlrt_buffer_t *src, size_t bytes,
                    dlrt_stream_t *stream) {
  void *host = dlrt_buffer_host_ptr(src);
  if (host) {
    memcpy(dst, host, bytes);
    return DLRT_OK;
  }
  int rc = dlrt_copy_d2h(dst, src, 0, bytes, stream);
  return rc ? rc : dlrt_stream_synchronize(stream);
}

/* One dlrt GEMM, queued and waited for; seconds in *elapsed. */
static int time_dlrt(dlrt_stream_t *stream, const dlrt_gemm_desc *desc,
                     dlrt_buffer_t *a, dlrt_buffer_t *b, dlrt_buffer_t *c,
                     double *elapsed) {
  double t0 = now_seconds();
  int rc = dlrt_gemm(stream, desc, a, 0, b, 0, c, 0);
  if (rc == DLRT_OK)
    rc = dlrt_stream_synchronize(stream);
  *elapsed = now_seconds() - t0;
  return rc;
}

/* OpenBLAS called as a program would: with OPENBLAS_NUM_THREADS, else all
 * cores. dlrt's CPU backend keeps OpenBLAS at one thread (its own pool
 * spreads GEMM), so the count is set for the call and put back. */
static double time_openblas(int n, const float *a, const float *b, float *c) {
  const char *env = getenv("OPENBLAS_NUM_THREADS");
  int threads = env && atoi(env) > 0 ? atoi(env) : openblas_get_num_procs();
  openblas_set_num_threads(threads);
  double t0 = now_seconds();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n,
              0.0f, c, n);
  double t = now_seconds() - t0;
  openblas_set_num_threads(1);
  return t;
}

typedef struct {
  long n, reps;
  size_t count, bytes; /* elements and bytes of one matrix */
  double flops;        /* of one GEMM */
  float *a, *b, *c_blas, *c_dlrt;
  double *gf_dlrt, *gf_blas; /* GFLOP/s of each timed call */
  dlrt_device_t *dev;
  dlrt_device_props props;
  dlrt_stream_t *stream;
  dlrt_buffer_t *da, *db, *dc;
} bench;

/* Host arrays with the same inputs for both sides, then the device side. */
static int setup(bench *bm, const char *spec) {
  int rc;
  bm->count = (size_t)bm->n * (size_t)bm->n;
  bm->bytes = bm->count * sizeof(float);
  bm->flops = 2.0 * (double)bm->n * (double)bm->n * (double)bm->n;
  bm->a = aligned_bytes(bm->bytes);
  bm->b = aligned_bytes(bm->bytes);
  bm->c_blas = aligned_bytes(bm->bytes);
  bm->c_dlrt = aligned_bytes(bm->bytes);
  bm->gf_dlrt = calloc((size_t)bm->reps, sizeof *bm->gf_dlrt);
  bm->gf_blas = calloc((size_t)bm->reps, sizeof *bm->gf_blas);
  if (!bm->a || !bm->b || !bm->c_blas || !bm->c_dlrt || !bm->gf_dlrt || !bm->gf_blas) {
    fprintf(stderr, "sgemm-vs-openblas: out of host memory for n = %ld\n", bm->n);
    return 1;
  }
  uint32_t seed = 12345; /* a fixed LCG, values in [-1, 1) */
  for (size_t i = 0; i < bm->count; i++) {
    seed = seed * 1664525u + 1013904223u;
    bm->a[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
    seed = seed * 1664525u + 1013904223u;
    bm->b[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
  }
  if ((rc = dlrt_device_open(spec, &bm->dev)) ||
      (rc = dlrt_device_props_get(bm->dev, &bm->props)))
    return fail("cannot open the device", rc);
  if ((rc = dlrt_stream_create(bm->dev, &bm->stream)) ||
      (rc = dlrt_buffer_alloc(bm->dev, bm->bytes, bm->stream, &bm->da)) ||
      (rc = dlrt_buffer_alloc(bm->dev, bm->bytes, bm->stream, &bm->db)) ||
      (rc = dlrt_buffer_alloc(bm->dev, bm->bytes, bm->stream, &bm->dc)) ||
      (rc = upload(bm->da, bm->a, bm->bytes, bm->stream)) ||
      (rc = upload(bm->db, bm->b, bm->bytes, bm->stream)))
    return fail("cannot set up the dlrt side", rc);
  return 0;
}

/* Warm-ups, then `reps` interleaved timed calls of each side. */
static int measure(bench *bm) {
  const dlrt_gemm_desc desc =
      dlrt_gemm_desc_make(DLRT_F32, 0, 0, bm->n, bm->n, bm->n, 1.0f, 0.0f);
  for (long i = -WARMUPS; i < bm->reps; i++) {
    double t;
    int rc = time_dlrt(bm->stream, &desc, bm->da, bm->db, bm->dc, &t);
    if (rc)
      return fail("dlrt_gemm", rc);
    double t_blas = time_openblas((int)bm->n, bm->a, bm->b, bm->c_blas);
    if (i >= 0) {
      bm->gf_dlrt[i] = bm->flops / t / 1e9;
      bm->gf_blas[i] = bm->flops / t_blas / 1e9;
    }
  }
  return 0;
}

/* max |dlrt - openblas| / max |openblas| over C; non-finite differences are
 * counted apart. */
static int compare(bench *bm, double *rel_err, size_t *not_finite) {
  int rc = download(bm->c_dlrt, bm->dc, bm->bytes, bm->stream);
  if (rc)
    return fail("cannot read the dlrt result", rc);
  double max_err = 0, max_ref = 0;
  *not_finite = 0;
  for (size_t i = 0; i < bm->count; i++) {
    double err = (double)bm->c_dlrt[i] - (double)bm->c_blas[i];
    double ref = (double)bm->c_blas[i];
    err = err < 0 ? -err : err;
    ref = ref < 0 ? -ref : ref;
    if (!(err <= 1e30)) /* NaN or infinity */
      (*not_finite)++;
    else if (err > max_err)
      max_err = err;
    max_ref = ref > max_ref ? ref : max_ref;
  }
  *rel_err = max_ref > 0 ? max_err / max_ref : max_err;
  return 0;
}

static void print_row(const char *side, summary s, double flops) {
  printf("%-10s %12.1f %12.1f %12.1f %12.3f\n", side, s.median, s.min, s.max,
         flops / s.median / 1e6);
}

static void teardown(bench *bm) {
  dlrt_buffer_free(bm->da);
  dlrt_buffer_free(bm->db);
  dlrt_buffer_free(bm->dc);
  dlrt_stream_destroy(bm->stream);
  dlrt_shutdown();
  free(bm->a);
  free(bm->b);
  free(bm->c_blas);
  free(bm->c_dlrt);
  free(bm->gf_dlrt);
  free(bm->gf_blas);
}

int main(int argc, char **argv) {
  static const struct option options[] = {{"n", required_argument, NULL, 'n'},
                                          {"reps", required_argument, NULL, 'r'},
                                          {"device", required_argument, NULL, 'd'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
  bench bm = {.n = 1024, .reps = 21};
  const char *spec = "cpu";
  double rel_err = 0;
  size_t not_finite = 0;
  int c, ok;

  while ((c = getopt_long(argc, argv, "n:r:d:h", options, NULL)) != -1) {
    switch (c) {
    case 'n': ok = parse_long(optarg, 1, 65536, &bm.n); break;
    case 'r': ok = parse_long(optarg, 1, 1000000, &bm.reps); break;
    case 'd': spec = optarg; ok = 1; break;
    case 'h': usage(stdout); return 0;
    default: ok = 0;
    }
    if (!ok) {
      if (c == 'n' || c == 'r')
        fprintf(stderr, "sgemm-vs-openblas: bad value '%s'\n", optarg);
      usage(stderr);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "sgemm-vs-openblas: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }

  if (setup(&bm, spec) || measure(&bm) || compare(&bm, &rel_err, &not_finite)) {
    teardown(&bm);
    return 1;
  }
  int match = not_finite == 0 && rel_err <= TOLERANCE;
  summary sd = summarize(bm.gf_dlrt, (int)bm.reps);
  summary sb = summarize(bm.gf_blas, (int)bm.reps);
  printf("sgemm fp32, n = %ld (%.2f GFLOP a call): %d warm-ups, then %ld calls of "
         "each, interleaved\n",
         bm.n, bm.flops / 1e9, WARMUPS, bm.reps);
  printf("dlrt on %s: %s (%s backend); reference: cblas_sgemm\n\n", bm.props.spec,
         bm.props.name, bm.props.backend);
  printf("%-10s %12s %12s %12s %12s\n", "GFLOP/s", "median", "min", "max", "median ms");
  print_row("dlrt", sd, bm.flops);
  print_row("openblas", sb, bm.flops);
  printf("\nresults match: %s (max |dlrt - openblas| / max |openblas| = %.2e, "
         "tolerance %.0e, %zu not finite)\n",
         match ? "yes" : "NO", rel_err, TOLERANCE, not_finite);
  printf("ratio dlrt/openblas (median) = %.3f\n", sd.median / sb.median);
  teardown(&bm);
  return match ? 0 : 1;
}
