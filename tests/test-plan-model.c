/*
 * test-plan-model.c — the planner that chooses (dlrt_exec_plan_spill) on a
 * small classifier under half its peak, on every device present: each
 * strategy ends with the unlimited run's parameters and optimizer state bit
 * for bit, within the budget (DLRT_SPILL_CHECK recounts it at every
 * allocation); its model of the spill pool predicts a steady step's
 * traffic as the pool moves it (Belady: byte for byte); the forced
 * strategies decide as they say; auto's prediction is no worse than a pure
 * strategy's; the misuses are refused. And a sibling: with checkpointing,
 * --offload activations moves the forward pass's activations off (the end
 * of the forward pass is where the backward pass begins, not the last
 * recomputation). And a node larger than the budget: a wide GELU's gradient
 * runs in slices of its rows (a slice block) under a budget below what it
 * holds whole, with the same bits, and the model still replays the pool's
 * Belady traffic byte for byte.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dlrt.h"
#include "tap.h"

enum { BATCH = 32, SIDE = 8, CLASSES = 4, STEPS = 4 };

static char dir[64], model_path[128], wide_path[128];

/* What net_make builds: the small classifier, or the wide GELU's. */
static const char *net_model = model_path;
static int net_batch = BATCH, net_side = SIDE;

typedef struct {
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_tensor_t *x, *labels, *loss;
  int batch, side;
} net;

static void net_free(net *n) {
  dlrt_exec_destroy(n->e);
  dlrt_graph_destroy(n->g);
  memset(n, 0, sizeof *n);
}

static int net_make(dlrt_device_t *dev, net *n) {
  memset(n, 0, sizeof *n);
  n->batch = net_batch, n->side = net_side;
  int rc = dlrt_graph_create(&n->g);
  if (rc < 0) return rc;
  int64_t xs[4] = {n->batch, 1, n->side, n->side}, ls[1] = {n->batch};
  n->x = dlrt_input(n->g, "images", DLRT_F32, 4, xs);
  n->labels = dlrt_input(n->g, "labels", DLRT_I32, 1, ls);
  dlrt_tensor_t *logits;
  if ((rc = dlrt_model_build(n->g, net_model, n->x, CLASSES, &logits)) < 0) return rc;
  n->loss = dlrt_keep(n->g, dlrt_cross_entropy(n->g, logits, n->labels, 0.0f));
  dlrt_optimizer opt = dlrt_optimizer_defaults(DLRT_OPT_ADAM);
  if ((rc = dlrt_graph_backward(n->g, n->loss)) < 0 ||
      (rc = dlrt_graph_optimize(n->g, &opt)) < 0)
    return rc;
  return dlrt_exec_create(n->g, dev, 5, &n->e);
}

static int net_step(net *n, int s) {
  size_t pixels = (size_t)n->batch * (size_t)(n->side * n->side);
  float *x = malloc(pixels * sizeof *x);
  int32_t *y = malloc((size_t)n->batch * sizeof *y);
  if (!x || !y) {
    free(x), free(y);
    return DLRT_ERR_OOM;
  }
  uint64_t r = 0x1234567u + (uint64_t)s * 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < pixels; i++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    x[i] = (float)(r % 1000) / 1000.0f - 0.5f;
  }
  for (int i = 0; i < n->batch; i++) y[i] = (int32_t)((i * 7 + s) % CLASSES);
  int rc;
  if ((rc = dlrt_exec_write(n->e, n->x, x, pixels * sizeof *x)) < 0 ||
      (rc = dlrt_exec_write(n->e, n->labels, y, (size_t)n->batch * sizeof *y)) < 0) {
    free(x), free(y);
    return rc;
  }
  free(x), free(y);
  return dlrt_exec_run(n->e, DLRT_RUN_TRAIN);
}

static unsigned char *net_state(net *n, size_t *bytes) {
  dlrt_host_tensor *t;
  int count;
  if (dlrt_exec_export(n->e, 1, &t, &count) < 0) return NULL;
  size_t total = 0;
  for (int i = 0; i < count; i++) total += t[i].bytes;
  unsigned char *out = malloc(total ? total : 1), *at = out;
  for (int i = 0; out && i < count; i++) {
    memcpy(at, t[i].data, t[i].bytes);
    at += t[i].bytes;
  }
  dlrt_safetensors_free(t, count, NULL);
  *bytes = total;
  return out;
}

/* The decisions' choices counted: [keep, swap, recompute]. */
static void count_choices(dlrt_exec_t *e, int counts[3]) {
  dlrt_spill_plan p;
  counts[0] = counts[1] = counts[2] = 0;
  if (dlrt_exec_spill_plan(e, &p) < 0) return;
  for (int i = 0; i < p.decisions; i++) {
    dlrt_spill_decision d;
    if (dlrt_exec_spill_decision(e, i, &d) == DLRT_OK) counts[d.choice]++;
  }
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Under a slow modelled link, the swap plan's write-backs run on the
 * write-back stream (the device-to-host engine), not on the compute stream:
 * the pool counts them queued there, the engine carried every byte the
 * step spilled, and the model, which replays the same rule and traffic,
 * has the compute stream wait for only part of their time; the bits stay. */
static void writeback_overlaps(dlrt_device_t *dev, const char *spec, uint64_t budget,
                               const unsigned char *want, size_t ref_bytes) {
  const double rate = 20e6; /* B/s */
  net n;
  dlrt_spill_config c = {.device_budget = budget, .prefetch = 2};
  int rc = dlrt_link_set(dev, "20MB/s");
  if (rc == DLRT_OK) rc = net_make(dev, &n);
  if (rc == DLRT_OK) rc = dlrt_exec_set_spill(n.e, &c);
  if (rc == DLRT_OK) rc = dlrt_exec_plan_spill(n.e, DLRT_PLAN_SWAP);
  dlrt_spill_plan p = {0};
  if (rc == DLRT_OK) rc = dlrt_exec_spill_plan(n.e, &p);
  dlrt_spill_stats s0 = {0}, s1 = {0};
  dlrt_link_info l0 = {0}, l1 = {0};
  if (rc == DLRT_OK) rc = net_step(&n, 0);
  if (rc == DLRT_OK) rc = dlrt_exec_spill_stats(n.e, &s0);
  if (rc == DLRT_OK) rc = dlrt_link_get(dev, &l0);
  double t0 = now_ms();
  if (rc == DLRT_OK) rc = net_step(&n, 1);
  double step_ms = now_ms() - t0;
  if (rc == DLRT_OK) rc = dlrt_exec_spill_stats(n.e, &s1);
  if (rc == DLRT_OK) rc = dlrt_link_get(dev, &l1);
  for (int s = 2; s < STEPS && rc == DLRT_OK; s++) rc = net_step(&n, s);
  size_t got_bytes = 0;
  unsigned char *got = rc == DLRT_OK ? net_state(&n, &got_bytes) : NULL;
  tap_check(rc, "%s, link 20MB/s: the swap plan runs", spec);
  uint64_t spilled = s1.spilled_bytes - s0.spilled_bytes;
  uint64_t fetched = s1.fetched_bytes - s0.fetched_bytes;
  uint64_t queued = s1.async_writebacks - s0.async_writebacks;
  uint64_t d2h = l1.bytes[1] - l0.bytes[1];
  ok(rc == DLRT_OK && queued > 0 && spilled > 0 && d2h == spilled,
     "%s, link 20MB/s: a step's %llu write-backs queued on the write-back stream; the "
     "device-to-host engine carried its %llu spilled bytes (%llu)", spec,
     (unsigned long long)queued, (unsigned long long)spilled, (unsigned long long)d2h);
  double wb_ms = 1e3 * (double)p.predicted.spilled_bytes / rate;
  ok(rc == DLRT_OK && p.predicted.spilled_bytes > 0 && p.predicted.exposed_ms <
         wb_ms + 1e3 * (double)p.predicted.fetched_bytes / rate,
     "%s, link 20MB/s: the model has the compute stream wait %.2f ms of the %.2f ms of "
     "write-backs and %.2f ms of fetches", spec, p.predicted.exposed_ms, wb_ms,
     1e3 * (double)p.predicted.fetched_bytes / rate);
  diag("%s, link 20MB/s: a step took %.2f ms, predicted %.2f; its copies alone %.2f ms", spec,
       step_ms, p.predicted.step_ms, 1e3 * (double)(spilled + fetched) / rate);
  ok(got && got_bytes == ref_bytes && memcmp(got, want, ref_bytes) == 0,
     "%s, link 20MB/s: the unlimited run's parameters bit for bit", spec);
  free(got);
  net_free(&n);
  dlrt_link_set(dev, "none");
}

/* A GELU over 512 rows of 128 (dlrt_model_build's "gelu_tanh") whose
 * gradient holds 768 KiB whole (dy, x and dx), under a budget of 600 KiB:
 * the budget fits only when it runs in slices of its rows (chunk.c's slice
 * blocks). Each strategy keeps the unlimited run's bits within the budget;
 * Belady's traffic is the model's byte for byte. */
static void slices_fit(dlrt_device_t *dev, const char *spec) {
  const uint64_t budget = 600 * 1024, whole = 3 * 512 * 128 * 4;
  net_model = wide_path, net_batch = 512, net_side = 4;
  net ref;
  int rc = net_make(dev, &ref);
  for (int s = 0; s < STEPS && rc == DLRT_OK; s++) rc = net_step(&ref, s);
  size_t ref_bytes = 0;
  unsigned char *want = rc == DLRT_OK ? net_state(&ref, &ref_bytes) : NULL;
  tap_check(rc, "%s, wide GELU: the unlimited run", spec);
  net_free(&ref);
  for (int strategy = 0; strategy < DLRT_PLAN_STRATEGIES_ && want; strategy++) {
    const char *name = dlrt_plan_strategy_name((dlrt_plan_strategy)strategy);
    net n;
    dlrt_spill_config c = {.device_budget = budget, .prefetch = 2};
    rc = net_make(dev, &n);
    if (rc == DLRT_OK) rc = dlrt_exec_set_spill(n.e, &c);
    if (rc == DLRT_OK) rc = dlrt_exec_plan_spill(n.e, (dlrt_plan_strategy)strategy);
    dlrt_spill_plan p = {0};
    if (rc == DLRT_OK) rc = dlrt_exec_spill_plan(n.e, &p);
    dlrt_spill_stats s0 = {0}, s1 = {0};
    if (rc == DLRT_OK) rc = net_step(&n, 0);
    if (rc == DLRT_OK) rc = dlrt_exec_spill_stats(n.e, &s0);
    if (rc == DLRT_OK) rc = net_step(&n, 1);
    if (rc == DLRT_OK) rc = dlrt_exec_spill_stats(n.e, &s1);
    for (int s = 2; s < STEPS && rc == DLRT_OK; s++) rc = net_step(&n, s);
    size_t got_bytes = 0;
    unsigned char *got = rc == DLRT_OK ? net_state(&n, &got_bytes) : NULL;
    ok(rc == DLRT_OK && got && got_bytes == ref_bytes && memcmp(got, want, ref_bytes) == 0 &&
           s1.peak_resident <= budget && p.predicted.feasible && p.predicted.step_ms > 0,
       "%s, wide GELU: %s (ran %s) within %.0f KiB, below the %.0f KiB its gradient holds "
       "whole: the unlimited run's bits, peak %.0f KiB, predicted %.3f ms (%s)", spec, name,
       dlrt_plan_strategy_name(p.chosen), (double)budget / 1024, (double)whole / 1024,
       (double)s1.peak_resident / 1024, p.predicted.step_ms, rc < 0 ? dlrt_last_error() : "ok");
    free(got);
    if (strategy == DLRT_PLAN_BELADY) {
      uint64_t fetched = s1.fetched_bytes - s0.fetched_bytes;
      uint64_t spilled = s1.spilled_bytes - s0.spilled_bytes;
      ok(rc == DLRT_OK && fetched > 0 && p.predicted.fetched_bytes == fetched &&
             p.predicted.spilled_bytes == spilled,
         "%s, wide GELU: belady's step moves what the model says: fetched %llu (model %llu), "
         "spilled %llu (model %llu)", spec, (unsigned long long)fetched,
         (unsigned long long)p.predicted.fetched_bytes, (unsigned long long)spilled,
         (unsigned long long)p.predicted.spilled_bytes);
    }
    net_free(&n);
  }
  free(want);
  net_model = model_path, net_batch = BATCH, net_side = SIDE;
}

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  diag("device %s", spec);
  net ref;
  if (!tap_check(net_make(dev, &ref), "%s: the model builds", spec)) return;
  dlrt_exec_info info;
  dlrt_exec_info_get(ref.e, &info);
  int rc = DLRT_OK;
  for (int s = 0; s < STEPS && rc == DLRT_OK; s++) rc = net_step(&ref, s);
  size_t ref_bytes = 0;
  unsigned char *want = rc == DLRT_OK ? net_state(&ref, &ref_bytes) : NULL;
  tap_check(rc, "%s: the unlimited run", spec);
  ok(dlrt_exec_plan_spill(ref.e, DLRT_PLAN_AUTO) == DLRT_ERR_STATE,
     "%s: planning without a budget is refused (%s)", spec, dlrt_last_error());
  net_free(&ref);
  uint64_t budget = info.planned_peak_bytes / 2;
  dlrt_step_prediction by[DLRT_PLAN_STRATEGIES_];
  for (int strategy = 0; strategy < DLRT_PLAN_STRATEGIES_; strategy++) {
    const char *name = dlrt_plan_strategy_name((dlrt_plan_strategy)strategy);
    net n;
    dlrt_spill_config c = {.device_budget = budget, .prefetch = 2};
    rc = net_make(dev, &n);
    if (rc == DLRT_OK) rc = dlrt_exec_set_spill(n.e, &c);
    if (rc == DLRT_OK) rc = dlrt_exec_plan_spill(n.e, (dlrt_plan_strategy)strategy);
    dlrt_spill_plan p = {0};
    if (rc == DLRT_OK) rc = dlrt_exec_spill_plan(n.e, &p);
    if (!tap_check(rc, "%s: %s plans within %.2f MiB", spec, name, (double)budget / 1048576)) {
      net_free(&n);
      continue;
    }
    by[strategy] = p.predicted;
    ok(dlrt_exec_plan_spill(n.e, DLRT_PLAN_AUTO) == DLRT_ERR_STATE,
       "%s: %s: a second plan is refused", spec, name);
    /* The traffic of a steady step (the second), measured and modelled. */
    dlrt_spill_stats s0, s1;
    rc = net_step(&n, 0);
    if (rc == DLRT_OK) rc = dlrt_exec_spill_stats(n.e, &s0);
    if (rc == DLRT_OK) rc = net_step(&n, 1);
    if (rc == DLRT_OK) rc = dlrt_exec_spill_stats(n.e, &s1);
    for (int s = 2; s < STEPS && rc == DLRT_OK; s++) rc = net_step(&n, s);
    size_t got_bytes = 0;
    unsigned char *got = rc == DLRT_OK ? net_state(&n, &got_bytes) : NULL;
    ok(want && got && got_bytes == ref_bytes && memcmp(got, want, ref_bytes) == 0 &&
           s1.peak_resident <= budget,
       "%s: %s (ran %s): the unlimited run's parameters bit for bit, peak %.2f of %.2f MiB",
       spec, name, dlrt_plan_strategy_name(p.chosen), (double)s1.peak_resident / 1048576,
       (double)budget / 1048576);
    free(got);
    uint64_t fetched = s1.fetched_bytes - s0.fetched_bytes;
    uint64_t spilled = s1.spilled_bytes - s0.spilled_bytes;
    double pf = (double)p.predicted.fetched_bytes, ps = (double)p.predicted.spilled_bytes;
    /* Belady's eviction is replayed exactly; the planner's prefetches race
     * the compute stream for room, so their traffic agrees within 15%. */
    double tol = strategy == DLRT_PLAN_BELADY ? 0 : 0.15;
    ok(fabs(pf - (double)fetched) <= tol * (double)fetched &&
           fabs(ps - (double)spilled) <= tol * (double)spilled,
       "%s: %s: a step's traffic as modelled: fetched %llu (model %.0f), spilled %llu "
       "(model %.0f)", spec, name, (unsigned long long)fetched, pf,
       (unsigned long long)spilled, ps);
    int counts[3];
    count_choices(n.e, counts);
    if (strategy == DLRT_PLAN_BELADY)
      ok(counts[0] > 0 && counts[1] == 0 && counts[2] == 0, "%s: belady keeps all (%d)", spec,
         counts[0]);
    else if (strategy == DLRT_PLAN_SWAP)
      ok(counts[1] > 0 && counts[0] == 0 && counts[2] == 0, "%s: swap swaps all (%d)", spec,
         counts[1]);
    else if (strategy == DLRT_PLAN_RECOMPUTE)
      ok(counts[2] > 0 && counts[1] == 0, "%s: recompute recomputes %d, swaps none", spec,
         counts[2]);
    else
      ok(p.predicted.step_ms <= by[DLRT_PLAN_BELADY].step_ms * (1 + 1e-9) &&
             p.predicted.step_ms <= by[DLRT_PLAN_SWAP].step_ms * (1 + 1e-9) &&
             p.predicted.step_ms <= by[DLRT_PLAN_RECOMPUTE].step_ms * (1 + 1e-9) &&
             fabs(p.predicted.compute_ms + p.predicted.recompute_ms + p.predicted.exposed_ms -
                  p.predicted.step_ms) <= 1e-6 * p.predicted.step_ms,
         "%s: auto predicts %.3f ms, no more than belady %.3f, swap %.3f, recompute %.3f", spec,
         p.predicted.step_ms, by[0].step_ms, by[1].step_ms, by[2].step_ms);
    net_free(&n);
  }
  /* The sibling: checkpointing with activations offloaded. */
  net n;
  dlrt_spill_config c = {.device_budget = budget, .prefetch = 2,
                         .policy = DLRT_OFFLOAD_ACTIVATIONS};
  rc = net_make(dev, &n);
  if (rc == DLRT_OK) rc = dlrt_exec_set_checkpointing(n.e, 2);
  if (rc == DLRT_OK) rc = dlrt_exec_set_spill(n.e, &c);
  for (int s = 0; s < STEPS && rc == DLRT_OK; s++) rc = net_step(&n, s);
  dlrt_spill_stats st = {0};
  if (rc == DLRT_OK) rc = dlrt_exec_spill_stats(n.e, &st);
  size_t got_bytes = 0;
  unsigned char *got = rc == DLRT_OK ? net_state(&n, &got_bytes) : NULL;
  ok(rc == DLRT_OK && st.offloads > 0 && got && got_bytes == ref_bytes &&
         memcmp(got, want, ref_bytes) == 0,
     "%s: checkpointing with --offload activations offloads %llu, the same bits", spec,
     (unsigned long long)st.offloads);
  free(got);
  net_free(&n);
  writeback_overlaps(dev, spec, budget, want, ref_bytes);
  free(want);
  slices_fit(dev, spec);
}

int main(void) {
  tap_tempdir("dlrt-plan-model-test", dir, sizeof dir);
  snprintf(model_path, sizeof model_path, "%s/small.model", dir);
  FILE *m = fopen(model_path, "w");
  if (!m || fputs("linear 64\nrelu\nlinear 48\nrelu\n", m) < 0 || fclose(m) != 0)
    bail_out("cannot write %s", model_path);
  snprintf(wide_path, sizeof wide_path, "%s/wide.model", dir);
  m = fopen(wide_path, "w");
  if (!m || fputs("linear 128\ngelu_tanh\n", m) < 0 || fclose(m) != 0)
    bail_out("cannot write %s", wide_path);
  setenv("DLRT_SPILL_CHECK", "1", 1);
  unsetenv("DLRT_PROFILE_CACHE");
  unsetenv("XDG_CACHE_HOME");
  if (dlrt_init() < 0 || dlrt_set_cpu_threads(1) < 0) bail_out("%s", dlrt_last_error());
  dlrt_plan_strategy s;
  ok(dlrt_plan_strategy_parse("recompute", &s) == DLRT_OK && s == DLRT_PLAN_RECOMPUTE &&
         dlrt_plan_strategy_parse("lru", &s) == DLRT_ERR_INVALID_ARG &&
         strstr(dlrt_last_error(), "belady, swap, recompute or auto") &&
         dlrt_plan_strategy_name(DLRT_PLAN_STRATEGIES_) == NULL,
     "strategy names parse, and an unknown one names the four");
  ok(dlrt_exec_plan_spill(NULL, DLRT_PLAN_AUTO) == DLRT_ERR_INVALID_ARG,
     "a NULL executor is refused");
  tap_for_each_device(run_device, NULL);
  dlrt_shutdown();
  tap_remove_tree(dir);
  return done_testing();
}
