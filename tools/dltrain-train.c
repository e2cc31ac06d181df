/* dltrain-train.c — dltrain's data and its training: the splits --data
 * names (or generated ones), and the epochs with their progress lines (a
 * GPT's steps are dltrain-lm.c's). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "dlrt.h"
#include "dltrain.h"

/* The generated stand-in has Fashion-MNIST's sizes. */
enum { GEN_TRAIN = 60000, GEN_TEST = 10000, GEN_CLASSES = 10 };

int dltrain_load_data(const options *o, int world, dlrt_dataset d[2], int *generated) {
  int rc;
  *generated = 0;
  if (o->gpt_model) return dltrain_lm_load(o, world, d);
  *generated = strcmp(o->data, "generated") == 0;
  if (!*generated) {
    int flags = o->mmap ? DLRT_DATASET_MMAP : 0;
    /* Both splits, checked against each other before anything trains. */
    rc = dlrt_dataset_load_splits(o->data, flags, d);
    if (rc == DLRT_ERR_NOT_FOUND && strcmp(o->data, "fashion-mnist") == 0) {
      fprintf(stderr, "dltrain: Fashion-MNIST not found (%s); training on generated data "
              "instead\n", dlrt_last_error());
      *generated = 1;
    } else if (rc != DLRT_OK) {
      return tool_fail("cannot load the data", rc);
    }
  }
  /* Different seeds for the two splits: the classes are the same patterns,
   * the samples differ. */
  if (*generated && ((rc = dlrt_dataset_generate(GEN_TRAIN, GEN_CLASSES, o->seed, &d[0])) ||
                     (rc = dlrt_dataset_generate(GEN_TEST, GEN_CLASSES, ~o->seed, &d[1]))))
    return tool_fail("cannot generate data", rc);
  if (o->limit > 0) { /* the arrays stay as they are; only the counts shrink */
    int64_t test = o->limit / 6 > 0 ? o->limit / 6 : 1;
    d[0].count = d[0].count < o->limit ? d[0].count : o->limit;
    d[1].count = d[1].count < test ? d[1].count : test;
  }
  return 0;
}

typedef struct {
  FILE *out;
  int tty;          /* redraw one line in place */
  int epoch, epochs;
  int shown;        /* tenths of the epoch already reported (not a tty) */
  dlrt_device_t *dev;
} progress;

/* The trainer calls this every few steps with the running figures. */
static void on_progress(void *user, int64_t step, int64_t steps, const dlrt_epoch_stats *s) {
  progress *p = user;
  dlrt_mem_stats mem;
  double mib = dlrt_mem_stats_get(p->dev, &mem) == DLRT_OK
                   ? (double)mem.allocated.current / (1024.0 * 1024.0) : 0;
  if (p->tty) {
    static const char bar[] = "==============================";
    int width = (int)sizeof bar - 1, done = (int)(width * step / steps);
    fprintf(p->out, "\r\033[Kepoch %d/%d [%.*s%*s] %" PRId64 "/%" PRId64 " loss %.4f "
            "acc %.1f%% %.0f img/s mem %.1f MiB", p->epoch, p->epochs, done, bar,
            width - done, "", step, steps, s->loss, 100.0 * s->accuracy, s->images_per_s, mib);
  } else {
    int tenth = (int)(step * 10 / steps);
    if (tenth <= p->shown)
      return;
    p->shown = tenth;
    fprintf(p->out, "epoch %d/%d %3d%% step %" PRId64 "/%" PRId64 " loss %.4f acc %.1f%% "
            "%.0f img/s mem %.1f MiB\n", p->epoch, p->epochs, tenth * 10, step, steps,
            s->loss, 100.0 * s->accuracy, s->images_per_s, mib);
  }
  fflush(p->out);
}

int dltrain_train(run *s) {
  options *o = &s->o;
  dlrt_trainer_t *trainer = s->trainer;
  dlrt_dataset *data = s->data;
  FILE *log = s->log;
  results *r = &s->r;
  int rc;
  if (o->gpt_model) {
    /* Tensor parallel ranks all take part in saving (the shards are
     * gathered); rank 0 writes. */
    if ((s->status = dltrain_lm_train(o, trainer, data, s->done, log, s->tty, s->dev, s->data_rank,
                                   &s->lm)) != 0)
      return 1;
    r->lm = &s->lm;
    r->last = s->lm.last;
    r->eval = s->lm.eval;
    r->skipped_steps = s->lm.skipped_steps;
  }
  for (int epoch = s->done; !o->gpt_model && epoch < o->epochs; epoch++) {
    progress p = {log, s->tty, epoch + 1, o->epochs, 0, s->dev};
    rc = dlrt_trainer_epoch(trainer, &data[0], epoch, o->quiet ? NULL : on_progress, &p,
                            &r->last);
    if (s->tty)
      fputs("\r\033[K", log); /* the progress line gives way to the epoch's figures */
    TRY(rc, "training failed");
    s->losses[r->epochs_run++] = r->last.loss;
    r->skipped_steps += r->last.skipped_steps;
    if (r->last.skipped_steps > 0)
      fprintf(log, "loss scale: %" PRId64 " update%s skipped for inf/NaN gradients this epoch; "
              "scale now %g\n", r->last.skipped_steps, r->last.skipped_steps == 1 ? "" : "s",
              r->last.loss_scale);
    if (s->n_replicas > 0 && o->devices) {
      int64_t split[64];
      int n = 0;
      dlrt_trainer_split(trainer, split, &n);
      fputs("devices ", log);
      for (int i = 0; i < n; i++)
        fprintf(log, "%s%s %" PRId64 " rows", i ? ", " : " ", dlrt_device_spec(s->replicas[i]),
                split[i]);
      fprintf(log, " of each batch of %" PRId64 "\n", o->batch);
    }
    TRY(dlrt_trainer_evaluate(trainer, &data[1], &r->eval), "evaluation failed");
    fprintf(log, "epoch %d/%d  train loss %.4f accuracy %.2f%%  %.0f images/s  %.1f s  "
            "stall %.1f%%  |  test loss %.4f accuracy %.2f%%\n", epoch + 1, o->epochs,
            r->last.loss, 100.0 * r->last.accuracy, r->last.images_per_s, r->last.seconds,
            100.0 * r->last.stall_fraction, r->eval.loss, 100.0 * r->eval.accuracy);
    if (o->save && s->rank == 0)
      TRY(dlrt_trainer_save(trainer, o->save, epoch + 1), "cannot save the checkpoint");
  }
  if (o->gpt_model) {
    /* dltrain_lm_train said it all */
  } else if (r->epochs_run == 0) { /* nothing left to train: evaluate what there is */
    TRY(dlrt_trainer_evaluate(trainer, &data[1], &r->eval), "evaluation failed");
    fprintf(log, "nothing to train (%d of %d epochs done); test loss %.4f accuracy %.2f%%\n",
            s->done, o->epochs, r->eval.loss, 100.0 * r->eval.accuracy);
  } else if (o->save) {
    fprintf(log, "saved    %s after epoch %d\n", o->save, o->epochs);
  }
  return 0;
}
