/* checkpoint.c — a trainer's checkpoints: its parameters, optimizer state and
 * optimizer.step (dlrt_exec_export) in a safetensors file (replaced
 * atomically, with CRC-32s of the data and of the header), and metadata
 * saying where the run was (epochs_done, the loss scale) and what it was
 * (model, optimizer, lr, batch, seed, input). Nothing in a file is trusted:
 * every number read back is checked against its range and every fp32 tensor
 * for NaN and infinity before the trainer changes, and a trainer whose
 * parameters or optimizer state are not finite (training diverged) is never
 * saved, so the last good checkpoint stays. */
#include "config.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "train/train.h"
#include "util/status.h"

#define CHECKPOINT_FORMAT "dlrt-checkpoint-1"

/* A GPT's sizes in its checkpoint's metadata (written since dlgen; older
 * checkpoints have none), with the ranges dlrt_gpt_check allows. */
enum { GPT_KEYS = 5 };
static const struct {
  const char *key;
  int64_t min, max;
} gpt_keys[GPT_KEYS] = {{"gpt_layers", 1, 1000},      {"gpt_heads", 1, 1 << 20},
                        {"gpt_embd", 1, 1 << 20},     {"gpt_context", 1, 1 << 20},
                        {"gpt_vocab", 2, 1 << 24}};

/* The first NaN or infinite element of an fp32 tensor in tensors[0..n):
 * 1 with *which and *at (its tensor and element), 0 when all are finite. */
static int first_non_finite(const dlrt_host_tensor *tensors, int n, int *which, size_t *at,
                            float *value) {
  for (int i = 0; i < n; i++) {
    if (tensors[i].dtype != DLRT_F32) continue;
    const float *x = tensors[i].data;
    for (size_t k = 0; k < tensors[i].bytes / sizeof *x; k++)
      if (!isfinite(x[k])) {
        *which = i, *at = k, *value = x[k];
        return 1;
      }
  }
  return 0;
}

static const char *non_finite_name(float x) { return isnan(x) ? "NaN" : x > 0 ? "+inf" : "-inf"; }

int dlrt_trainer_save(dlrt_trainer_t *t, const char *path, int epochs_done) {
  DLRT__CHECK_ARG(t && path, "trainer or path is NULL");
  DLRT__CHECK_ARG(epochs_done >= 0, "dlrt_trainer_save: epochs_done is %d; it counts the "
                  "epochs run, from 0", epochs_done);
  dlrt_host_tensor *tensors;
  int n;
  /* Tensor parallel: the shards gathered into whole tensors; ZeRO: whole too. */
  int rc = t->tp ? dlrt__tp_export(t, &tensors, &n) : dlrt__trainer_export(t, 1, &tensors, &n);
  if (rc < 0) return rc;
  int which;
  size_t at;
  float bad;
  if (first_non_finite(tensors, n, &which, &at, &bad)) {
    rc = dlrt__set_error(DLRT_ERR_STATE, "%s: not saved: %s holds %s (element %zu): training "
                         "diverged (lower the learning rate, clip the gradients or scale the "
                         "loss); the previous checkpoint, if any, is untouched", path,
                         tensors[which].name, non_finite_name(bad), at);
    dlrt_host_tensors_free(tensors, n);
    return rc;
  }
  /* Tensor parallel ranks: rank 0 writes the file (tensor x pipeline: every
   * rank gathered it whole). */
  if ((t->tp && dlrt__tp_rank(t) > 0) || (t->ptp && dlrt__ptp_rank(t) > 0)) {
    dlrt_host_tensors_free(tensors, n);
    return DLRT_OK;
  }
  char epochs[32], seed[32], batch[32], lr[32], shape[64];
  snprintf(epochs, sizeof epochs, "%d", epochs_done);
  snprintf(seed, sizeof seed, "%" PRIu64, t->cfg.seed);
  snprintf(batch, sizeof batch, "%lld", (long long)t->batch);
  snprintf(lr, sizeof lr, "%.9g", t->cfg.opt.lr);
  snprintf(shape, sizeof shape, "%lld x %lld, %lld classes", (long long)t->height,
           (long long)t->width, (long long)t->classes);
  /* Loss scaling goes on where it was (GradScaler's state_dict): the scale
   * and the clean steps since it last changed. */
  dlrt__loss_scale_saved ls;
  dlrt__exec_save_loss_scale(t->n_reps ? t->reps[0].e : t->e, &ls);
  char scale[32], clean[32];
  snprintf(scale, sizeof scale, "%.9g", ls.scale);
  snprintf(clean, sizeof clean, "%lld", (long long)ls.clean_steps);
  /* A GPT's sizes (the preset's, overridden), which its tensors do not all
   * tell (the heads): what dlgen builds its decode graph from. */
  dlrt_gpt_config gpt;
  char sizes[GPT_KEYS][24];
  const char *gpt_meta[2 * GPT_KEYS + 1] = {NULL};
  if (dlrt__gpt_model(&t->cfg, &gpt)) {
    int64_t values[GPT_KEYS] = {gpt.layers, gpt.heads, gpt.embd, gpt.context, gpt.vocab};
    for (int i = 0; i < GPT_KEYS; i++) {
      snprintf(sizes[i], sizeof sizes[i], "%lld", (long long)values[i]);
      gpt_meta[2 * i] = gpt_keys[i].key;
      gpt_meta[2 * i + 1] = sizes[i];
    }
  }
  const char *head[] = {"format", CHECKPOINT_FORMAT, "model", t->model, "optimizer",
                        dlrt_optimizer_name(t->cfg.opt.kind), "lr", lr, "batch", batch,
                        "seed", seed, "input", shape, "epochs_done", epochs};
  const char *tail[] = {"loss_scale", scale, "loss_scale_clean_steps", clean};
  const char *meta[sizeof head / sizeof *head + 2 * GPT_KEYS + sizeof tail / sizeof *tail + 1];
  int k = 0;
  for (size_t i = 0; i < sizeof head / sizeof *head; i++) meta[k++] = head[i];
  for (int i = 0; gpt_meta[i]; i++) meta[k++] = gpt_meta[i];
  for (size_t i = 0; ls.scaler.enabled && i < sizeof tail / sizeof *tail; i++)
    meta[k++] = tail[i];
  meta[k] = NULL;
  rc = dlrt_safetensors_save(path, tensors, n, meta);
  dlrt_host_tensors_free(tensors, n);
  return rc;
}

/* ------------------------------------------------------------- loading */

/* What a checkpoint's metadata says about where the run was. */
typedef struct {
  int64_t epochs_done;
  double loss_scale; /* 0: none saved */
  int64_t clean_steps;
  int64_t gpt[GPT_KEYS]; /* a GPT's sizes in gpt_keys' order; 0: not saved */
} saved_state;

static int bad_value(const char *path, const char *key, const char *value, const char *want) {
  return dlrt__set_error(DLRT_ERR_IO, "%s: checkpoint metadata \"%s\" is \"%.40s%s\"; expected "
                         "%s: the file is damaged or was edited; use an earlier copy", path,
                         key, value, strlen(value) > 40 ? "..." : "", want);
}

/* A decimal integer in [min, max], all of `text` (no spaces, signs only '-'). */
static int parse_int(const char *path, const char *key, const char *text, int64_t min,
                     int64_t max, int64_t *out) {
  char want[96];
  snprintf(want, sizeof want, "an integer from %lld to %lld", (long long)min, (long long)max);
  const char *digits = text[0] == '-' ? text + 1 : text;
  if (!(*digits >= '0' && *digits <= '9')) return bad_value(path, key, text, want);
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || *end || v < min || v > max) return bad_value(path, key, text, want);
  *out = v;
  return DLRT_OK;
}

/* A decimal integer from 0 to UINT64_MAX. */
static int parse_u64(const char *path, const char *key, const char *text, uint64_t *out) {
  static const char want[] = "an integer from 0 to 18446744073709551615";
  if (!(text[0] >= '0' && text[0] <= '9')) return bad_value(path, key, text, want);
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || *end) return bad_value(path, key, text, want);
  *out = v;
  return DLRT_OK;
}

/* A finite decimal number in [min, max]. */
static int parse_real(const char *path, const char *key, const char *text, double min,
                      double max, const char *want, double *out) {
  const char *first = text[0] == '-' ? text + 1 : text;
  if (!((*first >= '0' && *first <= '9') || *first == '.'))
    return bad_value(path, key, text, want);
  char *end;
  double v = strtod(text, &end);
  if (*end || !isfinite(v) || v < min || v > max) return bad_value(path, key, text, want);
  *out = v;
  return DLRT_OK;
}

/* Checks every number dlrt writes in a checkpoint's metadata, and the format. */
static int read_metadata(const char *path, char **meta, saved_state *out) {
  memset(out, 0, sizeof *out);
  const char *format = NULL;
  int rc = DLRT_OK;
  for (int i = 0; meta && meta[i] && rc == DLRT_OK; i += 2) {
    const char *key = meta[i], *value = meta[i + 1];
    int64_t whole;
    uint64_t seed;
    double real;
    if (strcmp(key, "format") == 0) {
      format = value;
    } else if (strcmp(key, "epochs_done") == 0) {
      rc = parse_int(path, key, value, 0, INT_MAX, &out->epochs_done);
    } else if (strcmp(key, "loss_scale_clean_steps") == 0) {
      rc = parse_int(path, key, value, 0, INT_MAX, &out->clean_steps);
    } else if (strcmp(key, "batch") == 0) {
      rc = parse_int(path, key, value, 1, INT64_MAX, &whole);
    } else if (strcmp(key, "seed") == 0) {
      rc = parse_u64(path, key, value, &seed);
    } else if (strcmp(key, "lr") == 0) {
      rc = parse_real(path, key, value, 0, FLT_MAX, "a finite number >= 0", &real);
    } else if (strncmp(key, "gpt_", 4) == 0) {
      for (int k = 0; k < GPT_KEYS; k++)
        if (strcmp(key, gpt_keys[k].key) == 0)
          rc = parse_int(path, key, value, gpt_keys[k].min, gpt_keys[k].max, &out->gpt[k]);
    } else if (strcmp(key, "loss_scale") == 0) {
      /* Both the scale and its reciprocal (what unscales the gradients)
       * must be finite fp32 numbers. */
      char want[128];
      snprintf(want, sizeof want, "a loss scale from %g to %g, whose reciprocal is finite "
               "too", (double)FLT_MIN, (double)FLT_MAX);
      rc = parse_real(path, key, value, FLT_MIN, FLT_MAX, want, &out->loss_scale);
    }
  }
  if (rc == DLRT_OK && (!format || strcmp(format, CHECKPOINT_FORMAT) != 0))
    rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s is a safetensors file but not a dlrt "
                         "checkpoint (no format " CHECKPOINT_FORMAT " in its metadata)", path);
  return rc;
}

static int import_all(dlrt_trainer_t *t, const char *path, const dlrt_host_tensor *tensors,
                      int n) {
  /* Tensor parallel: cut into the shards (the trainer's executor holds no
   * storage then). */
  int rc = t->tp    ? dlrt__tp_import(t, tensors, n)
           : t->ptp ? DLRT_OK /* tensor x pipeline: the stages' shards only (below) */
                    : dlrt_exec_import(t->e, tensors, n);
  for (int i = 0; i < t->n_reps && rc == DLRT_OK; i++)
    rc = dlrt_exec_import(t->reps[i].e, tensors, n); /* every replica the same */
  for (int i = 0; i < t->n_stages && rc == DLRT_OK; i++) /* each takes its layers' */
    rc = t->ptp ? dlrt__ptp_stage_import(t, t->stages[i].e, tensors, n) /* its shard's */
                : dlrt_exec_import(t->stages[i].e, tensors, n);
  if (rc == DLRT_OK && t->ptp) rc = dlrt__ptp_sync(t);
  if (rc < 0) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", dlrt_last_error());
    rc = dlrt__set_error(rc, "%s: %s", path, msg);
  }
  return rc;
}

int dlrt_trainer_load(dlrt_trainer_t *t, const char *path, int *epochs_done) {
  DLRT__CHECK_ARG(t && path, "trainer or path is NULL");
  if (t->zero || t->stage_zero)
    return dlrt__set_error(DLRT_ERR_STATE, "dlrt_trainer_load: the model states are sharded "
                           "(dlrt_trainer_set_zero): load the checkpoint before sharding");
  dlrt_host_tensor *tensors = NULL;
  char **meta = NULL;
  int n = 0;
  int rc = dlrt_safetensors_load(path, &tensors, &n, &meta);
  if (rc < 0) return rc;
  /* Everything is checked before the trainer changes. */
  saved_state saved;
  int which;
  size_t at;
  float bad;
  rc = read_metadata(path, meta, &saved);
  dlrt_gpt_config gpt;
  /* The heads change no tensor's shape: only the metadata tells them apart. */
  if (rc == DLRT_OK && dlrt__gpt_model(&t->cfg, &gpt) && saved.gpt[1] &&
      saved.gpt[1] != gpt.heads)
    rc = dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: the checkpoint's GPT has %lld heads, the "
                         "model %lld: resume with --heads %lld", path, (long long)saved.gpt[1],
                         (long long)gpt.heads, (long long)saved.gpt[1]);
  if (rc == DLRT_OK && first_non_finite(tensors, n, &which, &at, &bad))
    rc = dlrt__set_error(DLRT_ERR_IO, "%s: %s holds %s (element %zu): the checkpoint is "
                         "damaged or was saved by a run that diverged; resume from an earlier "
                         "one", path, tensors[which].name, non_finite_name(bad), at);
  if (rc == DLRT_OK) rc = import_all(t, path, tensors, n);
  if (rc == DLRT_OK) {
    dlrt_exec_info info;
    if (dlrt_exec_info_get(t->e, &info) == DLRT_OK) t->steps = info.steps;
  }
  dlrt__loss_scale_saved ls;
  dlrt__exec_save_loss_scale(t->e, &ls);
  if (rc == DLRT_OK && ls.scaler.enabled && saved.loss_scale > 0) {
    /* The run scales its loss and the checkpoint's did too: go on from there. */
    ls.scale = (float)saved.loss_scale;
    ls.clean_steps = saved.clean_steps;
    dlrt__exec_restore_loss_scale(t->e, &ls);
    for (int i = 0; i < t->n_reps; i++) dlrt__exec_restore_loss_scale(t->reps[i].e, &ls);
  }
  if (rc == DLRT_OK && epochs_done) *epochs_done = (int)saved.epochs_done;
  dlrt_safetensors_free(tensors, n, meta);
  return rc;
}

/* ------------------------------------------------------------- a GPT for sampling */

static const dlrt_host_tensor *find_tensor(const dlrt_host_tensor *tensors, int n,
                                           const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(tensors[i].name, name) == 0) return &tensors[i];
  return NULL;
}

static const char *meta_value(char **meta, const char *key) {
  for (int i = 0; meta && meta[i]; i += 2)
    if (strcmp(meta[i], key) == 0) return meta[i + 1];
  return NULL;
}

/* The sizes from the tensors' shapes (all but the heads), then the heads
 * and a check of the rest from the metadata; checkpoints before the sizes
 * were saved take the heads of their preset when its sizes are theirs. */
static int gpt_sizes(const char *path, char **meta, const saved_state *saved,
                     const dlrt_host_tensor *tensors, int n, dlrt_gpt_config *cfg) {
  const char *model = meta_value(meta, "model");
  const dlrt_host_tensor *wte = find_tensor(tensors, n, "transformer.wte.weight");
  const dlrt_host_tensor *wpe = find_tensor(tensors, n, "transformer.wpe.weight");
  if (!wte || !wpe)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s is a checkpoint of model \"%.60s\", "
                           "not of a GPT (it has no transformer.%s.weight): train one with "
                           "dltrain --model gpt-mini --save FILE", path, model ? model : "?",
                           wte ? "wpe" : "wte");
  if (wte->ndim != 2 || wpe->ndim != 2 || wpe->shape[1] != wte->shape[1])
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: transformer.wte.weight and "
                           "transformer.wpe.weight are not vocabulary x width and context x "
                           "width: the file is damaged or not a GPT-2", path);
  memset(cfg, 0, sizeof *cfg);
  cfg->vocab = wte->shape[0], cfg->embd = wte->shape[1], cfg->context = wpe->shape[0];
  for (char name[64];; cfg->layers++) {
    snprintf(name, sizeof name, "transformer.h.%lld.ln_1.weight", (long long)cfg->layers);
    if (!find_tensor(tensors, n, name)) break;
  }
  int64_t shapes[GPT_KEYS] = {cfg->layers, 0, cfg->embd, cfg->context, cfg->vocab};
  for (int k = 0; k < GPT_KEYS; k++)
    if (saved->gpt[k] && k != 1 && saved->gpt[k] != shapes[k])
      return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: its metadata says %s %lld, its "
                             "tensors %lld: the file is damaged or was edited", path,
                             gpt_keys[k].key, (long long)saved->gpt[k], (long long)shapes[k]);
  cfg->heads = saved->gpt[1];
  dlrt_gpt_config preset;
  if (!cfg->heads && model && dlrt_gpt_preset(model, &preset) == DLRT_OK &&
      preset.layers == cfg->layers && preset.embd == cfg->embd &&
      preset.context == cfg->context && preset.vocab == cfg->vocab)
    cfg->heads = preset.heads;
  if (!cfg->heads)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s: a GPT (\"%.60s\", %lld layers, width "
                           "%lld) whose heads the checkpoint does not record (saved by a dlrt "
                           "before gpt_heads, with sizes of its own): save it again with this "
                           "dltrain (--resume FILE --save FILE)", path, model ? model : "?",
                           (long long)cfg->layers, (long long)cfg->embd);
  int rc = dlrt_gpt_check(cfg);
  if (rc < 0) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", dlrt_last_error());
    return dlrt__set_error(rc, "%s: %s", path, msg);
  }
  return DLRT_OK;
}

int dlrt_gpt_checkpoint_load(const char *path, dlrt_gpt_config *cfg, dlrt_host_tensor **tensors,
                             int *n) {
  DLRT__CHECK_ARG(path && cfg && tensors && n, "dlrt_gpt_checkpoint_load: an argument is NULL");
  *tensors = NULL, *n = 0;
  dlrt_host_tensor *all = NULL;
  char **meta = NULL;
  int count = 0, which;
  size_t at;
  float bad;
  saved_state saved;
  int rc = dlrt_safetensors_load(path, &all, &count, &meta);
  if (rc < 0) return rc;
  rc = read_metadata(path, meta, &saved);
  if (rc == DLRT_OK) rc = gpt_sizes(path, meta, &saved, all, count, cfg);
  if (rc == DLRT_OK && first_non_finite(all, count, &which, &at, &bad))
    rc = dlrt__set_error(DLRT_ERR_IO, "%s: %s holds %s (element %zu): the checkpoint is "
                         "damaged or was saved by a run that diverged", path, all[which].name,
                         non_finite_name(bad), at);
  dlrt_safetensors_free(rc == DLRT_OK ? NULL : all, count, meta);
  if (rc == DLRT_OK) *tensors = all, *n = count;
  return rc;
}
