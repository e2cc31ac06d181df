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
 * A small GPT checkpointed by its blocks (DLRT_CHECKPOINT_MARKS: the
 * segments end at the residual stream dlrt_gpt_build marks) trains as the
 * plain run does, bit for bit, with a lower planned peak; a graph without
 * marks refuses that setting.
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

/* A GPT of 3 blocks on windows of 16 tokens: the plain run against one
 * checkpointed with `every` (DLRT_CHECKPOINT_MARKS: a segment per block). */
static void check_gpt(dlrt_device_t *dev, const char *spec, int every, const char *what) {
  enum { B = 3, T = 16, V = 64 };
  static const dlrt_gpt_config cfg = {.layers = 3, .heads = 2, .embd = 32, .context = T,
                                      .vocab = V};
  dlrt_graph_t *g = NULL;
  dlrt_exec_t *e[2] = {NULL, NULL};
  dlrt_tensor_t *tokens = NULL, *targets = NULL, *logits = NULL, *loss = NULL;
  dlrt_host_tensor *p[2] = {NULL, NULL};
  int n[2] = {0, 0};
  float losses[2][STEPS];
  int64_t ts[2] = {B, T}, ls[1] = {B * T};
  int rc = dlrt_graph_create(&g);
  if (rc == DLRT_OK) {
    tokens = dlrt_input(g, "tokens", DLRT_I32, 2, ts);
    targets = dlrt_input(g, "targets", DLRT_I32, 1, ls);
    rc = dlrt_gpt_build(g, &cfg, tokens, &logits);
  }
  if (rc == DLRT_OK) {
    loss = dlrt_keep(g, dlrt_cross_entropy(g, logits, targets, 0.0f));
    dlrt_optimizer adamw = dlrt_optimizer_defaults(DLRT_OPT_ADAMW);
    if ((rc = dlrt_graph_backward(g, loss)) == DLRT_OK) rc = dlrt_graph_optimize(g, &adamw);
  }
  for (int k = 0; k < 2 && rc == DLRT_OK; k++) rc = dlrt_exec_create(g, dev, 11, &e[k]);
  if (rc == DLRT_OK) rc = dlrt_exec_set_checkpointing(e[1], every);
  int32_t x[B * T], y[B * T];
  for (int k = 0; k < 2 && rc == DLRT_OK; k++) {
    for (int s = 0; s < STEPS && rc == DLRT_OK; s++) {
      for (int i = 0; i < B * T; i++) x[i] = (i * 13 + s * 5) % V, y[i] = (i * 7 + s + 1) % V;
      if ((rc = dlrt_exec_write(e[k], tokens, x, sizeof x)) < 0 ||
          (rc = dlrt_exec_write(e[k], targets, y, sizeof y)) < 0 ||
          (rc = dlrt_exec_run(e[k], DLRT_RUN_TRAIN)) < 0)
        break;
      rc = dlrt_exec_read(e[k], loss, &losses[k][s], sizeof losses[k][s]);
    }
    if (rc == DLRT_OK) rc = dlrt_exec_export(e[k], 1, &p[k], &n[k]);
  }
  if (tap_check(rc, "%s, gpt, %s: builds and trains", spec, what)) {
    is_mem(losses[1], losses[0], sizeof losses[0], "%s, gpt, %s: the losses of %d steps equal "
           "the plain run's bit for bit", spec, what, STEPS);
    int same = n[0] == n[1] && n[0] > 0;
    for (int i = 0; same && i < n[0]; i++)
      same = p[0][i].bytes == p[1][i].bytes && memcmp(p[0][i].data, p[1][i].data,
                                                      p[0][i].bytes) == 0;
    ok(same, "%s, gpt, %s: the %d parameters and optimizer states equal bit for bit", spec,
       what, n[0]);
    dlrt_exec_info ia, ib;
    if (tap_check(dlrt_exec_info_get(e[0], &ia), "info") &&
        tap_check(dlrt_exec_info_get(e[1], &ib), "info"))
      ok(ib.planned_peak_bytes < ia.planned_peak_bytes, "%s, gpt, %s: planned peak %.3f MiB, "
         "under the plain %.3f MiB", spec, what, (double)ib.planned_peak_bytes / 1048576.0,
         (double)ia.planned_peak_bytes / 1048576.0);
  }
  dlrt_safetensors_free(p[0], n[0], NULL);
  dlrt_safetensors_free(p[1], n[1], NULL);
  dlrt_exec_destroy(e[0]);
  dlrt_exec_destroy(e[1]);
  dlrt_graph_destroy(g);
}

/* A graph without marks refuses DLRT_CHECKPOINT_MARKS, saying what to do. */
static void check_no_marks(dlrt_device_t *dev, const char *spec, const char *dir) {
  model_case mc = {"no marks", "cnn", 8, 28, 0};
  model m = {0};
  dlrt_exec_t *e = NULL;
  int rc = build(&mc, dir, &m);
  if (rc == DLRT_OK) rc = dlrt_exec_create(m.g, dev, 7, &e);
  if (tap_check(rc, "%s, cnn: builds", spec)) {
    is_status(dlrt_exec_set_checkpointing(e, DLRT_CHECKPOINT_MARKS), DLRT_ERR_INVALID_ARG,
              "%s, cnn: DLRT_CHECKPOINT_MARKS without marks is refused", spec);
    ok(strstr(dlrt_last_error(), "dlrt_checkpoint_mark") != NULL, "and says why: %s",
       dlrt_last_error());
  }
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(m.g);
}

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
  check_gpt(dev, spec, DLRT_CHECKPOINT_MARKS, "a segment per block");
  check_gpt(dev, spec, DLRT_CHECKPOINT_SQRT, "sqrt segments");
  check_no_marks(dev, spec, dir);
}

int main(void) {
  char dir[256];
  if (!tap_tempdir("test-checkpoint", dir, sizeof dir)) bail_out("no temporary folder");
  tap_for_each_device(run_device, dir);
  tap_remove_tree(dir);
  dlrt_shutdown();
  return done_testing();
}
