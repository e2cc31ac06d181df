/*
 * test-param-stream.c — parameters streamed from the host
 * (dlrt_exec_offload_params): a small classifier (Adam and SGD with
 * momentum) and a two-block GPT (Adam and AdamW; its embedding read by the
 * first node and by the tied head) trained with their parameters,
 * optimizer state and gradients on the host end with the losses,
 * parameters and state of the run on the device bit for bit, for
 * look-aheads of 1 to 3 nodes, the updates on the host thread during the
 * backward pass or at their nodes (DLRT_PARAM_OVERLAP=0); under bf16 and
 * fp16 (the 16-bit copies made on the host and fetched instead of the
 * masters; loss scaling's overflow check on the host, skipping the same
 * steps), with accumulation over 2 micro-batches (the sums on the host)
 * and clipping by global norm (its squares summed on the host in the
 * device's order), and all of them together. Each parameter
 * is fetched every step, and again for the backward pass where its next
 * use is further than the look-ahead; every gradient comes back; the
 * device holds fewer parameter bytes at once than the model has, and the
 * step's device peak is below the device run's. Evaluation runs stream
 * too; reads and writes of streamed parameters go to their host copies;
 * what streaming does not go with is refused, naming it. The optimizer
 * state past a host budget lives on disk (dlrt_exec_param_state_limit),
 * through slots a chunk at a time: the same bits with SGD, Adam and AdamW,
 * a state more than a third of the budget, chunks of 64 elements, bf16
 * with accumulation and clipping; a budget below the least chunks' slots
 * and a spill folder too small are refused, naming the least and the
 * folder. On every device
 * present (tap_for_each_device).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "dlrt.h"
#include "tap.h"

enum { BATCH = 16, SIDE = 8, CLASSES = 4, STEPS = 4, T = 16 };

static char dir[64], model_path[128];

typedef struct {
  dlrt_graph_t *g;
  dlrt_exec_t *e;
  dlrt_tensor_t *x, *labels, *loss;
  int gpt;
} net;

static void net_free(net *n) {
  dlrt_exec_destroy(n->e);
  dlrt_graph_destroy(n->g);
  memset(n, 0, sizeof *n);
}

static dlrt_gpt_config small_gpt(void) {
  dlrt_gpt_config c = {.layers = 2, .heads = 2, .embd = 32, .context = T, .vocab = 64};
  return c;
}

/* What a run does besides: its compute type, micro-batches per update, a
 * clip norm, dynamic loss scaling from an initial scale (0: off). */
typedef struct {
  dlrt_dtype precision;
  int accum;
  float clip, loss_scale;
  uint64_t state_limit; /* streaming: the optimizer state's host budget (0: all there) */
  int chunk_bytes;      /* DLRT_PARAM_DISK_CHUNK (0: its default) */
} extras;

static const extras plain = {DLRT_F32, 1, 0, 0, 0};

/* The classifier (linear 64, relu, linear 48, relu, linear 4) or the GPT;
 * streaming when ahead is not 0 (< 0: the look-ahead chosen). */
static int net_make_x(dlrt_device_t *dev, int gpt, dlrt_optimizer_kind kind, int ahead,
                      const extras *x, net *n) {
  memset(n, 0, sizeof *n);
  n->gpt = gpt;
  int rc = dlrt_graph_create(&n->g);
  if (rc < 0) return rc;
  if (gpt) {
    int64_t ts[2] = {BATCH / 4, T}, ys[1] = {BATCH / 4 * T};
    dlrt_gpt_config c = small_gpt();
    n->x = dlrt_input(n->g, "tokens", DLRT_I32, 2, ts);
    n->labels = dlrt_input(n->g, "targets", DLRT_I32, 1, ys);
    if ((rc = dlrt_gpt_build_loss(n->g, &c, n->x, n->labels, 0.0f, &n->loss)) < 0) return rc;
    n->loss = dlrt_keep(n->g, n->loss);
  } else {
    int64_t xs[4] = {BATCH, 1, SIDE, SIDE}, ls[1] = {BATCH};
    n->x = dlrt_input(n->g, "images", DLRT_F32, 4, xs);
    n->labels = dlrt_input(n->g, "labels", DLRT_I32, 1, ls);
    dlrt_tensor_t *logits;
    if ((rc = dlrt_model_build(n->g, model_path, n->x, CLASSES, &logits)) < 0) return rc;
    n->loss = dlrt_keep(n->g, dlrt_cross_entropy(n->g, logits, n->labels, 0.0f));
  }
  dlrt_optimizer opt = dlrt_optimizer_defaults(kind);
  if (kind == DLRT_OPT_SGD) opt.momentum = 0.9f, opt.lr = 0.05f;
  if (kind == DLRT_OPT_ADAMW) opt.weight_decay = 0.1f;
  if ((x->precision != DLRT_F32 && (rc = dlrt_graph_set_precision(n->g, x->precision)) < 0) ||
      (rc = dlrt_graph_backward(n->g, n->loss)) < 0 ||
      (rc = dlrt_graph_optimize(n->g, &opt)) < 0 ||
      (rc = dlrt_exec_create(n->g, dev, 5, &n->e)) < 0)
    return rc;
  if (x->accum > 1 && (rc = dlrt_exec_set_accumulation(n->e, x->accum)) < 0) return rc;
  if (x->clip > 0 && (rc = dlrt_exec_set_clip_norm(n->e, x->clip)) < 0) return rc;
  if (x->loss_scale > 0) {
    dlrt_loss_scaler ls = dlrt_loss_scaler_defaults();
    ls.init_scale = x->loss_scale;
    ls.growth_interval = 2; /* grows within the test's steps */
    if ((rc = dlrt_exec_set_loss_scaler(n->e, &ls)) < 0) return rc;
  }
  if (ahead == 0) return DLRT_OK;
  /* ahead < 0: chosen by the executor after the first training run (0). */
  if ((rc = dlrt_exec_offload_params(n->e, ahead < 0 ? 0 : ahead)) < 0) return rc;
  if (!x->state_limit) return DLRT_OK;
  char chunk[32];
  snprintf(chunk, sizeof chunk, "%d", x->chunk_bytes);
  if (x->chunk_bytes) setenv("DLRT_PARAM_DISK_CHUNK", chunk, 1);
  rc = dlrt_exec_param_state_limit(n->e, x->state_limit);
  unsetenv("DLRT_PARAM_DISK_CHUNK");
  return rc;
}

static int net_make(dlrt_device_t *dev, int gpt, dlrt_optimizer_kind kind, int ahead, net *n) {
  return net_make_x(dev, gpt, kind, ahead, &plain, n);
}

/* Steps [first, last) on data drawn from the step number; the losses. */
static int net_train(net *n, int first, int last, dlrt_run_mode mode, float *losses) {
  float x[BATCH * SIDE * SIDE];
  int32_t y[BATCH * T];
  for (int s = first; s < last; s++) {
    uint64_t r = 0x1234567u + (uint64_t)s * 0x9e3779b97f4a7c15ull;
    int rc;
    if (n->gpt) {
      int32_t tok[BATCH / 4 * T];
      for (int i = 0; i < BATCH / 4 * T; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        tok[i] = (int32_t)(r % 64);
        y[i] = (int32_t)((tok[i] * 5 + 3) % 64);
      }
      rc = dlrt_exec_write(n->e, n->x, tok, sizeof tok);
      if (rc == DLRT_OK) rc = dlrt_exec_write(n->e, n->labels, y, sizeof(int32_t) * BATCH / 4 * T);
    } else {
      for (int i = 0; i < BATCH * SIDE * SIDE; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        x[i] = (float)(r % 1000) / 1000.0f - 0.5f;
      }
      for (int i = 0; i < BATCH; i++) y[i] = (int32_t)((i * 7 + s) % CLASSES);
      rc = dlrt_exec_write(n->e, n->x, x, sizeof x);
      if (rc == DLRT_OK) rc = dlrt_exec_write(n->e, n->labels, y, sizeof(int32_t) * BATCH);
    }
    if (rc == DLRT_OK) rc = dlrt_exec_run(n->e, mode);
    if (rc == DLRT_OK) rc = dlrt_exec_read(n->e, n->loss, &losses[s - first], sizeof(float));
    if (rc < 0) return rc;
  }
  return DLRT_OK;
}

/* The parameters and optimizer state, as one byte string. */
static unsigned char *net_state(net *n, size_t *bytes) {
  dlrt_host_tensor *t;
  int count;
  if (dlrt_exec_export(n->e, 1, &t, &count) < 0) return NULL;
  size_t total = 0;
  for (int i = 0; i < count; i++) total += t[i].bytes;
  unsigned char *out = malloc(total ? total : 1), *at = out;
  for (int i = 0; out && i < count; i++) {
    memcpy(at, t[i].data, t[i].bytes);
    at += t[i].bytes;
  }
  dlrt_safetensors_free(t, count, NULL);
  *bytes = total;
  return out;
}

/* The largest parameter's optimizer state, bytes (2 states for Adam, 1
 * for SGD with momentum). */
static uint64_t largest_state(net *n, dlrt_optimizer_kind kind) {
  dlrt_host_tensor *t;
  int count;
  uint64_t most = 0;
  if (dlrt_exec_export(n->e, 0, &t, &count) < 0) return 0;
  for (int i = 0; i < count; i++)
    if (t[i].bytes > most) most = t[i].bytes;
  dlrt_safetensors_free(t, count, NULL);
  return most * (kind == DLRT_OPT_SGD ? 1 : 2);
}

typedef struct {
  const char *name;
  int gpt;
  dlrt_optimizer_kind kind;
  int ahead;
  int at_nodes; /* DLRT_PARAM_OVERLAP=0: each update at its node, not on the host thread */
  extras x;
} config;

static void run_config(dlrt_device_t *dev, const char *spec, const config *cf) {
  net ref, n;
  float want_loss[STEPS + 1], got_loss[STEPS + 1];
  const extras *x = cf->x.accum ? &cf->x : &plain;
  if (!tap_check(net_make_x(dev, cf->gpt, cf->kind, 0, x, &ref), "%s, %s: the model builds",
                 spec, cf->name))
    return;
  dlrt_exec_info ri;
  tap_check(net_train(&ref, 0, STEPS, DLRT_RUN_TRAIN, want_loss), "%s, %s: %d steps on the "
            "device", spec, cf->name, STEPS);
  dlrt_exec_info_get(ref.e, &ri);
  dlrt_loss_scale_state want_scale, got_scale;
  dlrt_exec_loss_scale(ref.e, &want_scale);
  net_train(&ref, STEPS, STEPS + 1, DLRT_RUN_FORWARD, want_loss + STEPS);
  size_t want_bytes = 0, got_bytes = 0;
  unsigned char *want = net_state(&ref, &want_bytes);
  net_free(&ref);

  if (cf->at_nodes) setenv("DLRT_PARAM_OVERLAP", "0", 1);
  int rc = net_make_x(dev, cf->gpt, cf->kind, cf->ahead, x, &n);
  unsetenv("DLRT_PARAM_OVERLAP");
  if (!tap_check(rc, "%s, %s: streaming %d nodes ahead", spec, cf->name, cf->ahead)) {
    free(want);
    net_free(&n);
    return;
  }
  rc = net_train(&n, 0, STEPS, DLRT_RUN_TRAIN, got_loss);
  tap_check(rc, "%s, %s: %d steps streaming", spec, cf->name, STEPS);
  dlrt_exec_info ni;
  dlrt_exec_info_get(n.e, &ni);
  dlrt_param_offload_stats st;
  tap_check(dlrt_exec_param_offload_stats(n.e, &st), "%s, %s: its statistics", spec, cf->name);
  dlrt_exec_loss_scale(n.e, &got_scale);
  if (rc == DLRT_OK) rc = net_train(&n, STEPS, STEPS + 1, DLRT_RUN_FORWARD, got_loss + STEPS);
  tap_check(rc, "%s, %s: an evaluation run streams too", spec, cf->name);
  ok(memcmp(want_loss, got_loss, sizeof want_loss) == 0, "%s, %s: the %d losses and the "
     "evaluation's equal the device run's bit for bit (last %.9g, %.9g)", spec, cf->name,
     STEPS, (double)got_loss[STEPS], (double)want_loss[STEPS]);
  unsigned char *got = rc == DLRT_OK ? net_state(&n, &got_bytes) : NULL;
  ok(got && want && got_bytes == want_bytes && memcmp(got, want, want_bytes) == 0,
     "%s, %s: parameters and optimizer state equal the device run's bit for bit", spec,
     cf->name);
  uint64_t param_bytes = (uint64_t)ni.params * 4;
  /* Updates: one per parameter each accum micro-batches, none in a step
   * loss scaling skipped (the same steps as the device run's). */
  uint64_t updates = (uint64_t)(STEPS / x->accum - want_scale.skipped_steps);
  ok(st.params_streamed > 0 && st.updates == (uint64_t)st.params_streamed * updates,
     "%s, %s: %d parameters streamed, %llu host updates (%llu steps)", spec, cf->name,
     st.params_streamed, (unsigned long long)st.updates, (unsigned long long)updates);
  if (x->loss_scale > 0)
    ok(want_scale.skipped_steps > 0 && updates > 0 &&
           got_scale.skipped_steps == want_scale.skipped_steps &&
           got_scale.scale == want_scale.scale,
       "%s, %s: loss scaling skipped %lld steps for overflow on the host as on the device "
       "(%lld) and made the others, the scale %g (%g)", spec, cf->name,
       (long long)got_scale.skipped_steps,
       (long long)want_scale.skipped_steps, (double)got_scale.scale,
       (double)want_scale.scale);
  /* Each update leaves the device copy stale: every step fetches each
   * parameter at least once (its 16-bit copy under mixed precision: half
   * the bytes), and those the backward pass needs after more than `ahead`
   * nodes once more. */
  uint64_t fetch_once = x->precision == DLRT_F32 ? param_bytes : param_bytes / 2;
  ok(st.fetched_bytes > STEPS * fetch_once && st.gradient_bytes == STEPS * param_bytes,
     "%s, %s: each step fetches every parameter, some again for the backward pass (%llu "
     "bytes fetched in all, %llu of parameters) and sends every gradient back (%llu)",
     spec, cf->name, (unsigned long long)st.fetched_bytes, (unsigned long long)param_bytes,
     (unsigned long long)st.gradient_bytes);
  if (cf->ahead < 0)
    ok(st.ahead >= 1 && st.ahead <= 16, "%s, %s: the look-ahead chosen after the first step "
       "from its node times and the link: %d nodes", spec, cf->name, st.ahead);
  if (x->state_limit && x->state_limit / 3 < largest_state(&n, cf->kind))
    ok(st.state_host_bytes <= x->state_limit && st.state_disk_bytes >= largest_state(&n, cf->kind),
       "%s, %s: the largest parameter's optimizer state, %llu bytes, more than a third of "
       "the %llu-byte limit (three whole slots would not fit), streams through the disk in "
       "chunks", spec, cf->name, (unsigned long long)largest_state(&n, cf->kind),
       (unsigned long long)x->state_limit);
  if (x->state_limit)
    ok(st.state_host_bytes <= x->state_limit && st.state_disk_bytes > 0 &&
           st.disk_read_bytes > 0 && st.disk_written_bytes >= st.state_disk_bytes,
       "%s, %s: %llu bytes of optimizer state in host memory (limit %llu), %llu on disk, "
       "%llu read and %llu written back, all of it at least once (masters on disk are read "
       "again by their fp32 fetches)", spec, cf->name,
       (unsigned long long)st.state_host_bytes, (unsigned long long)x->state_limit,
       (unsigned long long)st.state_disk_bytes, (unsigned long long)st.disk_read_bytes,
       (unsigned long long)st.disk_written_bytes);
  if (x->state_limit && x->state_limit < param_bytes) {
    /* Masters on disk (a budget below their bytes): a step reads the state
     * and masters on disk once for the updates, and the masters alone for
     * their fp32 fetches (the forward and the backward pass: two a step at
     * most), not each chunk whole at each fetch (three times the master's
     * bytes with Adam). */
    int parts = (cf->kind == DLRT_OPT_SGD ? 1 : 2) + 1;
    double disk = (double)st.state_disk_bytes, masters = disk / parts;
    double bound = 1.2 * STEPS * (disk + 2 * masters);
    ok((double)st.disk_read_bytes <= bound &&
           (double)st.disk_fetch_read_bytes <= 2.0 * STEPS * masters,
       "%s, %s: masters on disk: %llu bytes read in %d steps, at most 1.2x the state and "
       "masters on disk (%.0f bytes) and the masters twice a step (%.0f bytes): %.0f; %llu "
       "of them by the fetches, the masters' bytes alone", spec, cf->name,
       (unsigned long long)st.disk_read_bytes, STEPS, disk, masters, bound,
       (unsigned long long)st.disk_fetch_read_bytes);
  }
  if (x->precision != DLRT_F32)
    ok(st.fetched_bytes < 2 * STEPS * fetch_once * 3 / 2, "%s, %s: %llu bytes fetched: the "
       "16-bit copies (%llu bytes a step once), not the fp32 masters", spec, cf->name,
       (unsigned long long)st.fetched_bytes, (unsigned long long)fetch_once);
  ok(st.peak_param_bytes < param_bytes, "%s, %s: at most %llu parameter bytes on the device "
     "at once, of %llu", spec, cf->name, (unsigned long long)st.peak_param_bytes,
     (unsigned long long)param_bytes);
  ok(ni.measured_peak_bytes < ri.measured_peak_bytes, "%s, %s: a step's device peak %llu "
     "bytes, below the device run's %llu", spec, cf->name,
     (unsigned long long)ni.measured_peak_bytes, (unsigned long long)ri.measured_peak_bytes);
  free(got);
  free(want);
  net_free(&n);
}

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)ctx;
  static const config configs[] = {
      {"mlp adam, 1 ahead", 0, DLRT_OPT_ADAM, 1, 0},
      {"mlp sgd momentum, 3 ahead", 0, DLRT_OPT_SGD, 3, 0},
      {"gpt adamw, 1 ahead", 1, DLRT_OPT_ADAMW, 1, 0},
      {"gpt adam, 3 ahead", 1, DLRT_OPT_ADAM, 3, 0},
      {"gpt adam, 2 ahead, updates at their nodes", 1, DLRT_OPT_ADAM, 2, 1},
      {"gpt adamw bf16, 2 ahead", 1, DLRT_OPT_ADAMW, 2, 0, {DLRT_BF16, 1, 0, 0}},
      {"mlp adam bf16, 1 ahead, at nodes", 0, DLRT_OPT_ADAM, 1, 1, {DLRT_BF16, 1, 0, 0}},
      {"gpt adam fp16, loss scaling skips", 1, DLRT_OPT_ADAM, 2, 0, {DLRT_F16, 1, 0, 1 << 20}},
      {"gpt adam, accum 2", 1, DLRT_OPT_ADAM, 2, 0, {DLRT_F32, 2, 0, 0}},
      {"mlp sgd, accum 2, at nodes", 0, DLRT_OPT_SGD, 1, 1, {DLRT_F32, 2, 0, 0}},
      {"gpt adamw, clip 0.05", 1, DLRT_OPT_ADAMW, 2, 0, {DLRT_F32, 1, 0.05f, 0}},
      {"mlp adam, clip 0.05, at nodes", 0, DLRT_OPT_ADAM, 1, 1, {DLRT_F32, 1, 0.05f, 0}},
      {"gpt adam bf16, accum 2, clip 0.05", 1, DLRT_OPT_ADAM, 3, 0, {DLRT_BF16, 2, 0.05f, 0}},
      {"gpt adam fp16, accum 2, clip, loss scaling", 1, DLRT_OPT_ADAM, 2, 0,
       {DLRT_F16, 2, 0.05f, 1 << 18, 0}},
      {"gpt adam, look-ahead chosen", 1, DLRT_OPT_ADAM, -1, 0, {DLRT_F32, 1, 0, 0, 0}},
      {"gpt adamw, state on disk past 120 kB", 1, DLRT_OPT_ADAMW, 2, 0,
       {DLRT_F32, 1, 0, 0, 120000}},
      {"mlp sgd, state on disk past 20 kB, at nodes", 0, DLRT_OPT_SGD, 1, 1,
       {DLRT_F32, 1, 0, 0, 20000}},
      /* Its 4096-element layers' Adam state (32 KiB each) is more than a
       * third of the budget: it streams in chunks of 1024 elements. */
      {"gpt adam, state on disk past 40 kB, in chunks", 1, DLRT_OPT_ADAM, 2, 0,
       {DLRT_F32, 1, 0, 0, 40000}},
      {"mlp adamw, state on disk past 24 kB, in chunks, at nodes", 0, DLRT_OPT_ADAMW, 1, 1,
       {DLRT_F32, 1, 0, 0, 24000}},
      /* Chunks of 64 elements (DLRT_PARAM_DISK_CHUNK=256 bytes): many
       * chunks a tensor, the last one short where 64 does not divide it. */
      {"gpt adam bf16, accum 2, clip, 64-element chunks", 1, DLRT_OPT_ADAM, 2, 0,
       {DLRT_BF16, 2, 0.05f, 0, 120000, 256}},
      {"gpt adam bf16, accum 2, clip, state on disk", 1, DLRT_OPT_ADAM, 2, 0,
       {DLRT_BF16, 2, 0.05f, 0, 120000}},
  };
  for (size_t c = 0; c < sizeof configs / sizeof *configs; c++) run_config(dev, spec, &configs[c]);

  /* Reads and writes of streamed parameters (a checkpoint's export and
   * import): their host copies. */
  net n;
  if (!tap_check(net_make(dev, 0, DLRT_OPT_ADAM, 2, &n), "%s: a streamed mlp", spec)) return;
  dlrt_host_tensor *t = NULL;
  int count = 0;
  if (tap_check(dlrt_exec_export(n.e, 0, &t, &count), "%s: export its parameters", spec)) {
    for (int i = 0; i < count; i++)
      for (size_t j = 0; j < t[i].bytes / 4; j++) ((float *)t[i].data)[j] = (float)j * 1e-3f;
    tap_check(dlrt_exec_import(n.e, t, count), "%s: import others", spec);
    dlrt_host_tensor *back = NULL;
    int back_count = 0, same = 0;
    if (dlrt_exec_export(n.e, 0, &back, &back_count) == DLRT_OK && back_count == count) {
      same = 1;
      for (int i = 0; i < count; i++)
        same &= back[i].bytes == t[i].bytes && memcmp(back[i].data, t[i].data, t[i].bytes) == 0;
    }
    ok(same, "%s: they read back the same", spec);
    dlrt_safetensors_free(back, back_count, NULL);
    dlrt_safetensors_free(t, count, NULL);
    float l[1];
    tap_check(net_train(&n, 0, 1, DLRT_RUN_TRAIN, l), "%s: and it trains from them", spec);
  }
  is_status(dlrt_exec_run(n.e, DLRT_RUN_GRADIENTS), DLRT_ERR_STATE, "%s: streaming with "
            "DLRT_RUN_GRADIENTS (data parallelism) is refused: %s", spec, dlrt_last_error());
  ok(strstr(dlrt_last_error(), "DLRT_RUN_GRADIENTS") != NULL, "%s: the message names it", spec);
  net_free(&n);
  /* A host budget below the least that streams (the slots of 64-element
   * chunks of the masters and Adam's two moments, 4 x 3 x 64 floats, and
   * the masters' staging, 4 x 64: 4 KiB) is refused, naming the least. */
  const extras tiny = {DLRT_F32, 1, 0, 0, 1000, 0};
  is_status(net_make_x(dev, 1, DLRT_OPT_ADAM, 2, &tiny, &n), DLRT_ERR_OOM, "%s: a --host-limit "
            "of 1000 bytes is refused: %s", spec, dlrt_last_error());
  ok(strstr(dlrt_last_error(), "give at least 4.0 KiB") != NULL, "%s: the message names the "
     "least budget that works", spec);
  net_free(&n);
  /* A spill folder too small for the state on disk (a 16 KiB file-size
   * limit, as a full disk) fails at once, naming the folder. */
  struct rlimit was, small;
  getrlimit(RLIMIT_FSIZE, &was);
  small = was;
  small.rlim_cur = 16384;
  signal(SIGXFSZ, SIG_IGN);
  setenv("DLRT_SPILL_DIR", dir, 1);
  setrlimit(RLIMIT_FSIZE, &small);
  const extras some = {DLRT_F32, 1, 0, 0, 40000, 0};
  int rc = net_make_x(dev, 1, DLRT_OPT_ADAM, 2, &some, &n);
  setrlimit(RLIMIT_FSIZE, &was);
  unsetenv("DLRT_SPILL_DIR");
  is_status(rc, DLRT_ERR_IO, "%s: a spill folder too small for the state on disk fails "
            "before the first step: %s", spec, dlrt_last_error());
  char full[128];
  snprintf(full, sizeof full, "the spill directory %s is full", dir);
  ok(strstr(dlrt_last_error(), full) != NULL, "%s: the message names the folder", spec);
  net_free(&n);
  if (tap_check(net_make(dev, 0, DLRT_OPT_ADAM, 0, &n), "%s: an mlp spilling", spec)) {
    dlrt_spill_config sc = {.device_budget = 1 << 20, .prefetch = 2};
    tap_check(dlrt_exec_set_spill(n.e, &sc), "%s: spilling within 1 MiB", spec);
    is_status(dlrt_exec_offload_params(n.e, 2), DLRT_ERR_STATE, "%s: then streaming is "
              "refused: %s", spec, dlrt_last_error());
  }
  net_free(&n);
}

int main(void) {
  tap_tempdir("dlrt-param-stream-test", dir, sizeof dir);
  snprintf(model_path, sizeof model_path, "%s/small.model", dir);
  FILE *m = fopen(model_path, "w");
  if (!m || fputs("linear 64\nrelu\nlinear 48\nrelu\n", m) < 0 || fclose(m) != 0)
    bail_out("cannot write %s", model_path);
  if (dlrt_init() < 0 || dlrt_set_cpu_threads(1) < 0) bail_out("%s", dlrt_last_error());
  tap_for_each_device(run_device, NULL);
  dlrt_shutdown();
  tap_remove_tree(dir);
  return done_testing();
}
