/*
 * test-tensor-pipeline-api.c — tensor x pipeline parallelism through the
 * library, without MPI: two trainers in two threads of this process, ranks
 * 0 and 1 of a small GPT split over 2 tensor-parallel ranks, each cut into
 * 2 pipeline stages on the CPU (dlrt_trainer_set_pipeline_tensor_parallel),
 * their stages meeting in this test's collective, train as one trainer on
 * one device does: every step's loss and an evaluation within 1e-5
 * (relative), also with accumulation (2) and clipping (0.05);
 * each stage of a rank holds its shard (dlrt_trainer_stage_info: its heads
 * and vocabulary rows, a fraction of the parameter bytes); the checkpoint
 * both ranks save (rank 0 writes) loads into one device's trainer, whose
 * next step has the split's next loss; what is not split is refused.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

enum { T = 8, BATCH = 4, STEPS = 6, TOKENS = 3000, VAL_TOKENS = 200 };

static dlrt_tokens train_tokens, val_tokens;
static dlrt_dataset train_set, val_set;
static char ckpt[512];

/* Two ranks meeting at each collective: the second to arrive combines, in
 * rank order, and both take the result. */
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t cv;
  int arrived, mismatch, broken;
  long generation;
  float *values[2];
  int64_t count[2], tag[2];
} pair;

typedef struct {
  pair *p;
  int rank;
  int accum;
  float clip;
  float losses[STEPS + 1], val_loss;
  dlrt_stage_info stages[2];
  int n_stages, rc;
  char error[512];
} rank_ctx;

static int pair_collective(void *user, float *values, int64_t count, dlrt_collective_op op,
                           int64_t tag) {
  rank_ctx *c = user;
  pair *p = c->p;
  pthread_mutex_lock(&p->lock);
  p->values[c->rank] = values, p->count[c->rank] = count, p->tag[c->rank] = tag;
  long gen = p->generation;
  if (++p->arrived == 2) {
    if (p->count[0] != p->count[1] || p->tag[0] != p->tag[1]) p->mismatch = 1;
    for (int64_t i = 0; i < count && !p->mismatch; i++) {
      float a = p->values[0][i], b = p->values[1][i];
      float v = op == DLRT_COLLECTIVE_MAX ? fmaxf(a, b) : a + b;
      p->values[0][i] = p->values[1][i] = v;
    }
    p->arrived = 0;
    p->generation++;
    pthread_cond_broadcast(&p->cv);
  } else {
    while (p->generation == gen && !p->broken) pthread_cond_wait(&p->cv, &p->lock);
  }
  int bad = p->mismatch || p->broken;
  pthread_mutex_unlock(&p->lock);
  return bad ? DLRT_ERR_STATE : DLRT_OK;
}

/* A rank that fails wakes the other, whose collectives then fail too. */
static void pair_break(pair *p) {
  pthread_mutex_lock(&p->lock);
  p->broken = 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lock);
}

static dlrt_trainer_config config(int accum, float clip) {
  dlrt_trainer_config c = {.model = "gpt-mini", .batch = BATCH, .seed = 7, .accum = accum,
                           .clip_norm = clip, .opt = dlrt_optimizer_defaults(DLRT_OPT_ADAM)};
  c.gpt = (dlrt_gpt_config){.layers = 2, .heads = 2, .embd = 16, .context = T};
  c.opt.lr = 1e-2f;
  return c;
}

/* STEPS steps (an epoch of one step each, as dltrain's rounds), then an
 * evaluation; losses[STEPS] stays 0. */
static int train(dlrt_trainer_t *t, float *losses, float *val_loss) {
  int rc = DLRT_OK;
  for (int s = 0; s < STEPS && rc == DLRT_OK; s++) {
    dlrt_epoch_stats st;
    if ((rc = dlrt_trainer_epoch_steps(t, &train_set, s, 1, NULL, NULL, &st)) == DLRT_OK)
      losses[s] = st.loss;
  }
  dlrt_epoch_stats ev;
  if (rc == DLRT_OK && (rc = dlrt_trainer_evaluate(t, &val_set, &ev)) == DLRT_OK)
    *val_loss = ev.loss;
  return rc;
}

static void *rank_main(void *arg) {
  rank_ctx *c = arg;
  dlrt_device_t *cpu;
  dlrt_trainer_t *t = NULL;
  dlrt_trainer_config cfg = config(c->accum, c->clip);
  int rc = dlrt_device_open("cpu", &cpu);
  if (rc == DLRT_OK) rc = dlrt_trainer_create(cpu, &cfg, 1, T, 256, &t);
  dlrt_device_t *stages[2] = {cpu, cpu};
  if (rc == DLRT_OK)
    rc = dlrt_trainer_set_pipeline_tensor_parallel(t, stages, 2, 2, c->rank, 2, NULL,
                                                   pair_collective, c);
  if (rc == DLRT_OK) rc = dlrt_trainer_stage_info(t, c->stages, 2, &c->n_stages);
  if (rc == DLRT_OK) rc = train(t, c->losses, &c->val_loss);
  /* Both ranks gather; rank 0 writes. */
  if (rc == DLRT_OK && c->accum == 1) rc = dlrt_trainer_save(t, ckpt, STEPS);
  /* One more step, for the resume's next loss. */
  dlrt_epoch_stats st;
  if (rc == DLRT_OK && c->accum == 1 &&
      (rc = dlrt_trainer_epoch_steps(t, &train_set, STEPS, 1, NULL, NULL, &st)) == DLRT_OK)
    c->losses[STEPS] = st.loss;
  if (rc < 0) {
    snprintf(c->error, sizeof c->error, "%s", dlrt_last_error());
    pair_break(c->p);
  }
  c->rc = rc;
  dlrt_trainer_destroy(t);
  return NULL;
}

static double worst(const float *a, const float *b, int n) {
  double w = 0;
  for (int i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]) / fabs((double)a[i]);
    w = d > w || d != d ? d : w;
  }
  return w;
}

/* One device against the two ranks, with `accum` and `clip`. */
static void compare(int accum, float clip) {
  dlrt_device_t *cpu;
  dlrt_trainer_t *t = NULL;
  dlrt_trainer_config cfg = config(accum, clip);
  float one[STEPS + 1] = {0}, one_val = 0;
  if (dlrt_device_open("cpu", &cpu) < 0 || dlrt_trainer_create(cpu, &cfg, 1, T, 256, &t) < 0 ||
      train(t, one, &one_val) < 0)
    bail_out("one device: %s", dlrt_last_error());
  dlrt_trainer_destroy(t);

  pair p = {.lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  rank_ctx ranks[2];
  pthread_t threads[2];
  for (int r = 0; r < 2; r++) {
    ranks[r] = (rank_ctx){.p = &p, .rank = r, .accum = accum, .clip = clip};
    if (pthread_create(&threads[r], NULL, rank_main, &ranks[r]) != 0) bail_out("no thread");
  }
  for (int r = 0; r < 2; r++) pthread_join(threads[r], NULL);
  for (int r = 0; r < 2; r++)
    if (ranks[r].rc < 0) bail_out("rank %d: %s", r, ranks[r].error);
  ok(!p.mismatch, "accum %d, clip %g: the ranks' collectives met with the same sizes and tags",
     accum, (double)clip);
  double w = worst(one, ranks[0].losses, STEPS);
  ok(w <= 1e-5 && worst(ranks[0].losses, ranks[1].losses, STEPS) == 0,
     "accum %d, clip %g: %d steps' losses within 1e-5 of one device (%.2g), the same on both "
     "ranks", accum, (double)clip, STEPS, w);
  w = worst(&one_val, &ranks[0].val_loss, 1);
  ok(w <= 1e-5 && ranks[0].val_loss == ranks[1].val_loss,
     "accum %d, clip %g: the evaluation through the stages within 1e-5 of one device's (%.2g)",
     accum, (double)clip, w);
  if (accum > 1) return;

  /* The shards: each rank one head and half the vocabulary in both stages. */
  dlrt_exec_info whole;
  if (dlrt_device_open("cpu", &cpu) < 0 || dlrt_trainer_create(cpu, &cfg, 1, T, 256, &t) < 0 ||
      dlrt_exec_info_get(dlrt_trainer_executor(t), &whole) < 0)
    bail_out("%s", dlrt_last_error());
  int shards = ranks[0].n_stages == 2 && ranks[1].n_stages == 2;
  uint64_t most = 0;
  for (int r = 0; r < 2 && shards; r++)
    for (int s = 0; s < 2; s++) {
      const dlrt_stage_info *st = &ranks[r].stages[s];
      shards &= st->rank == r && st->ranks == 2 && st->heads == 1 && st->head_first == r &&
                st->vocab == 128 && st->vocab_first == 128 * r;
      most = st->param_bytes > most ? st->param_bytes : most;
    }
  ok(shards && most < whole.param_bytes * 0.4,
     "each stage of each rank holds its head and vocabulary rows, at most %llu of %llu "
     "parameter bytes (%.3fx)", (unsigned long long)most,
     (unsigned long long)whole.param_bytes, (double)most / (double)whole.param_bytes);

  /* The checkpoint holds the whole model: one device resumes from it with
   * the split's next loss. */
  int done = 0;
  dlrt_epoch_stats st;
  int rc = dlrt_trainer_load(t, ckpt, &done);
  if (rc == DLRT_OK) rc = dlrt_trainer_epoch_steps(t, &train_set, STEPS, 1, NULL, NULL, &st);
  w = rc == DLRT_OK ? worst(&ranks[0].losses[STEPS], &st.loss, 1) : 1;
  ok(rc == DLRT_OK && done == STEPS && w <= 1e-5,
     "the ranks' checkpoint resumes on one device with the next loss (%.2g): %s", w,
     rc == DLRT_OK ? "ok" : dlrt_last_error());
  dlrt_trainer_destroy(t);
}

static int no_collective(void *user, float *values, int64_t count, dlrt_collective_op op,
                         int64_t tag) {
  (void)user, (void)values, (void)count, (void)op, (void)tag;
  return DLRT_OK;
}

static void refusals(void) {
  dlrt_device_t *cpu;
  if (dlrt_device_open("cpu", &cpu) < 0) bail_out("%s", dlrt_last_error());
  dlrt_device_t *two[2] = {cpu, cpu};
  dlrt_trainer_config c = {.model = "mlp", .batch = 8, .seed = 1,
                           .opt = dlrt_optimizer_defaults(DLRT_OPT_ADAM)};
  dlrt_trainer_t *t = NULL;
  if (dlrt_trainer_create(cpu, &c, 28, 28, 10, &t) < 0) bail_out("%s", dlrt_last_error());
  is_status(dlrt_trainer_set_pipeline_tensor_parallel(t, two, 2, 2, 0, 2, NULL, no_collective,
                                                      NULL),
            DLRT_ERR_UNSUPPORTED, "an MLP is refused: %s", dlrt_last_error());
  dlrt_trainer_destroy(t);
  c = config(1, 0);
  if (dlrt_trainer_create(cpu, &c, 1, T, 256, &t) < 0) bail_out("%s", dlrt_last_error());
  is_status(dlrt_trainer_set_pipeline_tensor_parallel(t, two, 2, 2, 0, 3, NULL, no_collective,
                                                      NULL),
            DLRT_ERR_INVALID_ARG, "2 heads over 3 ranks are refused: %s", dlrt_last_error());
  is_status(dlrt_trainer_set_pipeline_tensor_parallel(t, two, 2, 2, 2, 2, NULL, no_collective,
                                                      NULL),
            DLRT_ERR_INVALID_ARG, "rank 2 of 2 is refused: %s", dlrt_last_error());
  dlrt_trainer_destroy(t);
  /* Automatic segments: each rank's stage would choose its own, and the
   * collectives inside them must meet. */
  c = config(1, 0);
  c.checkpoint = DLRT_CHECKPOINT_AUTO;
  if (dlrt_trainer_create(cpu, &c, 1, T, 256, &t) < 0) bail_out("%s", dlrt_last_error());
  is_status(dlrt_trainer_set_pipeline_tensor_parallel(t, two, 2, 2, 0, 2, NULL, no_collective,
                                                      NULL),
            DLRT_ERR_UNSUPPORTED, "--checkpoint auto is refused: %s", dlrt_last_error());
  dlrt_trainer_destroy(t);
  c = config(1, 0);
  if (dlrt_trainer_create(cpu, &c, 1, T, 256, &t) < 0) bail_out("%s", dlrt_last_error());
  is_status(dlrt_trainer_set_pipeline_tensor_parallel(t, two, 2, 2, 0, 2, NULL, no_collective,
                                                      NULL),
            DLRT_OK, "rank 0 of 2 splits (building the stages meets no collective)");
  is_status(dlrt_trainer_set_pipeline_tensor_parallel(t, two, 2, 2, 0, 2, NULL, no_collective,
                                                      NULL),
            DLRT_ERR_STATE, "splitting twice is refused: %s", dlrt_last_error());
  is_status(dlrt_trainer_set_pipeline(t, two, 2, 2), DLRT_ERR_STATE,
            "and so is cutting its pipeline again: %s", dlrt_last_error());
  dlrt_trainer_destroy(t);
}

/* A byte stream with some structure to learn: a repeated sentence with a
 * counter in it. */
static void make_tokens(dlrt_tokens *out, int64_t count, int seed) {
  static const char text[] = "the quick brown fox jumps over the lazy dog ";
  out->tokens = malloc((size_t)count * sizeof *out->tokens);
  if (!out->tokens) bail_out("no memory");
  for (int64_t i = 0; i < count; i++)
    out->tokens[i] = (uint16_t)(i % 50 == 49 ? '0' + (i / 50 + seed) % 10
                                             : (unsigned char)text[i % (sizeof text - 1)]);
  out->count = count, out->vocab = 256, out->files = 1;
  snprintf(out->source, sizeof out->source, "generated");
}

int main(void) {
  if (dlrt_init() < 0) bail_out("%s", dlrt_last_error());
  char dir[512];
  tap_tempdir("test-tensor-pipeline-api", dir, sizeof dir);
  snprintf(ckpt, sizeof ckpt, "%s", tap_join(dir, "split.safetensors"));
  make_tokens(&train_tokens, TOKENS, 0);
  make_tokens(&val_tokens, VAL_TOKENS, 3);
  if (dlrt_dataset_from_tokens(&train_tokens, T, &train_set) < 0 ||
      dlrt_dataset_from_tokens(&val_tokens, T, &val_set) < 0)
    bail_out("%s", dlrt_last_error());
  refusals();
  compare(1, 0);
  compare(2, 0.05f);
  dlrt_dataset_free(&train_set);
  dlrt_dataset_free(&val_set);
  free(train_tokens.tokens);
  free(val_tokens.tokens);
  tap_remove_tree(dir);
  dlrt_shutdown();
  return done_testing();
}
