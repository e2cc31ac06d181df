/* test-data-parallel-api.c — plain data parallelism with the training
 * options through the public API (lib/train/parallel.c, allreduce.c):
 * with --accum the bucketed all-reduce is started once per update, not per
 * micro-batch (its requests counted through a caller's all-reduce over one
 * process, which leaves the values as they are), and carries every
 * gradient and the loss; such a trainer, and replicas with accumulation
 * under it, train with the bits of the same run without the all-reduce;
 * ZeRO's stages over replicas with accumulation train as the unsharded
 * replicas; what stays refused says so with its status (a trainer's own
 * spilling beside replicas, streamed parameters, a budget after the
 * replicas, the devices after the all-reduce, ZeRO beside spilling
 * replicas, the device-pointer all-reduce beside replicas). tests/test-data-parallel-compose.sh
 * drives the same through dltrain, across MPI ranks too. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

/* The all-reduce over one process: the sum is the values themselves. */
typedef struct {
  int starts, waits;
  int64_t floats;
} counts;

static int start(void *user, float *v, int64_t n, void **req) {
  counts *c = user;
  (void)v;
  c->starts++, c->floats += n;
  *req = c;
  return DLRT_OK;
}

static int wait_for(void *user, void *req) {
  counts *c = user;
  c->waits += req == c;
  return DLRT_OK;
}

static dlrt_trainer_t *make(dlrt_device_t *dev, int accum, const dlrt_spill_config *spill) {
  dlrt_trainer_config c = {.model = "mlp", .batch = 32,
                           .opt = dlrt_optimizer_defaults(DLRT_OPT_ADAM), .seed = 3,
                           .accum = accum, .clip_norm = 0.5f};
  if (spill) c.spill = *spill;
  c.opt.lr = 1e-3f;
  dlrt_trainer_t *t = NULL;
  if (dlrt_trainer_create(dev, &c, 28, 28, 10, &t) < 0) bail_out("%s", dlrt_last_error());
  return t;
}

/* 4 updates, then the test loss (which the parameters alone decide). */
static int train(dlrt_trainer_t *t, const dlrt_dataset *d, float *test_loss) {
  dlrt_epoch_stats st;
  int rc = dlrt_trainer_epoch_steps(t, d, 0, 4, NULL, NULL, &st);
  if (rc == DLRT_OK) rc = dlrt_trainer_evaluate(t, d, &st);
  *test_loss = st.loss;
  return rc;
}

int main(void) {
  plan(22);
  if (dlrt_init() < 0) bail_out("%s", dlrt_last_error());
  dlrt_device_t *dev;
  if (dlrt_device_open("cpu", &dev) < 0) bail_out("%s", dlrt_last_error());
  dlrt_dataset d;
  if (dlrt_dataset_generate(640, 10, 5, &d) < 0) bail_out("%s", dlrt_last_error());
  dlrt_device_t *devs[2] = {dev, dev};
  int64_t split[2] = {12, 20};

  /* One process, one replica: the all-reduce's requests per update. */
  float plain1, plain2, across1, across2, reps, reps_across;
  counts one = {0}, two = {0};
  dlrt_trainer_t *t = make(dev, 1, NULL);
  tap_check(dlrt_trainer_set_allreduce_async(t, start, wait_for, &one), "no accumulation");
  tap_check(train(t, &d, &across1), "4 updates of one micro-batch");
  dlrt_exec_info info;
  tap_check(dlrt_trainer_info(t, &info), "its figures");
  dlrt_trainer_destroy(t);
  t = make(dev, 2, NULL);
  tap_check(dlrt_trainer_set_allreduce_async(t, start, wait_for, &two), "--accum 2");
  tap_check(train(t, &d, &across2), "4 updates of two micro-batches");
  dlrt_trainer_destroy(t);
  ok(one.starts > 4 && one.starts % 4 == 0 && two.starts == one.starts,
     "--accum 2 starts as many requests for 8 micro-batches (%d) as 4 updates of one do (%d):"
     " one all-reduce an update", two.starts, one.starts);
  ok(two.waits == two.starts && two.floats == 4 * (info.params + 2),
     "each completed; an update carries every gradient and its loss (%lld floats, %lld "
     "parameters)", (long long)two.floats, (long long)info.params);

  /* The same bits without the all-reduce. */
  t = make(dev, 1, NULL);
  tap_check(train(t, &d, &plain1), "one device, no accumulation");
  dlrt_trainer_destroy(t);
  t = make(dev, 2, NULL);
  tap_check(train(t, &d, &plain2), "one device, --accum 2");
  dlrt_trainer_destroy(t);
  ok(across1 == plain1 && across2 == plain2, "the all-reduce over one process keeps the bits "
     "(test loss %.9g and %.9g, without it %.9g and %.9g)", across1, across2, plain1, plain2);

  /* Replicas with accumulation, with and without the all-reduce. */
  counts r = {0};
  t = make(dev, 2, NULL);
  tap_check(dlrt_trainer_set_devices(t, devs, 2, split), "two replicas (12 + 20 rows), --accum 2");
  tap_check(train(t, &d, &reps), "4 updates");
  dlrt_trainer_destroy(t);
  t = make(dev, 2, NULL);
  tap_check(dlrt_trainer_set_devices(t, devs, 2, split) == DLRT_OK
                ? dlrt_trainer_set_allreduce_async(t, start, wait_for, &r)
                : DLRT_ERR_STATE,
            "two replicas under the all-reduce");
  tap_check(train(t, &d, &reps_across), "4 updates");
  dlrt_trainer_destroy(t);
  ok(reps_across == reps && r.starts == two.starts && r.floats == two.floats,
     "the same bits (%.9g, %.9g), one all-reduce an update (%d requests)", reps_across, reps,
     r.starts);
  ok(fabsf(reps - plain2) <= 1e-5f * fabsf(plain2),
     "the replicas train as one device with --accum 2 (%.9g, %.9g)", reps, plain2);

  /* ZeRO over the replicas with accumulation: the mean of the update's
   * micro-batches, each replica's range updated from it. */
  for (int stage = 1; stage <= 3; stage++) {
    float zl = 0;
    t = make(dev, 2, NULL);
    int rc = dlrt_trainer_set_devices(t, devs, 2, split);
    if (rc == DLRT_OK) rc = dlrt_trainer_set_zero(t, stage, NULL);
    if (rc == DLRT_OK) rc = train(t, &d, &zl);
    ok(rc == DLRT_OK && fabsf(zl - reps) <= 1e-5f * fabsf(reps),
       "ZeRO stage %d, --accum 2: test loss %.9g, the unsharded replicas' %.9g (%s)", stage, zl,
       reps, rc == DLRT_OK ? "trained" : dlrt_last_error());
    dlrt_trainer_destroy(t);
  }

  /* What is refused. */
  dlrt_spill_config spill = {.device_budget = 16 << 20, .policy = DLRT_OFFLOAD_OPTIMIZER};
  t = make(dev, 1, &spill);
  is_status(dlrt_trainer_set_devices(t, devs, 2, NULL), DLRT_ERR_UNSUPPORTED,
            "replicas beside the trainer's own spilling (%s)", dlrt_last_error());
  dlrt_trainer_destroy(t);
  t = make(dev, 2, NULL);
  dlrt_spill_config params = {.device_budget = 16 << 20, .policy = DLRT_OFFLOAD_PARAMS};
  is_status(dlrt_trainer_set_devices_memory(t, &params), DLRT_ERR_UNSUPPORTED,
            "streamed parameters for the replicas (%s)", dlrt_last_error());
  int named = 0;
  if (dlrt_trainer_set_devices_memory(t, &spill) == DLRT_OK &&
      dlrt_trainer_set_devices(t, devs, 2, NULL) == DLRT_OK) {
    named = dlrt_trainer_set_devices_memory(t, &spill) == DLRT_ERR_STATE;
    named &= dlrt_trainer_set_zero(t, 1, NULL) == DLRT_ERR_UNSUPPORTED &&
             strstr(dlrt_last_error(), "spilling") != NULL;
    counts c = {0};
    named &= dlrt_trainer_set_allreduce_device(t, start, wait_for, &c) == DLRT_ERR_UNSUPPORTED;
    named &= dlrt_trainer_set_allreduce_async(t, start, wait_for, &c) == DLRT_OK &&
             dlrt_trainer_set_devices(t, devs, 2, NULL) == DLRT_ERR_STATE;
  }
  ok(named, "a budget after the replicas, ZeRO beside spilling replicas, the device-pointer "
     "all-reduce beside replicas, the devices after the all-reduce: refused (%s)",
     dlrt_last_error());
  dlrt_trainer_destroy(t);

  dlrt_dataset_free(&d);
  dlrt_shutdown();
  return done_testing();
}
