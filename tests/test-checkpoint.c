/*
 * test-checkpoint.c — gradient checkpointing against the plain run, on every
 * device present (tap_for_each_device). Two executors of one graph start from
 * the same parameters and train on the same batches, one of them
 * checkpointed; their losses, evaluation logits and parameters after
 * three Adam steps must be equal bit for bit. The models cover what the
 * chunked blocks of chunk.c do: the cnn preset (both convolution segments
 * a chunk of images at a time, the second one's backward block split in
 * two, batches that are not a whole number of chunks), overlapping pooling
 * windows (the gather gradient, not the scatter), strides and padding, a
 * pooling window over 128 places (the pooled output as the ReLU's mask),
 * two convolutions in one segment (not chunked, still exact), and segments
 * of every length. The cnn's planned peak must fall with sqrt segments
 * (test-plan.sh checks the measured peak at batch 256, where the bar is).
 * Points: computed at run time (done_testing).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

enum { STEPS = 3, CLASSES = 10 };

typedef struct {
  const char *what;
  const char *spec; /* a preset, or model file lines */
  int64_t batch, side;
  int every;        /* checkpoint segment length, or DLRT_CHECKPOINT_SQRT */
} model_case;

typedef struct {
  dlrt_graph_t *g;
  dlrt_tensor_t *x, *labels, *loss, *logits;
} model;

/* Builds `spec` (a preset name, or lines written to a file in `dir`) on a
 * batch x 1 x side x side input, with cross-entropy and Adam. */
static int build(const model_case *mc, const char *dir, model *m) {
  char path[512];
  const char *spec = mc->spec;
  if (strchr(spec, '\n')) {
    snprintf(path, sizeof path, "%s/model", dir);
    FILE *f = fopen(path, "w");
    if (!f || fputs(spec, f) < 0 || fclose(f) != 0) return DLRT_ERR_IO;
    spec = path;
  }
  int rc = dlrt_graph_create(&m->g);
  if (rc < 0) return rc;
  int64_t xs[4] = {mc->batch, 1, mc->side, mc->side}, ls[1] = {mc->batch};
  m->x = dlrt_input(m->g, "x", DLRT_F32, 4, xs);
  m->labels = dlrt_input(m->g, "labels", DLRT_I32, 1, ls);
  if ((rc = dlrt_model_build(m->g, spec, m->x, CLASSES, &m->logits)) < 0) return rc;
  dlrt_keep(m->g, m->logits);
  m->loss = dlrt_keep(m->g, dlrt_cross_entropy(m->g, m->logits, m->labels, 0.0f));
  dlrt_optimizer adam = dlrt_optimizer_defaults(DLRT_OPT_ADAM);
  if ((rc = dlrt_graph_backward(m->g, m->loss)) < 0) return rc;
  return dlrt_graph_optimize(m->g, &adam);
}

/* Three training steps and one evaluation on fixed data; fills losses,
 * logits and the parameters (exported). */
static int train(dlrt_exec_t *e, const model *m, const model_case *mc, float *losses,
                 float *logits, dlrt_host_tensor **params, int *n_params) {
  size_t pixels = (size_t)(mc->batch * mc->side * mc->side);
  float *x = malloc(pixels * sizeof *x);
  int32_t *labels = malloc((size_t)mc->batch * sizeof *labels);
  int rc = x && labels ? DLRT_OK : DLRT_ERR_OOM;
  for (int s = 0; s < STEPS && rc == DLRT_OK; s++) {
    uint32_t state = 12345u + 977u * (uint32_t)s;
    for (size_t i = 0; i < pixels; i++) {
      state = state * 1664525u + 1013904223u;
      x[i] = (float)(state >> 8) / 16777216.0f - 0.3f;
    }
    for (int64_t i = 0; i < mc->batch; i++) labels[i] = (int32_t)((i * 7 + s) % CLASSES);
    if ((rc = dlrt_exec_write(e, m->x, x, pixels * sizeof *x)) < 0 ||
        (rc = dlrt_exec_write(e, m->labels, labels, (size_t)mc->batch * sizeof *labels)) < 0 ||
        (rc = dlrt_exec_run(e, DLRT_RUN_TRAIN)) < 0)
      break;
    rc = dlrt_exec_read(e, m->loss, &losses[s], sizeof *losses);
  }
  if (rc == DLRT_OK && (rc = dlrt_exec_run(e, DLRT_RUN_FORWARD)) == DLRT_OK)
    rc = dlrt_exec_read(e, m->logits, logits, (size_t)(mc->batch * CLASSES) * sizeof *logits);
  if (rc == DLRT_OK) rc = dlrt_exec_export(e, 1, params, n_params);
  free(x);
  free(labels);
  return rc;
}

static void check_case(dlrt_device_t *dev, const char *spec_name, const model_case *mc,
                       const char *dir) {
  model m = {0};
  dlrt_exec_t *plain = NULL, *checked = NULL;
  dlrt_host_tensor *pa = NULL, *pb = NULL;
  int na = 0, nb = 0;
  float la[STEPS], lb[STEPS];
  size_t logit_bytes = (size_t)(mc->batch * CLASSES) * sizeof(float);
  float *ya = malloc(logit_bytes), *yb = malloc(logit_bytes);
  int rc = ya && yb ? build(mc, dir, &m) : DLRT_ERR_OOM;
  if (rc == DLRT_OK) rc = dlrt_exec_create(m.g, dev, 7, &plain);
  if (rc == DLRT_OK) rc = dlrt_exec_create(m.g, dev, 7, &checked);
  if (rc == DLRT_OK) rc = dlrt_exec_set_checkpointing(checked, mc->every);
  if (rc == DLRT_OK) rc = train(plain, &m, mc, la, ya, &pa, &na);
  if (rc == DLRT_OK) rc = train(checked, &m, mc, lb, yb, &pb, &nb);
  if (!tap_check(rc, "%s, %s: builds and trains", spec_name, mc->what)) goto done;
  is_mem(lb, la, sizeof la, "%s, %s: the losses of %d steps equal the plain run's bit for bit",
         spec_name, mc->what, STEPS);
  is_mem(yb, ya, logit_bytes, "%s, %s: evaluation logits equal bit for bit", spec_name,
         mc->what);
  int same = na == nb && na > 0;
  for (int i = 0; same && i < na; i++)
    same = pa[i].bytes == pb[i].bytes && strcmp(pa[i].name, pb[i].name) == 0 &&
           memcmp(pa[i].data, pb[i].data, pa[i].bytes) == 0;
  ok(same, "%s, %s: the %d parameters and optimizer states equal bit for bit", spec_name,
     mc->what, na);
  if (strcmp(mc->spec, "cnn") == 0 && mc->every == DLRT_CHECKPOINT_SQRT) {
    dlrt_exec_info ia, ib;
    rc = dlrt_exec_info_get(plain, &ia);
    if (rc == DLRT_OK) rc = dlrt_exec_info_get(checked, &ib);
    if (tap_check(rc, "%s, %s: executor info", spec_name, mc->what))
      ok(ib.planned_peak_bytes < ia.planned_peak_bytes,
         "%s, %s: planned peak %.1f MiB, under the plain %.1f MiB", spec_name, mc->what,
         (double)ib.planned_peak_bytes / 1048576.0, (double)ia.planned_peak_bytes / 1048576.0);
  }
done:
  dlrt_safetensors_free(pa, na, NULL);
  dlrt_safetensors_free(pb, nb, NULL);
  dlrt_exec_destroy(plain);
  dlrt_exec_destroy(checked);
  dlrt_graph_destroy(m.g);
  free(ya);
  free(yb);
}

static const model_case cases[] = {
    {"cnn preset, batch 96, sqrt segments", "cnn", 96, 28, DLRT_CHECKPOINT_SQRT},
    {"cnn preset, batch 70 (a last chunk of 6), sqrt segments", "cnn", 70, 28,
     DLRT_CHECKPOINT_SQRT},
    {"overlapping 3x3 windows, stride 2, padding", "conv2d 8 3 stride=2 pad=1\nrelu\n"
     "maxpool 3 stride=2\nconv2d 12 3 pad=1\nrelu\nmaxpool 2\n", 80, 28, 4},
    {"a 12x12 window (the pooled output as the mask)", "conv2d 6 5\nrelu\nmaxpool 12\n",
     72, 28, 4},
    {"two convolutions in one segment", "conv2d 8 3 pad=1\nrelu\nconv2d 8 3 pad=1\nrelu\n"
     "maxpool 2\n", 48, 16, 7},
};

/* ctx: the temporary folder the model files go to. */
static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  const char *dir = ctx;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(dev, spec, &cases[i], dir);
  /* Every segment length of the cnn (chunked where a segment is one
   * convolution block, plain recomputation elsewhere). */
  for (int every = 1; every <= 16; every += 3) {
    char what[64];
    snprintf(what, sizeof what, "cnn preset, batch 40, segments of %d", every);
    model_case mc = {what, "cnn", 40, 28, every};
    check_case(dev, spec, &mc, dir);
  }
}

int main(void) {
  char dir[256];
  if (!tap_tempdir("test-checkpoint", dir, sizeof dir)) bail_out("no temporary folder");
  tap_for_each_device(run_device, dir);
  tap_remove_tree(dir);
  dlrt_shutdown();
  return done_testing();
}
