/*
 * attention-vs-unfused — a training step's attention (forward and backward)
 * through the fused dlrt_attention against the same attention as a graph of
 * the older ops (tests/attention-unfused.c: slices, transposes, batched
 * matmuls, a mask, softmax), which materialises the T x T scores: a
 * benchmark, not a test.
 *
 *   bench/attention-vs-unfused [--device SPEC] [--batch B] [--heads H] [--seq T]
 *                              [--head-dim D] [--reps R] [--threads N] [--not-causal]
 *
 * Each graph is qkv (B x T x 3 H D, a parameter) -> attention -> sum(y * R)
 * and its backward pass, without an optimizer; one step is a training run
 * and a wait for its stream. After warm-ups the two alternate step by step
 * (fused, unfused, fused, ...) so that clock and load changes hit both
 * alike; the report gives each one's median, minimum and maximum in ms, the
 * ratio of the medians (unfused / fused: above 1, fused is faster), both
 * planned peaks, and the largest difference between their gradients of qkv
 * (relative to its largest element). Defaults: cpu, B 4, H 4, T 256, D 32,
 * 21 steps each, causal, the cpu backend's threads as dlrt sets them (one
 * per core; --threads: dlrt_set_cpu_threads).
 *
 * Exit status: 0 done and the gradients agree within 1e-4, 1 a failure,
 * 2 usage error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../tests/attention-unfused.h"
#include "dlrt.h"

enum { WARMUPS = 3 };

typedef struct {
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_tensor_t *qkv, *r, *mask, *grad;
  uint64_t peak;
} setup;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, compare_doubles);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int fail(const char *what) {
  fprintf(stderr, "attention-vs-unfused: %s: %s\n", what, dlrt_last_error());
  return 1;
}

/* Builds and creates one of the two graphs on dev, with the host data. */
static int build(setup *s, dlrt_device_t *dev, int fused, int64_t b, int64_t h, int64_t t,
                 int64_t d, int causal, const float *qv, const float *rv, const float *mask) {
  int64_t qs[3] = {b, t, 3 * h * d}, ys[3] = {b, t, h * d}, ms[2] = {t, t};
  int rc = dlrt_graph_create(&s->g);
  if (rc < 0) return rc;
  s->qkv = dlrt_param(s->g, "qkv", 3, qs, DLRT_INIT_ZEROS, 0, 0);
  s->mask = !fused && causal ? dlrt_input(s->g, "mask", DLRT_F32, 2, ms) : NULL;
  dlrt_tensor_t *y = fused ? dlrt_attention(s->g, s->qkv, (int)h, causal)
                           : unfused_attention(s->g, s->qkv, s->mask, h, d);
  s->r = dlrt_input(s->g, "R", DLRT_F32, 3, ys);
  rc = dlrt_graph_backward(s->g, dlrt_sum(s->g, dlrt_mul(s->g, y, s->r)));
  s->grad = dlrt_keep(s->g, dlrt_grad(s->g, s->qkv));
  dlrt_exec_info info;
  if (rc == DLRT_OK) rc = dlrt_exec_create(s->g, dev, 1, &s->e);
  if (rc == DLRT_OK) rc = dlrt_exec_info_get(s->e, &info);
  if (rc == DLRT_OK) s->peak = info.planned_peak_bytes;
  if (rc == DLRT_OK) rc = dlrt_exec_write(s->e, s->qkv, qv, (size_t)(b * t * 3 * h * d) * 4);
  if (rc == DLRT_OK) rc = dlrt_exec_write(s->e, s->r, rv, (size_t)(b * t * h * d) * 4);
  if (rc == DLRT_OK && s->mask) rc = dlrt_exec_write(s->e, s->mask, mask, (size_t)(t * t) * 4);
  return rc;
}

/* One training run and the wait for it, in ms (negative on an error). */
static double step(setup *s) {
  double t0 = now_ms();
  if (dlrt_exec_run(s->e, DLRT_RUN_TRAIN) < 0 ||
      dlrt_stream_synchronize(dlrt_exec_stream(s->e)) < 0)
    return -1;
  return now_ms() - t0;
}

static int parse(const char *text, long lo, long hi, long *out) {
  char *end;
  long v = strtol(text, &end, 10);
  if (*text == '\0' || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  static const struct option longs[] = {
      {"device", required_argument, NULL, 'd'}, {"batch", required_argument, NULL, 'b'},
      {"heads", required_argument, NULL, 'h'},  {"seq", required_argument, NULL, 't'},
      {"head-dim", required_argument, NULL, 'k'}, {"reps", required_argument, NULL, 'r'},
      {"threads", required_argument, NULL, 'j'}, {"not-causal", no_argument, NULL, 'n'},
      {"help", no_argument, NULL, 'H'},
      {NULL, 0, NULL, 0}};
  const char *spec = "cpu";
  long b = 4, h = 4, t = 256, d = 32, reps = 21, threads = 0;
  int causal = 1, opt;
  while ((opt = getopt_long(argc, argv, "", longs, NULL)) != -1) {
    long *dst = opt == 'b' ? &b : opt == 'h' ? &h : opt == 't' ? &t : opt == 'k' ? &d
                : opt == 'r' ? &reps : opt == 'j' ? &threads : NULL;
    if (opt == 'd') spec = optarg;
    else if (opt == 'n') causal = 0;
    else if (opt == 'H') {
      printf("usage: %s [--device SPEC] [--batch B] [--heads H] [--seq T] [--head-dim D] "
             "[--reps R] [--threads N] [--not-causal]\n", argv[0]);
      return 0;
    } else if (!dst || parse(optarg, 1, opt == 'k' ? 1024 : 1 << 20, dst) < 0) {
      fprintf(stderr, "%s: bad option or value; see --help\n", argv[0]);
      return 2;
    }
  }
  int64_t nq = (int64_t)b * t * 3 * h * d, ny = (int64_t)b * t * h * d;
  float *qv = malloc((size_t)nq * 4), *rv = malloc((size_t)ny * 4);
  float *mask = malloc((size_t)(t * t) * 4);
  float *g1 = malloc((size_t)nq * 4), *g2 = malloc((size_t)nq * 4);
  double *times[2] = {malloc((size_t)reps * sizeof(double)), malloc((size_t)reps * sizeof(double))};
  if (!qv || !rv || !mask || !g1 || !g2 || !times[0] || !times[1]) return fail("host memory");
  uint32_t seed = 1;
  for (int64_t i = 0; i < nq + ny; i++) {
    seed = seed * 1664525u + 1013904223u;
    float u = (float)(seed >> 8) / 16777216.0f * 2 - 1; /* U(-1, 1) */
    if (i < nq) qv[i] = u;
    else rv[i - nq] = u;
  }
  causal_mask(mask, t);

  dlrt_device_t *dev;
  setup s[2];
  if (threads && dlrt_set_cpu_threads((int)threads) < 0) return fail("--threads");
  memset(s, 0, sizeof s);
  if (dlrt_device_open(spec, &dev) < 0) return fail(spec);
  for (int k = 0; k < 2; k++)
    if (build(&s[k], dev, k == 0, b, h, t, d, causal, qv, rv, mask) < 0)
      return fail(k == 0 ? "the fused graph" : "the unfused graph");
  for (int w = 0; w < WARMUPS; w++)
    for (int k = 0; k < 2; k++)
      if (step(&s[k]) < 0) return fail("a warm-up step");
  for (long i = 0; i < reps; i++)
    for (int k = 0; k < 2; k++)
      if ((times[k][i] = step(&s[k])) < 0) return fail("a step");
  if (dlrt_exec_read(s[0].e, s[0].grad, g1, (size_t)nq * 4) < 0 ||
      dlrt_exec_read(s[1].e, s[1].grad, g2, (size_t)nq * 4) < 0)
    return fail("reading the gradients");
  double diff = 0, largest = 0;
  for (int64_t i = 0; i < nq; i++) {
    diff = fmax(diff, fabs((double)g1[i] - g2[i]));
    largest = fmax(largest, fabs(g2[i]));
  }
  double lo[2], hi[2], mid[2];
  for (int k = 0; k < 2; k++) {
    lo[k] = hi[k] = times[k][0];
    for (long i = 1; i < reps; i++) {
      lo[k] = fmin(lo[k], times[k][i]);
      hi[k] = fmax(hi[k], times[k][i]);
    }
    mid[k] = median(times[k], (int)reps);
  }
  dlrt_device_props props;
  if (dlrt_device_props_get(dev, &props) < 0) return fail("device properties");
  printf("attention forward + backward on %s (%s): B %ld, heads %ld, T %ld, D %ld, %s, "
         "%ld steps each, alternated\n", dlrt_device_spec(dev), props.name, b, h, t, d,
         causal ? "causal" : "not causal", reps);
  for (int k = 0; k < 2; k++)
    printf("  %-8s median %8.2f ms  (min %.2f, max %.2f)  planned peak %10llu bytes\n",
           k ? "unfused" : "fused", mid[k], lo[k], hi[k], (unsigned long long)s[k].peak);
  printf("  unfused / fused: %.2f x the time, %.2f x the planned peak\n", mid[1] / mid[0],
         (double)s[1].peak / (double)s[0].peak);
  printf("  gradients of qkv differ by at most %.1e of their largest element\n",
         diff / fmax(largest, 1e-30));
  for (int k = 0; k < 2; k++) {
    dlrt_exec_destroy(s[k].e);
    dlrt_graph_destroy(s[k].g);
  }
  free(qv), free(rv), free(mask), free(g1), free(g2), free(times[0]), free(times[1]);
  dlrt_shutdown();
  return diff <= 1e-4 * fmax(largest, 1e-30) ? 0 : 1;
}
