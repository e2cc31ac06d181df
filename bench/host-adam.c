/*
 * host-adam — dlrt_host_optimizer_update (the offloaded optimizer's Adam over
 * host memory) on the parameters of a GPT-2-shaped model: a benchmark, not a
 * test. bench/host-adam-vs-torch.sh runs it alternated with torch.optim.Adam
 * on the same tensors (bench/host_adam_torch.py).
 *
 *   bench/host-adam [--layers L] [--embd C] [--vocab V] [--steps S] [--threads N]
 *
 * The tensors are GPT-2's (lib/train/gpt.c): wte V x C, wpe 1024 x C, per
 * block two LayerNorms (2 x 2C), c_attn C x 3C + 3C, c_proj C x C + C, c_fc
 * C x 4C + 4C, the MLP's c_proj 4C x C + C, and ln_f 2C; gradients random in
 * [-1, 1), Adam's defaults with lr 1e-3. After one warm-up step, S steps are
 * timed; one JSON line: the median step in ms and the parameter updates per
 * second of the median. Defaults: 4 layers, 768 wide, 50257 words (67.7M
 * parameters, 1.08 GB of parameters, gradients and moments), 5 steps, 2
 * threads.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlrt.h"

#define MAX_TENSORS 4096

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  long layers = 4, embd = 768, vocab = 50257, steps = 5, threads = 2;
  static const struct option longs[] = {{"layers", 1, 0, 'l'}, {"embd", 1, 0, 'c'},
                                        {"vocab", 1, 0, 'v'},  {"steps", 1, 0, 's'},
                                        {"threads", 1, 0, 't'}, {0, 0, 0, 0}};
  for (int c; (c = getopt_long(argc, argv, "", longs, NULL)) != -1;) {
    long v = optarg ? atol(optarg) : 0;
    if (c == '?' || v < 1) {
      fprintf(stderr, "usage: %s [--layers L] [--embd C] [--vocab V] [--steps S] "
              "[--threads N] (each at least 1)\n", argv[0]);
      return 2;
    }
    if (c == 'l') layers = v; else if (c == 'c') embd = v; else if (c == 'v') vocab = v;
    else if (c == 's') steps = v; else threads = v;
  }
  int64_t sizes[MAX_TENSORS];
  int n = 0;
  int64_t C = embd;
  sizes[n++] = vocab * C, sizes[n++] = 1024 * C;
  for (long l = 0; l < layers && n + 12 < MAX_TENSORS; l++) {
    int64_t block[12] = {C, C, C * 3 * C, 3 * C, C * C, C, C, C, C * 4 * C, 4 * C, 4 * C * C, C};
    for (int k = 0; k < 12; k++) sizes[n++] = block[k];
  }
  sizes[n++] = C, sizes[n++] = C;
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += sizes[i];
  if (dlrt_init() < 0 || dlrt_set_cpu_threads((int)threads) < 0) {
    fprintf(stderr, "host-adam: %s\n", dlrt_last_error());
    return 1;
  }
  float *p = malloc(sizeof(float) * (size_t)total), *g = malloc(sizeof(float) * (size_t)total);
  float *m = calloc((size_t)total, sizeof(float)), *v = calloc((size_t)total, sizeof(float));
  double *ms = malloc(sizeof(double) * (size_t)steps);
  if (!p || !g || !m || !v || !ms) {
    fputs("host-adam: out of memory\n", stderr);
    return 1;
  }
  uint32_t s = 7;
  for (int64_t i = 0; i < total; i++) {
    s = s * 1664525u + 1013904223u;
    p[i] = (float)(s >> 8) / 8388608.0f - 1.0f;
    g[i] = (float)((s * 2654435761u) >> 8) / 8388608.0f - 1.0f;
  }
  dlrt_optimizer adam = dlrt_optimizer_defaults(DLRT_OPT_ADAM);
  for (long step = 0; step <= steps; step++) {
    double t0 = now_s();
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
      if (dlrt_host_optimizer_update(&adam, step, p + at, m + at, v + at, g + at, sizes[i], 1,
                                     1.0f) < 0) {
        fprintf(stderr, "host-adam: %s\n", dlrt_last_error());
        return 1;
      }
      at += sizes[i];
    }
    if (step > 0) ms[step - 1] = 1e3 * (now_s() - t0); /* step 0 warms up */
  }
  qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
  double median = steps % 2 ? ms[steps / 2] : 0.5 * (ms[steps / 2 - 1] + ms[steps / 2]);
  printf("{\"impl\": \"dlrt\", \"params\": %lld, \"tensors\": %d, \"threads\": %ld, "
         "\"median_ms\": %.3f, \"updates_per_s\": %.4g, \"check\": %.9g}\n",
         (long long)total, n, threads, median, (double)total / (median * 1e-3),
         (double)p[total / 2]);
  free(p), free(g), free(m), free(v), free(ms);
  dlrt_shutdown();
  return 0;
}
