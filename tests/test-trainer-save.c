/*
 * test-trainer-save.c — what dlrt_trainer_save writes and dlrt_trainer_load
 * believes, on the CPU. A checkpoint round-trips; every number read back
 * from its metadata (epochs_done, loss_scale, loss_scale_clean_steps, seed,
 * batch, lr) and its optimizer.step is checked, and a value out of range or
 * not a number is refused with a message naming the file, the key and the
 * value, leaving the trainer as it was; so is a NaN or infinite parameter or
 * optimizer state in the file. A trainer that diverged (a learning rate of
 * 1e30 makes its parameters NaN) is never saved: the save fails naming a
 * tensor and the previous checkpoint is untouched, byte for byte. The
 * metadata is covered by the file's header checksum: an edited value is
 * refused as corruption.
 * Points: computed at run time (done_testing).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "tap.h"

#define PATH_CAP 4096

static char root[PATH_CAP / 2];
static char model_path[PATH_CAP];

static const char *tmp_path(const char *rel) { return tap_join(root, rel); }

static int same_file(const char *a, const char *b) {
  size_t la = 0, lb = 0;
  unsigned char *x = tap_read_file(a, &la), *y = tap_read_file(b, &lb);
  int same = x && y && la == lb && memcmp(x, y, la) == 0;
  free(x);
  free(y);
  return same;
}

/* A small classifier (one hidden layer of 16) with Adam, or SGD at `lr`. */
static int make_trainer(dlrt_device_t *dev, dlrt_optimizer_kind kind, float lr,
                        dlrt_trainer_t **t) {
  dlrt_trainer_config cfg = {.model = model_path, .batch = 32, .seed = 1};
  cfg.opt = dlrt_optimizer_defaults(kind);
  if (lr > 0) cfg.opt.lr = lr;
  return dlrt_trainer_create(dev, &cfg, 28, 28, 10, t);
}

/* ---------------------------------------------------- metadata checks */

/* good's tensors and metadata with `key` set to `value` (added when absent),
 * saved to bad.safetensors: a file whose checksums match its content. */
static int write_edited(const char *good, const char *key, const char *value) {
  dlrt_host_tensor *t = NULL;
  char **meta = NULL;
  int n = 0, rc = dlrt_safetensors_load(good, &t, &n, &meta);
  if (rc < 0) return rc;
  const char *edited[64];
  int k = 0, found = 0;
  for (int i = 0; meta[i] && k < 60; i += 2) {
    edited[k++] = meta[i];
    edited[k++] = strcmp(meta[i], key) == 0 ? (found = 1, value) : meta[i + 1];
  }
  if (!found) edited[k++] = key, edited[k++] = value;
  edited[k] = NULL;
  rc = dlrt_safetensors_save(tmp_path("bad.safetensors"), t, n, edited);
  dlrt_safetensors_free(t, n, meta);
  return rc;
}

/* good's tensors with the one named `name` (or, for "*SUFFIX", the first
 * whose name ends in SUFFIX) changed by `edit`. */
static int write_tensor_edited(const char *good, const char *name,
                               void (*edit)(dlrt_host_tensor *)) {
  dlrt_host_tensor *t = NULL;
  char **meta = NULL;
  int n = 0, rc = dlrt_safetensors_load(good, &t, &n, &meta);
  if (rc < 0) return rc;
  int found = 0;
  size_t suffix = strlen(name) - 1; /* "*.weight": the first name ending in ".weight" */
  for (int i = 0; i < n; i++)
    if (strcmp(t[i].name, name) == 0 ||
        (name[0] == '*' && strlen(t[i].name) >= suffix &&
         strcmp(t[i].name + strlen(t[i].name) - suffix, name + 1) == 0)) {
      edit(&t[i]);
      found = 1;
      break;
    }
  rc = found ? dlrt_safetensors_save(tmp_path("bad.safetensors"), t, n,
                                     (const char *const *)meta)
             : DLRT_ERR_NOT_FOUND;
  dlrt_safetensors_free(t, n, meta);
  return rc;
}

static void step_minus_one(dlrt_host_tensor *t) { *(int32_t *)t->data = -1; }
static void step_as_float(dlrt_host_tensor *t) {
  float one = 1.0f;
  t->dtype = DLRT_F32;
  memcpy(t->data, &one, 4);
}
static void first_nan(dlrt_host_tensor *t) { ((float *)t->data)[0] = NAN; }
static void last_inf(dlrt_host_tensor *t) {
  ((float *)t->data)[t->bytes / sizeof(float) - 1] = INFINITY;
}

/* Loading bad.safetensors into t fails naming the file and `words`. */
static void expect_load_refused(dlrt_trainer_t *t, const char *what, const char *word1,
                                const char *word2) {
  const char *bad = tmp_path("bad.safetensors");
  int epochs = 12345;
  int rc = dlrt_trainer_load(t, bad, &epochs);
  ok(rc < 0, "a checkpoint with %s is refused", what);
  const char *msg = dlrt_last_error();
  ok(rc < 0 && strstr(msg, bad) && strstr(msg, word1) && (!word2 || strstr(msg, word2)),
     "the message names the file, %s%s%s: %s", word1, word2 ? " and " : "", word2 ? word2 : "",
     rc < 0 ? msg : "(it loaded)");
}

static void test_metadata(dlrt_trainer_t *t, const char *good) {
  static const struct {
    const char *key, *value;
  } bad[] = {
      {"epochs_done", "-3"},          {"epochs_done", "abc"},
      {"epochs_done", "99999999999"}, {"epochs_done", ""},
      {"epochs_done", "1.5"},         {"epochs_done", " 1"},
      {"loss_scale", "nan"},          {"loss_scale", "-1"},
      {"loss_scale", "0"},            {"loss_scale", "inf"},
      {"loss_scale", "1e-45"},        {"loss_scale", "65536x"},
      {"loss_scale_clean_steps", "-1"}, {"loss_scale_clean_steps", "many"},
      {"seed", "-1"},                 {"seed", "18446744073709551616"},
      {"batch", "0"},                 {"lr", "nan"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char what[128];
    snprintf(what, sizeof what, "%s \"%s\"", bad[i].key, bad[i].value);
    if (!tap_check(write_edited(good, bad[i].key, bad[i].value), "write a checkpoint with %s",
                   what))
      continue;
    expect_load_refused(t, what, bad[i].key, bad[i].value[0] && bad[i].value[0] != ' '
                                                 ? bad[i].value : NULL);
  }
  if (tap_check(write_tensor_edited(good, "optimizer.step", step_minus_one),
                "write a checkpoint with optimizer.step -1"))
    expect_load_refused(t, "optimizer.step -1", "optimizer.step", "-1");
  if (tap_check(write_tensor_edited(good, "optimizer.step", step_as_float),
                "write a checkpoint with an F32 optimizer.step"))
    expect_load_refused(t, "an F32 optimizer.step", "optimizer.step", NULL);
  if (tap_check(write_tensor_edited(good, "*.weight", first_nan),
                "write a checkpoint with a NaN weight"))
    expect_load_refused(t, "a NaN weight", "weight", "NaN");
  if (tap_check(write_tensor_edited(good, "*.exp_avg_sq", last_inf),
                "write a checkpoint with an infinite optimizer state"))
    expect_load_refused(t, "an infinite optimizer state", "exp_avg_sq", NULL);
}

/* The header checksum: a value edited in place (same length, the JSON
 * still valid) is corruption. */
static void test_edited_in_place(dlrt_trainer_t *t, const char *good) {
  size_t len = 0;
  unsigned char *bytes = tap_read_file(good, &len);
  const char *key = "\"epochs_done\":\"";
  unsigned char *at = NULL;
  for (size_t i = 0; bytes && i + strlen(key) < len && !at; i++)
    if (memcmp(bytes + i, key, strlen(key)) == 0) at = bytes + i + strlen(key);
  if (!ok(at != NULL, "the checkpoint's header holds epochs_done")) {
    free(bytes);
    return;
  }
  *at = *at == '9' ? '8' : (unsigned char)(*at + 1); /* 1 -> 2 */
  FILE *f = fopen(tmp_path("bad.safetensors"), "wb");
  if (!f || fwrite(bytes, 1, len, f) != len || fclose(f) != 0) bail_out("cannot write");
  free(bytes);
  expect_load_refused(t, "epochs_done edited in place", "corrupt", "CRC-32");
}

/* ---------------------------------------------------------------- main */

int main(void) {
  tap_tempdir("dlrt-trainer-save", root, sizeof root);
  snprintf(model_path, sizeof model_path, "%s/small.model", root);
  FILE *mf = fopen(model_path, "w");
  if (!mf || fputs("linear 16\nrelu\n", mf) < 0 || fclose(mf) != 0)
    bail_out("cannot write %s", model_path);
  dlrt_device_t *dev = NULL;
  dlrt_dataset data;
  if (!tap_check(dlrt_device_open("cpu", &dev), "open the cpu") ||
      !tap_check(dlrt_dataset_generate(256, 10, 1, &data), "generate 256 images"))
    return done_testing();

  dlrt_trainer_t *t = NULL, *fresh = NULL;
  dlrt_epoch_stats st;
  char good[PATH_CAP], copy[PATH_CAP];
  snprintf(good, sizeof good, "%s/good.safetensors", root);
  snprintf(copy, sizeof copy, "%s/copy.safetensors", root);
  if (!tap_check(make_trainer(dev, DLRT_OPT_ADAM, 0, &t), "build a trainer") ||
      !tap_check(dlrt_trainer_epoch(t, &data, 0, NULL, NULL, &st), "train one epoch") ||
      !tap_check(dlrt_trainer_save(t, good, 1), "save a checkpoint after 1 epoch"))
    goto out;
  int epochs = -1;
  if (tap_check(make_trainer(dev, DLRT_OPT_ADAM, 0, &fresh), "build a second trainer") &&
      tap_check(dlrt_trainer_load(fresh, good, &epochs), "it loads the checkpoint"))
    is_int(epochs, 1, "epochs_done comes back as 1");
  is_status(dlrt_trainer_save(t, tmp_path("negative.safetensors"), -1), DLRT_ERR_INVALID_ARG,
            "saving epochs_done -1 is refused");

  if (fresh) {
    test_metadata(fresh, good);
    test_edited_in_place(fresh, good);
    /* Every refused load left the trainer as the good one made it. */
    if (tap_check(dlrt_trainer_save(fresh, copy, 1), "save the trainer after the refusals"))
      ok(same_file(copy, good), "it holds exactly the good checkpoint: no refused load "
                                "changed it");
  }

  /* Divergence: SGD at 1e30 blows the parameters up to inf, then NaN. */
  dlrt_trainer_t *wild = NULL;
  if (tap_check(make_trainer(dev, DLRT_OPT_SGD, 1e30f, &wild), "build a trainer with lr 1e30")) {
    int rc = dlrt_trainer_epoch(wild, &data, 0, NULL, NULL, &st);
    diag("the diverging epoch returned %s (loss %g)", dlrt_err_name(rc), (double)st.loss);
    rc = dlrt_trainer_save(wild, copy, 1);
    ok(rc < 0, "a trainer whose parameters are not finite is not saved");
    const char *msg = dlrt_last_error();
    ok(rc < 0 && strstr(msg, copy) && strstr(msg, "diverged") &&
           (strstr(msg, "weight") || strstr(msg, "bias")),
       "the message names the file and a tensor and says training diverged: %s",
       rc < 0 ? msg : "(it saved)");
    ok(same_file(copy, good), "the previous checkpoint is untouched");
    dlrt_trainer_destroy(wild);
  }
out:
  dlrt_trainer_destroy(fresh);
  dlrt_trainer_destroy(t);
  dlrt_dataset_free(&data);
  tap_remove_tree(root);
  dlrt_shutdown();
  return done_testing();
}
