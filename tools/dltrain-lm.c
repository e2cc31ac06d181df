/* dltrain-lm.c — dltrain for GPT models: the token data (a text file or
 * folder as byte tokens, an llm.c token file; Debian's fortunes by default)
 * and training by steps, with an evaluation of the validation split every
 * --eval-every steps (loss, perplexity, bits per byte). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dltrain.h"

/* The corpus a fresh machine has (Debian's fortunes package, installed by
 * .ci/install-deps): its top-level files, the offensive ones left out by
 * the package itself. */
#define DEFAULT_CORPUS "/usr/share/games/fortunes"

/* The streams behind the two datasets (which point into them). */
static dlrt_tokens streams[3];

int dltrain_lm_load(const options *o, int world, dlrt_dataset d[2]) {
  dlrt_gpt_config gpt;
  dlrt_gpt_preset(o->model, &gpt);
  dlrt_gpt_override(&gpt, &o->gpt);
  if (o->plan && !o->data_given) {
    /* Planning reads no data: full windows of the model's context over its
     * vocabulary. */
    for (int i = 0; i < 2; i++) {
      memset(&d[i], 0, sizeof d[i]);
      d[i].count = o->batch;
      d[i].channels = d[i].height = 1;
      d[i].width = gpt.context;
      d[i].classes = (int)gpt.vocab;
      d[i].image_dtype = DLRT_I32;
      snprintf(d[i].source, sizeof d[i].source, "windows of %lld tokens (--plan)",
               (long long)gpt.context);
    }
    return 0;
  }
  const char *path = strcmp(o->data, "fashion-mnist") == 0 ? DEFAULT_CORPUS : o->data;
  int rc = dlrt_tokens_load(path, &streams[0]);
  if (rc == DLRT_ERR_NOT_FOUND && path == (const char *)DEFAULT_CORPUS) {
    fprintf(stderr, "dltrain: the default corpus %s is missing: install Debian's fortunes "
            "package (apt-get install fortunes) or give --data FILE|DIR\n", DEFAULT_CORPUS);
    return STATUS_FAIL;
  }
  if (rc < 0) return tool_fail("cannot load the tokens (--data)", rc);
  int64_t context = gpt.context;
  if ((rc = dlrt_tokens_split(&streams[0], 0, &streams[1])) < 0 ||
      (rc = dlrt_tokens_split(&streams[0], 1, &streams[2])) < 0)
    return tool_fail("cannot split the tokens", rc);
  if ((rc = dlrt_dataset_from_tokens(&streams[1], context, &d[0])) < 0)
    return tool_fail("cannot train on these tokens", rc);
  if ((rc = dlrt_dataset_from_tokens(&streams[2], context, &d[1])) < 0)
    return tool_fail("cannot validate on these tokens (the last tenth of --data)", rc);
  /* A training "epoch" is one round of --eval-every updates of every rank
   * (each takes its share of a step's windows): windows are drawn at random
   * offsets, so any count is as good as another. The validation windows
   * are the first --eval-batches batches of a whole step (batch x ranks)
   * of it, which each rank evaluates: the same set for any number of
   * ranks. */
  d[0].classes = d[1].classes = streams[0].vocab;
  int64_t per_round = o->eval_every * o->batch * (o->accum > 1 ? o->accum : 1) * world;
  d[0].count = per_round;
  int64_t val = o->eval_batches * o->batch * world;
  if (d[1].count > val) d[1].count = val;
  return 0;
}

void dltrain_lm_free(void) {
  for (int i = 0; i < 3; i++) dlrt_tokens_free(&streams[i]);
}

int dltrain_lm_byte_tokens(void) { return streams[0].vocab == 256; }

typedef struct {
  FILE *out;
  int tty;
  int64_t first, total; /* the round's first step, the run's steps */
  int64_t width;        /* tokens per window */
  dlrt_device_t *dev;
  int64_t shown;
} lm_progress;

static void on_progress(void *user, int64_t step, int64_t steps, const dlrt_epoch_stats *s) {
  lm_progress *p = user;
  (void)steps;
  /* The device memory in use now and at most so far: under a budget the
   * spiller may have moved most of it off by the end of a step. */
  dlrt_mem_stats mem;
  int have = dlrt_mem_stats_get(p->dev, &mem) == DLRT_OK;
  double mib = have ? (double)mem.allocated.current / (1024.0 * 1024.0) : 0;
  double peak_mib = have ? (double)mem.allocated.peak / (1024.0 * 1024.0) : 0;
  int64_t at = p->first + step;
  if (!p->tty && at - p->shown < p->total / 20 && at != p->total) return;
  p->shown = at;
  fprintf(p->out,
          "%sstep %" PRId64 "/%" PRId64 " loss %.4f %.0f tok/s mem %.1f MiB (peak %.1f)%s",
          p->tty ? "\r\033[K" : "", at, p->total, s->loss, s->tokens_per_s, mib, peak_mib,
          p->tty ? "" : "\n");
  fflush(p->out);
}

int dltrain_lm_train(const options *o, dlrt_trainer_t *t, dlrt_dataset d[2], int start,
                     FILE *log, int tty, dlrt_device_t *dev, int rank, lm_results *out) {
  int rc;
  double ln2 = 0.6931471805599453; /* ln 2: nats to bits */
  int bytes = dltrain_lm_byte_tokens();
  int64_t step = start;
  out->val_loss = NAN;
  while (step < o->steps) {
    int64_t round = step / o->eval_every, in_round = step % o->eval_every;
    int64_t round_steps = o->eval_every - in_round; /* to the next evaluation */
    if (round_steps > o->steps - step) round_steps = o->steps - step;
    lm_progress p = {log, tty, step, o->steps, d[0].width, dev, step};
    rc = dlrt_trainer_epoch_steps(t, &d[0], (int)round, round_steps,
                                  o->quiet ? NULL : on_progress,
                                  &p, &out->last);
    if (tty) fputs("\r\033[K", log);
    if (rc < 0) return tool_fail("training failed", rc);
    step += out->last.steps;
    out->steps_run += out->last.steps;
    out->skipped_steps += out->last.skipped_steps;
    if ((rc = dlrt_trainer_evaluate(t, &d[1], &out->eval)) < 0)
      return tool_fail("evaluation failed", rc);
    out->val_loss = out->eval.loss;
    out->val_bpb = bytes ? out->eval.loss / ln2 : NAN;
    if (out->rounds < LM_ROUNDS_MAX) {
      out->round_loss[out->rounds] = out->last.loss;
      out->round_val_loss[out->rounds++] = out->eval.loss;
    }
    fprintf(log, "step %" PRId64 "/%" PRId64 "  train loss %.4f  %.0f tokens/s  %.1f s  "
            "|  val loss %.4f perplexity %.2f", step, o->steps, out->last.loss,
            out->last.tokens_per_s, out->last.seconds, out->eval.loss, exp(out->eval.loss));
    if (bytes) fprintf(log, " bpb %.4f", out->val_bpb);
    fputc('\n', log);
    if (o->save && rank == 0 &&
        (rc = dlrt_trainer_save(t, o->save, (int)(step < INT32_MAX ? step : INT32_MAX))) < 0)
      return tool_fail("cannot save the checkpoint", rc);
  }
  if (out->steps_run == 0) {
    if ((rc = dlrt_trainer_evaluate(t, &d[1], &out->eval)) < 0)
      return tool_fail("evaluation failed", rc);
    out->val_loss = out->eval.loss;
    out->val_bpb = bytes ? out->eval.loss / ln2 : NAN;
    fprintf(log, "nothing to train (%d of %" PRId64 " steps done); val loss %.4f perplexity "
            "%.2f\n", start, o->steps, out->eval.loss, exp(out->eval.loss));
    /* --steps 0 --save: the initial parameters, say for dlgen or a reference. */
    if (o->save && rank == 0 && start == 0) {
      if ((rc = dlrt_trainer_save(t, o->save, 0)) < 0)
        return tool_fail("cannot save the checkpoint", rc);
      fprintf(log, "saved    %s at step 0 (the initial parameters)\n", o->save);
    }
  } else if (o->save) {
    fprintf(log, "saved    %s after step %" PRId64 "\n", o->save, step);
  }
  return 0;
}
