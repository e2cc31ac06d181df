/* test-zero-api.c — the contract of dlrt_trainer_set_zero and
 * dlrt_trainer_zero_info (lib/train/zero.c) through the public API: what is
 * refused, with which status (no replicas, a stage out of range, fp16 loss
 * scaling, twice, the devices or a checkpoint after sharding, the bucketed
 * all-reduce after it: replicas across processes are set before sharding),
 * and that a sharded trainer's update, figures and checkpoint equal the
 * unsharded replicas'. tests/test-zero.sh drives the
 * same through dltrain, in one process and across MPI ranks. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

static char dir[64];

static dlrt_trainer_t *make(dlrt_device_t *dev, dlrt_dtype precision) {
  dlrt_trainer_config c = {.model = "mlp", .batch = 64,
                           .opt = dlrt_optimizer_defaults(DLRT_OPT_ADAM), .seed = 3,
                           .precision = precision};
  c.opt.lr = 1e-3f;
  dlrt_trainer_t *t = NULL;
  if (dlrt_trainer_create(dev, &c, 28, 28, 10, &t) < 0) bail_out("%s", dlrt_last_error());
  return t;
}

static int start(void *user, float *v, int64_t n, void **req) {
  (void)user, (void)v, (void)n, *req = NULL;
  return DLRT_OK;
}
static int wait_for(void *user, void *req) {
  (void)user, (void)req;
  return DLRT_OK;
}

/* Trains `stage` (-1: no data parallelism) for 4 updates; its loss, figures
 * and checkpoint path. */
static int train(dlrt_device_t *dev, const dlrt_dataset *d, int stage, float *loss,
                 dlrt_zero_info *zi, char *path, size_t size) {
  dlrt_trainer_t *t = make(dev, DLRT_F32);
  dlrt_device_t *devs[2] = {dev, dev};
  int64_t split[2] = {24, 40};
  int rc = stage < 0 ? DLRT_OK : dlrt_trainer_set_devices(t, devs, 2, split);
  if (rc == DLRT_OK && stage > 0) rc = dlrt_trainer_set_zero(t, stage, NULL);
  dlrt_epoch_stats st;
  if (rc == DLRT_OK) rc = dlrt_trainer_epoch_steps(t, d, 0, 4, NULL, NULL, &st);
  if (rc == DLRT_OK) rc = dlrt_trainer_zero_info(t, zi);
  snprintf(path, size, "%s/zero%d.safetensors", dir, stage);
  if (rc == DLRT_OK) rc = dlrt_trainer_save(t, path, 1);
  *loss = st.loss;
  dlrt_trainer_destroy(t);
  return rc;
}

/* The next update's loss after resuming `path` on one device. */
static int next_loss(dlrt_device_t *dev, const dlrt_dataset *d, const char *path, float *loss) {
  dlrt_trainer_t *t = make(dev, DLRT_F32);
  int epochs;
  dlrt_epoch_stats st;
  int rc = dlrt_trainer_load(t, path, &epochs);
  if (rc == DLRT_OK) rc = dlrt_trainer_epoch_steps(t, d, 1, 1, NULL, NULL, &st);
  *loss = st.loss;
  dlrt_trainer_destroy(t);
  return rc;
}

int main(void) {
  tap_tempdir("dlrt-zero", dir, sizeof dir);
  if (dlrt_init() < 0) bail_out("%s", dlrt_last_error());
  dlrt_device_t *dev;
  if (dlrt_device_open("cpu", &dev) < 0) bail_out("%s", dlrt_last_error());
  dlrt_dataset d;
  if (dlrt_dataset_generate(640, 10, 5, &d) < 0) bail_out("%s", dlrt_last_error());

  /* What is refused. */
  dlrt_trainer_t *t = make(dev, DLRT_F32);
  is_status(dlrt_trainer_set_zero(t, 2, NULL), DLRT_ERR_INVALID_ARG,
            "no replicas: DLRT_ERR_INVALID_ARG (%s)", dlrt_last_error());
  ok(strstr(dlrt_last_error(), "--devices") != NULL, "the message names --devices");
  is_status(dlrt_trainer_set_zero(t, 4, NULL), DLRT_ERR_INVALID_ARG, "stage 4 is refused");
  tap_check(dlrt_trainer_set_zero(t, 0, NULL), "stage 0 turns nothing on");
  dlrt_zero_info zi;
  tap_check(dlrt_trainer_zero_info(t, &zi), "the figures of an unsharded trainer");
  ok(zi.stage == 0 && zi.replicas == 1 && zi.full_param_bytes > 0 &&
         zi.full_optimizer_bytes == 2 * zi.full_param_bytes,
     "one device: stage 0, one replica; Adam's state is twice the parameters");
  dlrt_device_t *devs[2] = {dev, dev};
  tap_check(dlrt_trainer_set_devices(t, devs, 2, NULL), "two replicas");
  dlrt_zero_collectives across = {NULL, NULL, NULL, NULL};
  is_status(dlrt_trainer_set_zero(t, 1, &across), DLRT_ERR_INVALID_ARG,
            "collectives without their functions are refused");
  tap_check(dlrt_trainer_set_zero(t, 3, NULL), "stage 3 over two replicas");
  is_status(dlrt_trainer_set_zero(t, 1, NULL), DLRT_ERR_STATE, "a second set_zero is refused");
  is_status(dlrt_trainer_set_devices(t, devs, 2, NULL), DLRT_ERR_STATE,
            "set_devices after sharding is refused");
  is_status(dlrt_trainer_set_allreduce_async(t, start, wait_for, NULL), DLRT_ERR_STATE,
            "the bucketed all-reduce after sharding the replicas is refused (%s)",
            dlrt_last_error());
  char path[128];
  snprintf(path, sizeof path, "%s/none.safetensors", dir);
  tap_check(dlrt_trainer_save(t, path, 0), "a sharded trainer saves (before any step)");
  int epochs;
  is_status(dlrt_trainer_load(t, path, &epochs), DLRT_ERR_STATE,
            "loading into a sharded trainer is refused (%s)", dlrt_last_error());
  dlrt_trainer_destroy(t);
  t = make(dev, DLRT_F16);
  tap_check(dlrt_trainer_set_devices(t, devs, 2, NULL), "fp16: two replicas");
  is_status(dlrt_trainer_set_zero(t, 1, NULL), DLRT_ERR_INVALID_ARG,
            "fp16 loss scaling is refused (%s)", dlrt_last_error());
  dlrt_trainer_destroy(t);

  /* Each stage as the unsharded replicas (an uneven split of 24 + 40 rows). */
  float base, loss, resumed, resumed_base;
  dlrt_zero_info plain;
  char base_path[128], zpath[128];
  tap_check(train(dev, &d, 0, &base, &plain, base_path, sizeof base_path),
            "two unsharded replicas, 4 updates");
  tap_check(next_loss(dev, &d, base_path, &resumed_base), "its checkpoint resumes");
  for (int stage = 1; stage <= 3; stage++) {
    tap_check(train(dev, &d, stage, &loss, &zi, zpath, sizeof zpath), "stage %d, 4 updates",
              stage);
    ok(fabsf(loss - base) <= 1e-5f * fabsf(base), "stage %d: loss %.7f, unsharded %.7f", stage,
       loss, base);
    uint64_t shares[3] = {zi.optimizer_bytes, zi.grad_bytes, zi.param_bytes};
    uint64_t whole[3] = {plain.optimizer_bytes, plain.grad_bytes, plain.param_bytes};
    int held = zi.stage == stage && zi.replicas == 2;
    for (int k = 0; k < 3; k++)
      held &= k < stage ? shares[k] * 100 <= whole[k] * 55 : shares[k] == whole[k];
    ok(held, "stage %d holds its parts at <= 0.55x (%llu %llu %llu of %llu %llu %llu)", stage,
       (unsigned long long)shares[0], (unsigned long long)shares[1],
       (unsigned long long)shares[2], (unsigned long long)whole[0],
       (unsigned long long)whole[1], (unsigned long long)whole[2]);
    tap_check(next_loss(dev, &d, zpath, &resumed), "stage %d's checkpoint resumes on one device",
              stage);
    ok(fabsf(resumed - resumed_base) <= 1e-5f * fabsf(resumed_base),
       "stage %d: the next loss %.7f, the unsharded checkpoint's %.7f", stage, resumed,
       resumed_base);
  }
  dlrt_dataset_free(&d);
  dlrt_shutdown();
  tap_remove_tree(dir);
  return done_testing();
}
