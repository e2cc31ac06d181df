/*
 * test-accum.c — gradient accumulation: on the CPU with one thread, batch 64
 * with 4 micro-batches per update gives the parameters of batch 256 (the
 * same samples per update: the loader's order does not depend on the batch)
 * within 1e-5 relative: after 20 updates for SGD with momentum, after 2 for
 * Adam (and within 1e-3 after 20: see ADAM_UPDATES);
 * clipping sees the accumulated gradient; the accumulators are planned;
 * data parallelism over two replicas (dlrt_trainer_set_devices) equals one
 * device likewise; misuse is refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlrt.h"
#include "tap.h"

enum { IMAGES = 5120 };

static char dir[64];

/* Data parallel in train_on: the devices and each one's rows (NULL: none). */
static dlrt_device_t *dp_devs[2];
static const int64_t *dp_split;

/* Adam's updates compared within 1e-5. Over a whole epoch Adam's runs part
 * for reasons that are not accumulation's: where a gradient is near zero
 * (the generated images' border pixels, or a sum that cancels) its update
 * m / (sqrt(v) + eps) turns a rounding-level difference, such as the order
 * a GEMM of 64 or 256 columns sums in, into a sizeable step, and 20 steps
 * compound it (the relative difference after 20 updates is 1.8e-7 to 1.2e-3
 * depending on the data's seed and on which exp the softmax uses; SGD's
 * stays near 3e-7). After 2 updates both moments have been used and the
 * runs still agree to rounding. */
enum { ADAM_UPDATES = 2 };

/* Trains `updates` updates of 256 samples (0: one epoch, 20 updates) and
 * saves the checkpoint. */
static int train_updates(dlrt_device_t *dev, const dlrt_dataset *d, dlrt_optimizer opt,
                         int64_t batch, int accum, float clip, int64_t updates,
                         const char *name, dlrt_exec_info *info) {
  dlrt_trainer_config c = {.model = "mlp", .batch = batch, .opt = opt, .seed = 7,
                           .accum = accum, .clip_norm = clip};
  dlrt_trainer_t *t;
  int rc = dlrt_trainer_create(dev, &c, 28, 28, 10, &t);
  if (rc < 0) return rc;
  if (dp_split && (rc = dlrt_trainer_set_devices(t, dp_devs, 2, dp_split)) < 0) {
    dlrt_trainer_destroy(t);
    return rc;
  }
  dlrt_epoch_stats st;
  char path[128];
  snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
  if ((rc = dlrt_trainer_epoch_steps(t, d, 0, updates, NULL, NULL, &st)) == DLRT_OK &&
      (rc = dlrt_trainer_info(t, info)) == DLRT_OK)
    rc = dlrt_trainer_save(t, path, 1);
  dlrt_trainer_destroy(t);
  return rc;
}

static int train(dlrt_device_t *dev, const dlrt_dataset *d, dlrt_optimizer opt, int64_t batch,
                 int accum, float clip, const char *name, dlrt_exec_info *info) {
  return train_updates(dev, d, opt, batch, accum, clip, 0, name, info);
}

/* The largest relative difference ||a - b|| / ||a|| (L2 norms) over the
 * parameters of two checkpoints, per tensor (so a small bias is not measured
 * against a large weight); the optimizer state is left out. The largest
 * element difference over the tensor's largest element goes to the log. */
static double max_rel_diff(const char *a_name, const char *b_name) {
  char pa[128], pb[128];
  snprintf(pa, sizeof pa, "%s/%s.safetensors", dir, a_name);
  snprintf(pb, sizeof pb, "%s/%s.safetensors", dir, b_name);
  dlrt_host_tensor *a, *b;
  int na, nb;
  if (dlrt_safetensors_load(pa, &a, &na, NULL) < 0) return INFINITY;
  if (dlrt_safetensors_load(pb, &b, &nb, NULL) < 0) {
    dlrt_safetensors_free(a, na, NULL);
    return INFINITY;
  }
  double worst = na == nb ? 0 : INFINITY;
  const char *worst_name = "";
  double worst_elem = 0;
  for (int i = 0; i < na && i < nb; i++) {
    if (strcmp(a[i].name, b[i].name) != 0 || a[i].bytes != b[i].bytes) worst = INFINITY;
    if (a[i].dtype != DLRT_F32 || strstr(a[i].name, ".exp_avg") ||
        strstr(a[i].name, ".momentum") || worst == INFINITY)
      continue;
    const float *x = a[i].data, *y = b[i].data;
    size_t n = a[i].bytes / 4;
    double scale = 0, diff = 0, top = 0, top_diff = 0;
    for (size_t k = 0; k < n; k++) {
      double dk = (double)x[k] - y[k];
      scale += (double)x[k] * x[k];
      diff += dk * dk;
      top = fmax(top, fabs(x[k]));
      top_diff = fmax(top_diff, fabs(dk));
    }
    if (scale > 0 && sqrt(diff / scale) > worst) {
      worst = sqrt(diff / scale);
      worst_name = a[i].name;
      worst_elem = top > 0 ? top_diff / top : 0;
    }
  }
  diag("%s vs %s: largest relative difference %.3g (L2) in %s; elementwise %.3g of its "
       "largest value", a_name, b_name, worst, worst_name, worst_elem);
  dlrt_safetensors_free(a, na, NULL);
  dlrt_safetensors_free(b, nb, NULL);
  return worst;
}

int main(void) {
  tap_tempdir("dlrt-accum", dir, sizeof dir);
  if (dlrt_init() < 0 || dlrt_set_cpu_threads(1) < 0) bail_out("%s", dlrt_last_error());
  dlrt_device_t *dev;
  if (dlrt_device_open("cpu", &dev) < 0) bail_out("%s", dlrt_last_error());
  dlrt_dataset d;
  if (dlrt_dataset_generate(IMAGES, 10, 3, &d) < 0) bail_out("%s", dlrt_last_error());

  dlrt_optimizer opts[2] = {dlrt_optimizer_defaults(DLRT_OPT_SGD),
                            dlrt_optimizer_defaults(DLRT_OPT_ADAM)};
  opts[0].momentum = 0.9f;
  opts[0].lr = 0.05f;
  for (int o = 0; o < 2; o++) {
    const char *name = dlrt_optimizer_name(opts[o].kind);
    char whole[32], acc[32], plain[32];
    snprintf(whole, sizeof whole, "%s-256", name);
    snprintf(acc, sizeof acc, "%s-64x4", name);
    snprintf(plain, sizeof plain, "%s-64", name);
    dlrt_exec_info iw, ia, ip;
    tap_check(train(dev, &d, opts[o], 256, 1, 0, whole, &iw), "%s: batch 256, 20 updates", name);
    tap_check(train(dev, &d, opts[o], 64, 4, 0, acc, &ia), "%s: batch 64 x 4 accumulated", name);
    tap_check(train(dev, &d, opts[o], 64, 1, 0, plain, &ip), "%s: batch 64, no accumulation",
              name);
    is_int(ia.steps, 20, "%s: accumulation makes 20 updates of 80 micro-batches", name);
    is_int(ip.steps, 80, "%s: without it, 80 updates", name);
    double rel = max_rel_diff(whole, acc);
    if (opts[o].kind == DLRT_OPT_ADAM) {
      ok(rel <= 1e-3, "%s: after 20 updates, batch 64 x 4 equals batch 256 within 1e-3 "
         "relative (%.3g)", name, rel);
      char whole2[32], acc2[32];
      snprintf(whole2, sizeof whole2, "%s-256-u%d", name, ADAM_UPDATES);
      snprintf(acc2, sizeof acc2, "%s-64x4-u%d", name, ADAM_UPDATES);
      dlrt_exec_info i2w, i2a;
      tap_check(train_updates(dev, &d, opts[o], 256, 1, 0, ADAM_UPDATES, whole2, &i2w),
                "%s: batch 256, %d updates", name, ADAM_UPDATES);
      tap_check(train_updates(dev, &d, opts[o], 64, 4, 0, ADAM_UPDATES, acc2, &i2a),
                "%s: batch 64 x 4, %d updates", name, ADAM_UPDATES);
      is_int(i2a.steps, ADAM_UPDATES, "%s: %d updates of 4 micro-batches", name, ADAM_UPDATES);
      rel = max_rel_diff(whole2, acc2);
      ok(rel <= 1e-5, "%s: after %d updates, batch 64 x 4 equals batch 256 within 1e-5 "
         "relative (%.3g)", name, ADAM_UPDATES, rel);
    } else {
      ok(rel <= 1e-5, "%s: batch 64 x 4 equals batch 256 within 1e-5 relative (%.3g)", name,
         rel);
    }
    double apart = max_rel_diff(whole, plain);
    ok(apart > 1e-2, "%s: batch 64 without accumulation differs (%.3g): the check can fail",
       name, apart);
    ok(ia.planned_peak_bytes >= ip.planned_peak_bytes + ia.param_bytes,
       "%s: the accumulators (%llu bytes) are in the planned peak", name,
       (unsigned long long)ia.param_bytes);
    ok(ia.measured_peak_bytes <= ia.planned_peak_bytes &&
           ia.measured_peak_bytes * 100 >= ia.planned_peak_bytes * 95,
       "%s: measured peak %llu within 5%% below the planned %llu", name,
       (unsigned long long)ia.measured_peak_bytes, (unsigned long long)ia.planned_peak_bytes);
  }

  /* Clipping applies to the accumulated (mean) gradient. */
  dlrt_exec_info info;
  tap_check(train(dev, &d, opts[0], 256, 1, 0.5f, "clip-256", &info), "clip 0.5, batch 256");
  tap_check(train(dev, &d, opts[0], 64, 4, 0.5f, "clip-64x4", &info), "clip 0.5, batch 64 x 4");
  double rel = max_rel_diff("clip-256", "clip-64x4");
  ok(rel <= 1e-5, "clipped: batch 64 x 4 equals batch 256 within 1e-5 relative (%.3g)", rel);
  ok(max_rel_diff("clip-256", "sgd-256") > 1e-3, "clipping at 0.5 changed the result");

  /* Data parallel over two replicas (the CPU twice), rows 100 and 156 of each
   * batch of 256: the combination weighted by rows gives the batch's
   * gradient, with and without clipping. */
  static const int64_t split[2] = {100, 156};
  dp_devs[0] = dp_devs[1] = dev;
  dp_split = split;
  tap_check(train(dev, &d, opts[0], 256, 1, 0, "dp-sgd", &info), "sgd: two replicas, 100 + 156 rows");
  rel = max_rel_diff("sgd-256", "dp-sgd");
  ok(rel <= 1e-5, "sgd: two replicas equal one device within 1e-5 relative (%.3g)", rel);
  /* Adam turns a rounding-level difference in a near-zero gradient (border
   * pixels) into a full step: with rows 100 + 156 each replica's mean (1/100)
   * rounds otherwise than the batch's (1/256), so only an even split, whose
   * scalings are powers of two, is held to 1e-5; the uneven one to 1e-3. */
  tap_check(train(dev, &d, opts[1], 256, 1, 0, "dp-adam", &info), "adam: rows 100 + 156");
  rel = max_rel_diff("adam-256", "dp-adam");
  ok(rel <= 1e-3, "adam, uneven: two replicas equal one device within 1e-3 relative (%.3g)",
     rel);
  static const int64_t even[2] = {128, 128};
  dp_split = even;
  tap_check(train(dev, &d, opts[1], 256, 1, 0, "dp-adam-even", &info), "adam: rows 128 + 128");
  rel = max_rel_diff("adam-256", "dp-adam-even");
  ok(rel <= 1e-5, "adam, even: two replicas equal one device within 1e-5 relative (%.3g)", rel);
  dp_split = split;
  tap_check(train(dev, &d, opts[0], 256, 1, 0.5f, "dp-clip", &info), "clip 0.5: two replicas");
  rel = max_rel_diff("clip-256", "dp-clip");
  ok(rel <= 1e-5, "clipped: two replicas equal one device within 1e-5 relative (%.3g)", rel);
  static const int64_t bad_split[2] = {100, 100};
  dp_split = bad_split;
  is_status(train(dev, &d, opts[0], 256, 1, 0, "dp-bad", &info), DLRT_ERR_INVALID_ARG,
            "a split that does not add up to the batch is refused");
  dp_split = NULL;

  /* Misuse. */
  dlrt_trainer_config c = {.model = "mlp", .batch = 64, .opt = opts[1], .accum = 200};
  dlrt_trainer_t *t;
  tap_check(dlrt_trainer_create(dev, &c, 28, 28, 10, &t), "accum 200");
  dlrt_epoch_stats st;
  is_status(dlrt_trainer_epoch(t, &d, 0, NULL, NULL, &st), DLRT_ERR_INVALID_ARG,
            "accum 200 x 64 > 5120 images: refused");
  ok(strstr(dlrt_last_error(), "micro-batches") != NULL, "and says why: %s", dlrt_last_error());
  dlrt_trainer_destroy(t);
  c.accum = -1;
  is_status(dlrt_trainer_create(dev, &c, 28, 28, 10, &t), DLRT_ERR_INVALID_ARG,
            "accum -1 is refused");

  dlrt_dataset_free(&d);
  dlrt_shutdown();
  tap_remove_tree(dir);
  return done_testing();
}
