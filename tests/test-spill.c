/*
 * test-spill.c — the unified-memory emulation (dlrt_exec_set_spill): a
 * small classifier trained under device budgets well below its unlimited
 * peak, with every policy, with and without prefetching, and with a host
 * budget that sends copies to disk, ends with the parameters of the
 * unlimited run bit for bit; the budget holds (DLRT_SPILL_CHECK recounts it
 * at every allocation, and the allocator's measured peak stays within it);
 * clean copies are dropped without a write-back; the spill file leaves no
 * trace in its folder; a budget below what one node needs is refused with
 * the smallest budget that fits. Gradient runs (DLRT_RUN_GRADIENTS) and the
 * gradient sums read, rewritten and applied on a spilling executor give the
 * unlimited executor's sums and parameters bit for bit. On every device
 * present (tap_for_each_device).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlrt.h"
#include "tap.h"

enum { BATCH = 32, SIDE = 8, CLASSES = 4, STEPS = 6 };

static char dir[64], model_path[128], spill_dir[128];

typedef struct {
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_tensor_t *x, *labels, *loss;
} net;

static void net_free(net *n) {
  dlrt_exec_destroy(n->e);
  dlrt_graph_destroy(n->g);
  memset(n, 0, sizeof *n);
}

/* linear 64, relu, linear 48, relu, linear 4 on 8 x 8 images; Adam. */
static int net_make(dlrt_device_t *dev, dlrt_optimizer_kind kind, net *n) {
  memset(n, 0, sizeof *n);
  int rc = dlrt_graph_create(&n->g);
  if (rc < 0) return rc;
  int64_t xs[4] = {BATCH, 1, SIDE, SIDE}, ls[1] = {BATCH};
  n->x = dlrt_input(n->g, "images", DLRT_F32, 4, xs);
  n->labels = dlrt_input(n->g, "labels", DLRT_I32, 1, ls);
  dlrt_tensor_t *logits;
  if ((rc = dlrt_model_build(n->g, model_path, n->x, CLASSES, &logits)) < 0) return rc;
  n->loss = dlrt_keep(n->g, dlrt_cross_entropy(n->g, logits, n->labels, 0.0f));
  dlrt_optimizer opt = dlrt_optimizer_defaults(kind);
  if (kind == DLRT_OPT_SGD) opt.momentum = 0.9f;
  if ((rc = dlrt_graph_backward(n->g, n->loss)) < 0 ||
      (rc = dlrt_graph_optimize(n->g, &opt)) < 0)
    return rc;
  return dlrt_exec_create(n->g, dev, 5, &n->e);
}

/* Steps [first, last) on data drawn from the step number. */
static int net_train(net *n, int first, int last, dlrt_run_mode mode) {
  float x[BATCH * SIDE * SIDE];
  int32_t y[BATCH];
  for (int s = first; s < last; s++) {
    uint64_t r = 0x1234567u + (uint64_t)s * 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < BATCH * SIDE * SIDE; i++) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      x[i] = (float)(r % 1000) / 1000.0f - 0.5f;
    }
    for (int i = 0; i < BATCH; i++) y[i] = (int32_t)((i * 7 + s) % CLASSES);
    int rc;
    if ((rc = dlrt_exec_write(n->e, n->x, x, sizeof x)) < 0 ||
        (rc = dlrt_exec_write(n->e, n->labels, y, sizeof y)) < 0 ||
        (rc = dlrt_exec_run(n->e, mode)) < 0)
      return rc;
  }
  float loss;
  return dlrt_exec_read(n->e, n->loss, &loss, sizeof loss);
}

/* The parameters and optimizer state, as one byte string. */
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

static int spill_dir_empty(void) {
  DIR *d = opendir(spill_dir);
  if (!d) return 0;
  int entries = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) entries++;
  closedir(d);
  return entries == 0;
}

/* What pipeline stages and the host-side updates do with an executor:
 * two gradient runs (micro-batches) a step, the sums read to the host and
 * written back halved (a mean over two replicas), then the update, with
 * clipping (its global norm reads every gradient again). */
static int grad_step(net *n, int s, float *sums, int64_t count) {
  int rc = net_train(n, 2 * s, 2 * s + 2, DLRT_RUN_GRADIENTS);
  if (rc == DLRT_OK) rc = dlrt_exec_gradients_read(n->e, sums, count);
  for (int64_t i = 0; rc == DLRT_OK && i < count; i++) sums[i] *= 0.5f;
  if (rc == DLRT_OK) rc = dlrt_exec_gradients_write(n->e, sums, count);
  return rc == DLRT_OK ? dlrt_exec_apply_gradients(n->e) : rc;
}

/* The unlimited executor first (every step's sums kept), then the
 * spilling one alone on the device, so that the allocator's peak is its. */
static void grad_runs(dlrt_device_t *dev, const char *spec, uint64_t peak) {
  static const struct {
    const char *name;
    dlrt_offload_policy policy;
    int prefetch, disk;
  } cases[] = {{"gradient runs", DLRT_OFFLOAD_NONE, 2, 0},
               {"gradient runs, optimizer on the host", DLRT_OFFLOAD_OPTIMIZER, 0, 0},
               {"gradient runs, all through the disk", DLRT_OFFLOAD_ALL, 4, 1}};
  net ref;
  if (!tap_check(net_make(dev, DLRT_OPT_ADAM, &ref), "%s: gradient runs: the model builds", spec))
    return;
  dlrt_exec_info info;
  dlrt_exec_info_get(ref.e, &info);
  int64_t count = (int64_t)(info.param_bytes / sizeof(float));
  float *want = malloc((size_t)(STEPS * count) * sizeof(float));
  float *got = malloc((size_t)count * sizeof(float));
  dlrt_exec_set_clip_norm(ref.e, 0.05f);
  int rc = want && got ? DLRT_OK : DLRT_ERR_OOM;
  for (int s = 0; s < STEPS && rc == DLRT_OK; s++) rc = grad_step(&ref, s, want + s * count, count);
  tap_check(rc, "%s: %d steps of two gradient runs on the unlimited executor", spec, STEPS);
  size_t ref_bytes = 0;
  unsigned char *a = rc == DLRT_OK ? net_state(&ref, &ref_bytes) : NULL;
  net_free(&ref);
  for (size_t c = 0; c < sizeof cases / sizeof *cases && a; c++) {
    net n;
    if (net_make(dev, DLRT_OPT_ADAM, &n) < 0) {
      ok(0, "%s, %s: build", spec, cases[c].name);
      continue;
    }
    dlrt_spill_config sc = {.prefetch = cases[c].prefetch, .policy = cases[c].policy,
                            .host_budget = cases[c].disk ? 4096 : 0};
    rc = DLRT_ERR_OOM;
    for (int div = 4; div >= 2 && rc == DLRT_ERR_OOM; div--) {
      sc.device_budget = peak / (uint64_t)div;
      rc = dlrt_exec_set_spill(n.e, &sc);
    }
    tap_check(rc, "%s, %s: spilling within %llu bytes", spec, cases[c].name,
              (unsigned long long)sc.device_budget);
    dlrt_exec_set_clip_norm(n.e, 0.05f);
    int same = 1;
    for (int s = 0; s < STEPS && rc == DLRT_OK; s++) {
      if ((rc = grad_step(&n, s, got, count)) < 0) break;
      same = same && memcmp(want + s * count, got, (size_t)count * sizeof(float)) == 0;
    }
    tap_check(rc, "%s, %s: %d steps of two gradient runs, the sums read, written and applied",
              spec, cases[c].name, STEPS);
    ok(rc == DLRT_OK && same, "%s, %s: every step's %lld gradient sums equal the unlimited "
       "executor's bit for bit", spec, cases[c].name, (long long)count);
    size_t got_bytes = 0;
    unsigned char *b = rc == DLRT_OK ? net_state(&n, &got_bytes) : NULL;
    ok(b && ref_bytes == got_bytes && memcmp(a, b, ref_bytes) == 0,
       "%s, %s: parameters and optimizer state equal the unlimited executor's bit for bit",
       spec, cases[c].name);
    free(b);
    dlrt_spill_stats st;
    dlrt_exec_spill_stats(n.e, &st);
    dlrt_exec_info ni;
    dlrt_exec_info_get(n.e, &ni);
    /* The sums live on the device beside the pool, as accumulation's do
     * (the trainer takes their bytes off the budget it gives the pool),
     * with clipping's partial sums. */
    uint64_t sums = info.param_bytes + 64 * 512;
    ok(st.evictions + st.offloads > 0 && st.peak_resident <= sc.device_budget &&
           ni.measured_peak_bytes <= sc.device_budget + sums,
       "%s, %s: %llu evictions, %llu offloads; at most %llu bytes resident within %llu, "
       "%llu measured within it and the sums' %llu", spec, cases[c].name,
       (unsigned long long)st.evictions, (unsigned long long)st.offloads,
       (unsigned long long)st.peak_resident, (unsigned long long)sc.device_budget,
       (unsigned long long)ni.measured_peak_bytes, (unsigned long long)sums);
    if (cases[c].disk)
      ok(st.disk_written_bytes > 0 && st.disk_read_bytes > 0 && spill_dir_empty(),
         "%s, %s: %llu bytes through the disk, the spill file unnamed", spec, cases[c].name,
         (unsigned long long)st.disk_written_bytes);
    net_free(&n);
  }
  free(a), free(want), free(got);
}

typedef struct {
  const char *name;
  dlrt_offload_policy policy;
  int prefetch;
  int disk;  /* a host budget of one page: copies go to the spill file */
} config;

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  diag("device %s", spec);
  net ref;
  if (!tap_check(net_make(dev, DLRT_OPT_ADAM, &ref), "%s: the model builds", spec)) return;
  dlrt_exec_info info;
  dlrt_exec_info_get(ref.e, &info);
  tap_check(net_train(&ref, 0, STEPS, DLRT_RUN_TRAIN), "%s: %d steps without a budget", spec,
            STEPS);
  size_t ref_bytes;
  unsigned char *want = net_state(&ref, &ref_bytes);
  net_free(&ref);
  uint64_t peak = info.planned_peak_bytes;
  diag("%s: unlimited planned peak %llu bytes", spec, (unsigned long long)peak);

  static const config configs[] = {
      {"on demand", DLRT_OFFLOAD_NONE, 0, 0},
      {"prefetch 4", DLRT_OFFLOAD_NONE, 4, 0},
      {"activations offloaded", DLRT_OFFLOAD_ACTIVATIONS, 2, 0},
      {"optimizer on the host", DLRT_OFFLOAD_OPTIMIZER, 4, 0},
      {"all, prefetch 0", DLRT_OFFLOAD_ALL, 0, 0},
      {"all, through the disk", DLRT_OFFLOAD_ALL, 4, 1},
  };
  for (size_t c = 0; c < sizeof configs / sizeof *configs; c++) {
    const config *cf = &configs[c];
    net n;
    if (net_make(dev, DLRT_OPT_ADAM, &n) < 0) {
      ok(0, "%s, %s: build", spec, cf->name);
      continue;
    }
    /* The smallest of a quarter, a third and a half of the peak that the
     * policy can work in. */
    dlrt_spill_config sc = {.prefetch = cf->prefetch, .policy = cf->policy,
                            .host_budget = cf->disk ? 4096 : 0};
    int rc = DLRT_ERR_OOM;
    for (int div = 4; div >= 2 && rc == DLRT_ERR_OOM; div--) {
      sc.device_budget = peak / (uint64_t)div;
      rc = dlrt_exec_set_spill(n.e, &sc);
    }
    if (!tap_check(rc, "%s, %s: spilling within %llu bytes (%.0f%% of the peak)", spec,
                   cf->name, (unsigned long long)sc.device_budget,
                   100.0 * (double)sc.device_budget / (double)peak)) {
      net_free(&n);
      continue;
    }
    rc = net_train(&n, 0, STEPS, DLRT_RUN_TRAIN);
    tap_check(rc, "%s, %s: %d steps", spec, cf->name, STEPS);
    ok(!cf->disk || spill_dir_empty(), "%s, %s: the spill file has no name in %s", spec,
       cf->name, spill_dir);
    size_t got_bytes = 0;
    unsigned char *got = rc == DLRT_OK ? net_state(&n, &got_bytes) : NULL;
    ok(got && got_bytes == ref_bytes && memcmp(got, want, ref_bytes) == 0,
       "%s, %s: parameters and optimizer state equal the unlimited run's bit for bit", spec,
       cf->name);
    free(got);
    dlrt_spill_stats st;
    dlrt_exec_spill_stats(n.e, &st);
    dlrt_exec_info ni;
    dlrt_exec_info_get(n.e, &ni);
    ok(st.evictions + st.offloads > 0 && st.spilled_bytes > 0 && st.fetched_bytes > 0,
       "%s, %s: %llu evictions, %llu offloads, %llu bytes out, %llu back", spec, cf->name,
       (unsigned long long)st.evictions, (unsigned long long)st.offloads,
       (unsigned long long)st.spilled_bytes, (unsigned long long)st.fetched_bytes);
    ok(st.peak_resident <= sc.device_budget && ni.measured_peak_bytes <= sc.device_budget,
       "%s, %s: at most %llu bytes resident, %llu measured by the allocator, within %llu",
       spec, cf->name, (unsigned long long)st.peak_resident,
       (unsigned long long)ni.measured_peak_bytes, (unsigned long long)sc.device_budget);
    if (cf->prefetch > 0)
      ok(st.prefetch_hits > 0, "%s, %s: %llu prefetch hits, %llu misses", spec, cf->name,
         (unsigned long long)st.prefetch_hits, (unsigned long long)st.prefetch_misses);
    if (cf->disk)
      ok(st.disk_written_bytes > 0 && st.disk_read_bytes > 0,
         "%s, %s: %llu bytes written to disk, %llu read back", spec, cf->name,
         (unsigned long long)st.disk_written_bytes, (unsigned long long)st.disk_read_bytes);
    if (cf->disk)
      ok(st.spilled_to_disk_bytes > 0 && st.spilled_to_disk_bytes <= st.spilled_bytes &&
             st.spilled_to_disk_bytes <= st.disk_written_bytes,
         "%s, %s: %llu of the %llu bytes spilled went to disk (%llu disk writes in all)", spec,
         cf->name, (unsigned long long)st.spilled_to_disk_bytes,
         (unsigned long long)st.spilled_bytes, (unsigned long long)st.disk_written_bytes);
    if (cf->disk)
      ok(st.peak_host <= sc.host_budget, "%s, %s: at most %llu bytes of host copies, within %llu",
         spec, cf->name, (unsigned long long)st.peak_host, (unsigned long long)sc.host_budget);
    net_free(&n);
  }

  grad_runs(dev, spec, peak);

  /* Forward runs only read the parameters: once on the host they are
   * clean, and making room drops them without writing them back. */
  net f;
  if (net_make(dev, DLRT_OPT_SGD, &f) == DLRT_OK) {
    /* The updates on the host: the budget can go below the parameters. */
    dlrt_spill_config sc = {.policy = DLRT_OFFLOAD_OPTIMIZER};
    int rc = DLRT_ERR_OOM;
    for (int div = 16; div >= 2 && rc == DLRT_ERR_OOM; div--) {
      sc.device_budget = peak / (uint64_t)div;
      rc = dlrt_exec_set_spill(f.e, &sc);
    }
    tap_check(rc, "%s: forward runs within %llu bytes", spec,
              (unsigned long long)sc.device_budget);
    dlrt_spill_stats before, after;
    net_train(&f, 0, 1, DLRT_RUN_FORWARD);
    dlrt_exec_spill_stats(f.e, &before);
    tap_check(net_train(&f, 1, 4, DLRT_RUN_FORWARD), "%s: three more forward runs", spec);
    dlrt_exec_spill_stats(f.e, &after);
    ok(after.dropped_clean > before.dropped_clean,
       "%s: clean copies dropped without a write-back (%llu)", spec,
       (unsigned long long)(after.dropped_clean - before.dropped_clean));
    /* Off again: back on the device, and training goes on as unlimited. */
    dlrt_spill_config off = {0};
    tap_check(dlrt_exec_set_spill(f.e, &off), "%s: spilling off again", spec);
    tap_check(net_train(&f, 4, 5, DLRT_RUN_TRAIN), "%s: a training step after it", spec);
    net_free(&f);
  }

  /* A budget below what one node needs. */
  net small;
  if (net_make(dev, DLRT_OPT_ADAM, &small) == DLRT_OK) {
    dlrt_spill_config sc = {.device_budget = 4096};
    is_status(dlrt_exec_set_spill(small.e, &sc), DLRT_ERR_OOM,
              "%s: a budget of 4 KiB is refused", spec);
    ok(strstr(dlrt_last_error(), "smallest budget that fits") &&
           strstr(dlrt_last_error(), "0.0 MiB"),
       "%s: the message gives the budget and the smallest that fits: %s", spec,
       dlrt_last_error());
    tap_check(net_train(&small, 0, 1, DLRT_RUN_TRAIN), "%s: the executor still trains", spec);
    net_free(&small);
  }
  char summary[8192];
  dlrt_mem_summary(dev, summary, sizeof summary);
  ok(strstr(summary, "spilling (unified-memory emulation)") && strstr(summary, "evictions"),
     "%s: dlrt_mem_summary reports the spilling", spec);
  free(want);
}

int main(void) {
  tap_tempdir("dlrt-spill-test", dir, sizeof dir);
  snprintf(model_path, sizeof model_path, "%s/small.model", dir);
  snprintf(spill_dir, sizeof spill_dir, "%s/spill", dir);
  FILE *m = fopen(model_path, "w");
  if (!m || fputs("linear 64\nrelu\nlinear 48\nrelu\n", m) < 0 || fclose(m) != 0)
    bail_out("cannot write %s", model_path);
  if (mkdir(spill_dir, 0700) != 0) bail_out("mkdir %s: %s", spill_dir, strerror(errno));
  setenv("DLRT_SPILL_DIR", spill_dir, 1);
  setenv("DLRT_SPILL_CHECK", "1", 1); /* recount the budget at every allocation */
  if (dlrt_init() < 0 || dlrt_set_cpu_threads(1) < 0) bail_out("%s", dlrt_last_error());
  tap_for_each_device(run_device, NULL);
  dlrt_shutdown();
  tap_remove_tree(dir);
  return done_testing();
}
