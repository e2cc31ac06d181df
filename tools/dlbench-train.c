/* dlbench-train.c — the suites that train: train (steps of the mlp and
 * cnn models), spill (the same under device budgets, beside an unlimited
 * trainer) and loader (the data loader's images/s against its workers). */
#include "config.h"

#include <string.h>

#include "dlbench-cases.h"

/* ---------------------------------------------------------------- train */

typedef struct {
  dlrt_trainer_t *trainer;
  dlrt_dataset data;
  int epoch;
} train_op;

/* One timed run is one epoch over a small generated set (a few steps). */
static int queue_epoch(void *p) {
  train_op *t = p;
  dlrt_epoch_stats stats;
  return dlrt_trainer_epoch(t->trainer, &t->data, t->epoch++, NULL, NULL, &stats);
}

static int train_model(bench_ctx *ctx, const char *model) {
  const int64_t batch = ctx->opt->quick ? 32 : 64, steps = ctx->opt->quick ? 3 : 10;
  case_id id = {"train", "steps/s", "", (double)steps};
  snprintf(id.name, sizeof id.name, "%s/b%lld", model, (long long)batch);
  if (!bench_wanted(ctx, "train", id.name))
    return DLRT_OK;
  train_op t = {0};
  dlrt_trainer_config cfg = {.model = model, .batch = batch,
                             .opt = dlrt_optimizer_defaults(DLRT_OPT_ADAM), .seed = 1};
  bench_row *row = NULL;
  dlrt_exec_info info;
  int rc = dlrt_dataset_generate(batch * steps, 10, 1, &t.data);
  if (rc == DLRT_OK)
    rc = dlrt_trainer_create(ctx->dev, &cfg, t.data.height, t.data.width, t.data.classes,
                             &t.trainer);
  if (rc != DLRT_OK) {
    bench_fail(ctx, "train", id.name, "cannot set up the trainer", rc);
  } else if (measure_dlrt(ctx, &id, NULL, queue_epoch, &t, &row) == DLRT_OK && row) {
    if ((rc = dlrt_trainer_info(t.trainer, &info)) != DLRT_OK) {
      bench_fail(ctx, "train", id.name, "cannot read the trainer's figures", rc);
    } else {
      row->images_per_s = row->median * (double)batch;
      row->planned_peak = (double)info.planned_peak_bytes;
      row->measured_peak = (double)info.measured_peak_bytes;
      snprintf(row->note, sizeof row->note, "one run: an epoch of %lld steps, Adam",
               (long long)steps);
    }
  }
  dlrt_trainer_destroy(t.trainer);
  dlrt_dataset_free(&t.data);
  return rc;
}

int suite_train(bench_ctx *ctx) {
  static const char *const models[] = {"mlp", "cnn"};
  for (size_t i = 0; i < sizeof models / sizeof *models; i++)
    train_model(ctx, models[i]); /* a failed model is counted; the other still runs */
  dlrt_mem_empty_cache(ctx->dev);
  return 0;
}

/* ---------------------------------------------------------------- spill */

/* A trainer of `model` at batch 64 on generated data: unlimited (budget
 * 0), or spilling within `budget` bytes, prefetching `prefetch` nodes
 * ahead, with the optimizer on the host (its update would otherwise need
 * parameter, state and gradient on the device at once). The cnn spills
 * with sqrt checkpointing: its convolution segments then run in chunks of
 * images, and in slices below what their whole-batch tensors need. */
static int spill_trainer(bench_ctx *ctx, const char *model, uint64_t budget, int prefetch,
                         train_op *t) {
  const int64_t batch = 64, steps = ctx->opt->quick ? 3 : 10;
  dlrt_trainer_config cfg = {.model = model, .batch = batch,
                             .opt = dlrt_optimizer_defaults(DLRT_OPT_ADAM), .seed = 1,
                             .prefetch = 1};
  if (budget) {
    cfg.spill = (dlrt_spill_config){.device_budget = budget, .prefetch = prefetch,
                                     .policy = DLRT_OFFLOAD_OPTIMIZER};
    if (strcmp(model, "cnn") == 0) cfg.checkpoint = DLRT_CHECKPOINT_SQRT;
  }
  int rc = dlrt_dataset_generate(batch * steps, 10, 1, &t->data);
  if (rc == DLRT_OK)
    rc = dlrt_trainer_create(ctx->dev, &cfg, t->data.height, t->data.width, t->data.classes,
                             &t->trainer);
  return rc;
}

static void spill_trainer_free(train_op *t) {
  dlrt_trainer_destroy(t->trainer);
  dlrt_dataset_free(&t->data);
  memset(t, 0, sizeof *t);
}

/* Epochs of `model` under a device budget of `percent` of its unlimited
 * peak (0: the unlimited run alone, whose measured peak is *peak). A
 * budgeted run first trains an epoch alone (its peaks are read then), then
 * alternates epoch by epoch with an unlimited trainer of the same model,
 * the reference side ("unlimited"), so the ratio sees the same machine. */
static int spill_case(bench_ctx *ctx, const char *model, int percent, int prefetch,
                      uint64_t *peak) {
  const int64_t batch = 64, steps = ctx->opt->quick ? 3 : 10;
  case_id id = {"spill", "steps/s", "", (double)steps};
  if (percent)
    snprintf(id.name, sizeof id.name, "%s/b%lld/budget%d%%/prefetch%d", model, (long long)batch,
             percent, prefetch);
  else
    snprintf(id.name, sizeof id.name, "%s/b%lld/unlimited", model, (long long)batch);
  if (!bench_wanted(ctx, "spill", id.name)) return DLRT_OK;
  uint64_t budget = percent ? *peak * (uint64_t)percent / 100 : 0;
  train_op t = {0}, free_run = {0};
  bench_row *row = NULL;
  dlrt_exec_info info = {0};
  int rc = spill_trainer(ctx, model, budget, prefetch, &t);
  if (rc == DLRT_ERR_OOM) {
    /* A budget below what one operation needs: say so, it is a result. */
    bench_skip_add(ctx->res, "spill", ctx->props.spec, dlrt_last_error());
    rc = DLRT_OK;
    goto done;
  }
  if (rc == DLRT_OK && percent) rc = queue_epoch(&t);
  if (rc == DLRT_OK) rc = dlrt_trainer_info(t.trainer, &info);
  if (rc == DLRT_OK && percent) rc = spill_trainer(ctx, model, 0, 0, &free_run);
  if (rc != DLRT_OK) {
    bench_fail(ctx, "spill", id.name, "cannot set up the trainers", rc);
    goto done;
  }
  /* One timer for both sides: their runs take turns. */
  bench_timer timer;
  if ((rc = bench_timer_init(&timer, ctx->dev, NULL)) != DLRT_OK) {
    bench_fail(ctx, "spill", id.name, "cannot set up timing", rc);
    goto done;
  }
  dlrt_side free_side = {&timer, queue_epoch, &free_run};
  bench_side reference = {run_dlrt_side, &free_side, bench_timer_kind(&timer)};
  vendor_side beside = {&reference, "unlimited", ""};
  rc = measure_case(ctx, &id, &timer, queue_epoch, &t, percent ? &beside : NULL, &row);
  bench_timer_free(&timer);
  if (rc == DLRT_OK && row) {
    if (!percent) dlrt_trainer_info(t.trainer, &info); /* after the timed epochs */
    row->images_per_s = row->median * (double)batch;
    row->planned_peak = (double)info.planned_peak_bytes;
    row->measured_peak = (double)info.measured_peak_bytes;
    if (!percent) *peak = info.measured_peak_bytes;
    if (percent)
      snprintf(row->note, sizeof row->note, "budget %.1f MiB%s; step time %.2fx the unlimited "
               "run's, alternated", (double)budget / 1048576.0,
               strcmp(model, "cnn") == 0 ? ", checkpointing sqrt" : "", row->ms / row->vendor_ms);
    else
      snprintf(row->note, sizeof row->note, "an epoch of %lld steps, Adam", (long long)steps);
  }
done:
  spill_trainer_free(&t);
  spill_trainer_free(&free_run);
  return rc;
}

int suite_spill(bench_ctx *ctx) {
  static const char *const models[] = {"mlp", "cnn"};
  static const int percents[] = {50, 25};
  for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
    /* The unlimited run first: its measured peak sets the budgets. */
    uint64_t peak = 0;
    spill_case(ctx, models[m], 0, 0, &peak);
    if (!peak) continue;
    for (size_t p = 0; p < sizeof percents / sizeof *percents; p++)
      for (int prefetch = 4; prefetch >= 0; prefetch -= 4)
        spill_case(ctx, models[m], percents[p], prefetch, &peak);
  }
  dlrt_mem_empty_cache(ctx->dev);
  return 0;
}

/* ---------------------------------------------------------------- loader */

typedef struct {
  dlrt_loader_t *loader;
  int epoch;
} loader_op;

/* One epoch through the loader: every batch decoded, augmented, staged and
 * copied to the device, and handed back at once. */
static int queue_loader_epoch(void *p) {
  loader_op *l = p;
  int rc = dlrt_loader_start(l->loader, l->epoch++);
  dlrt_batch b;
  while (rc == DLRT_OK && (rc = dlrt_loader_next(l->loader, &b)) == 1)
    rc = dlrt_loader_release(l->loader, &b, NULL);
  return rc < 0 ? rc : DLRT_OK;
}

int suite_loader(bench_ctx *ctx) {
  const int64_t batch = 64, batches = ctx->opt->quick ? 10 : 50;
  static const int workers[] = {1, 2, 4};
  dlrt_dataset data;
  int rc = dlrt_dataset_generate(batch * batches, 10, 1, &data);
  if (rc != DLRT_OK) return bench_fail(ctx, "loader", "", "cannot generate data", rc), 0;
  for (size_t i = 0; i < sizeof workers / sizeof *workers; i++) {
    case_id id = {"loader", "images/s", "", (double)(batch * batches)};
    snprintf(id.name, sizeof id.name, "augment/w%d/b%lld", workers[i], (long long)batch);
    if (!bench_wanted(ctx, "loader", id.name)) continue;
    dlrt_loader_config c = {.batch = batch, .workers = workers[i], .prefetch = 4, .seed = 1,
                            .shuffle = 1, .world = 1, .augment = 1,
                            .aug = {.crop_padding = 2, .flip = 1, .erase_p = 0.25f,
                                    .mean = 0.286f, .std = 0.353f}};
    loader_op l = {0};
    bench_row *row = NULL;
    if ((rc = dlrt_loader_create(ctx->dev, &data, &c, &l.loader)) != DLRT_OK) {
      bench_fail(ctx, "loader", id.name, "cannot create the loader", rc);
      continue;
    }
    if (measure_dlrt(ctx, &id, NULL, queue_loader_epoch, &l, &row) == DLRT_OK && row)
      snprintf(row->note, sizeof row->note, "one run: an epoch of %lld batches; crop 2, flip, "
               "erase 0.25, normalise; prefetch 4", (long long)batches);
    dlrt_loader_destroy(l.loader);
  }
  dlrt_dataset_free(&data);
  return 0;
}
