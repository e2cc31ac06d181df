/*
 * test-dlgen-decode.c — sampling's decode path on every device present
 * (tap_for_each_device):
 *
 * - dlrt_attention_decode against the training attention: a random qkv of
 *   T positions fed one position per run must give row t of
 *   dlrt_attention(causal) over the whole sequence (1e-5 of the largest
 *   element; bit for bit where both run the dialect's kernels, i.e. on
 *   every device but the cpu, whose training attention is native), for
 *   shapes of one position, tiles of 32, 16, 25 and 7 keys with a partial
 *   last one, and two sequences at once; the caches hold each position's
 *   keys and values exactly, zeros past the last, and a position outside
 *   the cache writes nothing and gives zeros; two decode layers under a
 *   device budget that makes their caches spill to the host give the same
 *   bits as without;
 * - the whole model: the decode graph (dlrt_gpt_build_decode) with the
 *   parameters of a full forward graph (dlrt_gpt_build, exported and
 *   imported) gives at each position the full graph's logits for the same
 *   tokens (1e-4 of the largest), for two sequences at once, the second
 *   three positions behind the first (its position is out of range, a
 *   no-op, until it starts); in bf16 graphs too, loosely;
 * - the builders' refusals, no gradient through the decode op, and caches
 *   left out of dlrt_exec_export.
 * Points: computed at run time (done_testing).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrt.h"
#include "grad-check.h"
#include "tap.h"

typedef struct {
  int64_t batch, seq, heads, head_dim;
} decode_shape;

/* The kernels' tiles of keys: 32 up to D = 32, then 1024 / D. */
static const decode_shape shapes[] = {
    {1, 1, 1, 8},    /* one position */
    {2, 37, 3, 24},  /* tiles of 32 keys, the last of 5; two sequences */
    {1, 70, 1, 64},  /* tiles of 16, the last of 6 (GPT-2's head size) */
    {2, 33, 2, 40},  /* tiles of 25 */
    {1, 45, 2, 130}, /* tiles of 7 */
};

static void random_values(float *v, int64_t n, float range, uint32_t seed) {
  for (int64_t i = 0; i < n; i++) v[i] = uniform(&seed, -range, range);
}

/* The largest |got - want| over n floats, and the largest |want|. */
static double max_error(const float *got, const float *want, int64_t n, double *largest) {
  double worst = 0;
  *largest = 0;
  for (int64_t i = 0; i < n; i++) {
    worst = worse(worst, fabs((double)got[i] - want[i]));
    *largest = fmax(*largest, fabs(want[i]));
  }
  return worst;
}

/* ---------------------------------------------------------------- the op */

/* The training attention's output (B x T x C) for qkv (B x T x 3C). */
static int full_attention(dlrt_device_t *dev, const decode_shape *s, const float *qv, float *y) {
  int64_t c = s->heads * s->head_dim, shape[3] = {s->batch, s->seq, 3 * c};
  dlrt_graph_t *g = new_graph();
  dlrt_tensor_t *qkv = dlrt_input(g, "qkv", DLRT_F32, 3, shape);
  dlrt_tensor_t *att = dlrt_keep(g, dlrt_attention(g, qkv, (int)s->heads, 1));
  dlrt_exec_t *e = NULL;
  int st = dlrt_graph_status(g);
  if (st == DLRT_OK) st = dlrt_exec_create(g, dev, 1, &e);
  if (st == DLRT_OK) st = dlrt_exec_write(e, qkv, qv, (size_t)(s->batch * s->seq * 3 * c) * 4);
  if (st == DLRT_OK) st = dlrt_exec_run(e, DLRT_RUN_FORWARD);
  if (st == DLRT_OK) st = dlrt_exec_read(e, att, y, (size_t)(s->batch * s->seq * c) * 4);
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
  return st;
}

/* The decode graph of one shape: qkv (B x 1 x 3C) and pos (B) in, the
 * caches (B x capacity x C), the output kept. */
typedef struct {
  dlrt_graph_t *g;
  dlrt_tensor_t *qkv, *pos, *k_cache, *v_cache, *out;
  dlrt_exec_t *e;
} decode_graph;

static int decode_make(dlrt_device_t *dev, const decode_shape *s, int64_t capacity,
                       decode_graph *d) {
  int64_t c = s->heads * s->head_dim;
  int64_t qkv_shape[3] = {s->batch, 1, 3 * c}, cache_shape[3] = {s->batch, capacity, c};
  memset(d, 0, sizeof *d);
  d->g = new_graph();
  d->qkv = dlrt_input(d->g, "qkv", DLRT_F32, 3, qkv_shape);
  d->pos = dlrt_input(d->g, "pos", DLRT_I32, 1, &s->batch);
  d->k_cache = dlrt_state(d->g, "k_cache", DLRT_F32, 3, cache_shape);
  d->v_cache = dlrt_state(d->g, "v_cache", DLRT_F32, 3, cache_shape);
  d->out = dlrt_keep(d->g, dlrt_attention_decode(d->g, d->qkv, d->k_cache, d->v_cache, d->pos,
                                                 (int)s->heads));
  int st = dlrt_graph_status(d->g);
  if (st == DLRT_OK) {
    poison_cache(dev); /* the caches must come zeroed, not as the allocator left them */
    st = dlrt_exec_create(d->g, dev, 1, &d->e);
  }
  return st;
}

static void decode_free(decode_graph *d) {
  dlrt_exec_destroy(d->e);
  dlrt_graph_destroy(d->g);
}

/* One run: each sequence's qkv row (B x 3C) at its position. */
static int decode_step(decode_graph *d, const float *rows, const int32_t *pos, int64_t batch,
                       int64_t c, float *out) {
  int st = dlrt_exec_write(d->e, d->qkv, rows, (size_t)(batch * 3 * c) * 4);
  if (st == DLRT_OK) st = dlrt_exec_write(d->e, d->pos, pos, (size_t)batch * 4);
  if (st == DLRT_OK) st = dlrt_exec_run(d->e, DLRT_RUN_FORWARD);
  if (st == DLRT_OK) st = dlrt_exec_read(d->e, d->out, out, (size_t)(batch * c) * 4);
  return st;
}

/* qkv U(-1.5, 1.5) as test-attention's (peaked rows, where the online
 * softmax's rescaling matters). Tolerance: test-attention measures the
 * fused kernels within 1e-6 of the largest element against double; two of
 * them differ by at most twice that, bounded here by 1e-5. */
static void test_decode_op(dlrt_device_t *dev, const decode_shape *s) {
  const char *spec = dlrt_device_spec(dev);
  int64_t b_n = s->batch, t_n = s->seq, c = s->heads * s->head_dim, w = 3 * c;
  int64_t capacity = t_n + 3; /* rows past the last position stay zero */
  char name[96];
  snprintf(name, sizeof name, "B%lld T%lld heads %lld D %lld", (long long)b_n, (long long)t_n,
           (long long)s->heads, (long long)s->head_dim);
  float *qv = malloc((size_t)(b_n * t_n * w) * sizeof *qv);
  float *want = malloc((size_t)(b_n * t_n * c) * sizeof *want);
  float *got = malloc((size_t)(b_n * t_n * c) * sizeof *got);
  float *rows = malloc((size_t)(b_n * w) * sizeof *rows), *out = malloc((size_t)(b_n * c) * 4);
  float *cache = malloc((size_t)(b_n * capacity * c) * sizeof *cache);
  int32_t *pos = malloc((size_t)b_n * sizeof *pos);
  if (!qv || !want || !got || !rows || !out || !cache || !pos) bail_out("out of host memory");
  random_values(qv, b_n * t_n * w, 1.5f, 17u + (uint32_t)(t_n * 5 + s->head_dim));
  int st = full_attention(dev, s, qv, want);
  decode_graph d;
  if (st == DLRT_OK) st = decode_make(dev, s, capacity, &d);
  else memset(&d, 0, sizeof d);
  /* Position t of every sequence per run, in order. */
  for (int64_t t = 0; t < t_n && st == DLRT_OK; t++) {
    for (int64_t b = 0; b < b_n; b++) {
      memcpy(rows + b * w, qv + (b * t_n + t) * w, (size_t)w * sizeof *rows);
      pos[b] = (int32_t)t;
    }
    st = decode_step(&d, rows, pos, b_n, c, out);
    for (int64_t b = 0; b < b_n && st == DLRT_OK; b++)
      memcpy(got + (b * t_n + t) * c, out + b * c, (size_t)c * sizeof *out);
  }
  if (tap_check(st, "%s %s: %lld decode runs, one position each", spec, name, (long long)t_n)) {
    double largest, err = max_error(got, want, b_n * t_n * c, &largest);
    ok(err <= 1e-5 * fmax(largest, 1e-3), "%s %s: each position's output is the training "
       "attention's row (causal): max error %.1e of the largest %.3g", spec, name, err, largest);
    const char *isa = getenv("DLRT_CPU_ISA");
    if (!tap_device_is_cpu(dev) || (isa && strcmp(isa, "dialect") == 0))
      ok(memcmp(got, want, (size_t)(b_n * t_n * c) * sizeof *got) == 0, "%s %s: bit for bit "
         "(both the dialect's kernels)", spec, name);
    /* The key cache: row t holds position t's keys exactly, later rows 0. */
    st = dlrt_exec_read(d.e, d.k_cache, cache, (size_t)(b_n * capacity * c) * sizeof *cache);
    int same = st == DLRT_OK;
    for (int64_t b = 0; b < b_n && same; b++)
      for (int64_t t = 0; t < capacity && same; t++)
        for (int64_t k = 0; k < c && same; k++) {
          float v = cache[(b * capacity + t) * c + k];
          same = t < t_n ? v == qv[(b * t_n + t) * w + c + k] : v == 0.0f;
        }
    ok(same, "%s %s: the key cache holds each position's keys, zeros past the last", spec,
       name);
    /* Out of range (capacity, -1): no write, zeros out. */
    for (int64_t b = 0; b < b_n; b++) pos[b] = b % 2 ? -1 : (int32_t)capacity;
    random_values(rows, b_n * w, 1.0f, 3);
    float *after = malloc((size_t)(b_n * capacity * c) * sizeof *after);
    if (!after) bail_out("out of host memory");
    st = decode_step(&d, rows, pos, b_n, c, out);
    if (st == DLRT_OK)
      st = dlrt_exec_read(d.e, d.v_cache, after, (size_t)(b_n * capacity * c) * sizeof *after);
    if (st == DLRT_OK) /* and the key cache after it */
      st = dlrt_exec_read(d.e, d.k_cache, cache, (size_t)(b_n * capacity * c) * sizeof *cache);
    int zeros = st == DLRT_OK, untouched = st == DLRT_OK;
    for (int64_t i = 0; i < b_n * c && zeros; i++) zeros = out[i] == 0.0f;
    for (int64_t b = 0; b < b_n && untouched; b++)
      for (int64_t t = 0; t < capacity && untouched; t++)
        for (int64_t k = 0; k < c && untouched; k++) {
          float kv = cache[(b * capacity + t) * c + k], vv = after[(b * capacity + t) * c + k];
          untouched = t < t_n ? kv == qv[(b * t_n + t) * w + c + k] &&
                                    vv == qv[(b * t_n + t) * w + 2 * c + k]
                              : kv == 0.0f && vv == 0.0f;
        }
    ok(zeros && untouched, "%s %s: a position outside the cache (capacity %lld, -1) gives "
       "zeros and writes nothing", spec, name, (long long)capacity);
    free(after);
  }
  decode_free(&d);
  free(qv), free(want), free(got), free(rows), free(out), free(cache), free(pos);
}

/* Spilling: two decode ops (two layers, each with its caches; the second
 * on -qkv) under a device budget that holds one layer's caches: the
 * executor moves caches to the host and back within and between runs. The
 * outputs and the caches must be the same bits as without a budget (the op
 * writes its inputs: those writes must reach the host copies). */
static void test_spilled(dlrt_device_t *dev) {
  const char *spec = dlrt_device_spec(dev);
  enum { B = 2, T = 40, HEADS = 2, D = 64, CAP = 64 };
  int64_t c = HEADS * D, w = 3 * c, batch = B;
  int64_t qkv_shape[3] = {B, 1, 3 * c}, cache_shape[3] = {B, CAP, c};
  size_t cache_bytes = (size_t)(B * CAP * c) * 4, out_floats = (size_t)(2 * T * B * c);
  float *qv = malloc((size_t)(B * T * w) * sizeof *qv), *out[2], *caches[2];
  if (!qv) bail_out("out of host memory");
  for (int k = 0; k < 2; k++)
    if (!(out[k] = malloc(out_floats * 4)) || !(caches[k] = malloc(4 * cache_bytes)))
      bail_out("out of host memory");
  random_values(qv, B * T * w, 1.5f, 41);
  int st = DLRT_OK;
  dlrt_spill_stats stats = {0};
  for (int k = 0; k < 2 && st == DLRT_OK; k++) {
    dlrt_graph_t *g = new_graph();
    dlrt_tensor_t *qkv = dlrt_input(g, "qkv", DLRT_F32, 3, qkv_shape);
    dlrt_tensor_t *pos = dlrt_input(g, "pos", DLRT_I32, 1, &batch), *cache[4];
    for (int i = 0; i < 4; i++) cache[i] = dlrt_state(g, NULL, DLRT_F32, 3, cache_shape);
    dlrt_tensor_t *y[2] = {
        dlrt_keep(g, dlrt_attention_decode(g, qkv, cache[0], cache[1], pos, HEADS)),
        dlrt_keep(g, dlrt_attention_decode(g, dlrt_scale(g, qkv, -1.0f), cache[2], cache[3],
                                           pos, HEADS))};
    dlrt_exec_t *e = NULL;
    st = dlrt_graph_status(g);
    if (st == DLRT_OK) st = dlrt_exec_create(g, dev, 1, &e);
    dlrt_spill_config spill = {.device_budget = 3 * cache_bytes};
    if (st == DLRT_OK && k) st = dlrt_exec_set_spill(e, &spill);
    for (int64_t t = 0; t < T && st == DLRT_OK; t++) {
      float rows[B * 3 * HEADS * D];
      int32_t pv[B];
      for (int64_t b = 0; b < B; b++) {
        memcpy(rows + b * w, qv + (b * T + t) * w, (size_t)w * 4);
        pv[b] = (int32_t)t;
      }
      st = dlrt_exec_write(e, qkv, rows, sizeof rows);
      if (st == DLRT_OK) st = dlrt_exec_write(e, pos, pv, sizeof pv);
      if (st == DLRT_OK) st = dlrt_exec_run(e, DLRT_RUN_FORWARD);
      for (int i = 0; i < 2 && st == DLRT_OK; i++)
        st = dlrt_exec_read(e, y[i], out[k] + (2 * t + i) * B * c, (size_t)(B * c) * 4);
    }
    for (int i = 0; i < 4 && st == DLRT_OK; i++)
      st = dlrt_exec_read(e, cache[i], caches[k] + (size_t)i * cache_bytes / 4, cache_bytes);
    if (st == DLRT_OK && k) st = dlrt_exec_spill_stats(e, &stats);
    dlrt_exec_destroy(e);
    dlrt_graph_destroy(g);
  }
  if (tap_check(st, "%s: two decode layers under a device budget of 3 of their 4 caches", spec))
    ok(stats.evictions > 0 && memcmp(out[0], out[1], out_floats * 4) == 0 &&
           memcmp(caches[0], caches[1], 4 * cache_bytes) == 0,
       "%s: spilled (%llu evictions, %llu bytes fetched), the outputs and caches are the same "
       "bits as without a budget", spec, (unsigned long long)stats.evictions,
       (unsigned long long)stats.fetched_bytes);
  free(qv);
  for (int k = 0; k < 2; k++) free(out[k]), free(caches[k]);
}

/* ---------------------------------------------------------------- the model */

/* A GPT of heads of 64 (tiles of 16 keys) over a context of 40: three tiles. */
static const dlrt_gpt_config small_gpt = {.layers = 2, .heads = 2, .embd = 128, .context = 40,
                                          .vocab = 300};

/* The full graph's logits ((B T) x V) for tokens (B x T), and its
 * parameters exported. */
static int full_logits(dlrt_device_t *dev, const dlrt_gpt_config *cfg, dlrt_dtype precision,
                       int64_t batch, const int32_t *tokens, float *logits,
                       dlrt_host_tensor **params, int *n) {
  int64_t shape[2] = {batch, cfg->context};
  dlrt_graph_t *g = new_graph();
  int st = dlrt_graph_set_precision(g, precision);
  dlrt_tensor_t *in = dlrt_input(g, "tokens", DLRT_I32, 2, shape), *out = NULL;
  if (st == DLRT_OK) st = dlrt_gpt_build(g, cfg, in, &out);
  dlrt_exec_t *e = NULL;
  if (st == DLRT_OK) dlrt_keep(g, out);
  if (st == DLRT_OK) st = dlrt_exec_create(g, dev, 7, &e);
  if (st == DLRT_OK) st = dlrt_exec_write(e, in, tokens, (size_t)(batch * cfg->context) * 4);
  if (st == DLRT_OK) st = dlrt_exec_run(e, DLRT_RUN_FORWARD);
  if (st == DLRT_OK)
    st = dlrt_exec_read(e, out, logits, (size_t)(batch * cfg->context * cfg->vocab) * 4);
  if (st == DLRT_OK) st = dlrt_exec_export(e, 0, params, n);
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
  return st;
}

/* precision: both graphs' compute type. In bf16 the decode op computes in
 * fp32 on its bf16 input cast up, and c_proj rounds its output to bf16 as
 * the full graph's bf16 attention rounds its own: the same bits on PoCL;
 * on the cpu the two attentions' fp32 roundings differ and can move a bf16
 * rounding by a step (2^-8 relative) somewhere in the layers: measured
 * 3.9e-3 of the largest logit, bounded by 4e-2. */
static void test_model(dlrt_device_t *dev, dlrt_dtype precision) {
  const char *spec = dlrt_device_spec(dev), *type = dlrt_dtype_name(precision);
  double bound = precision == DLRT_F32 ? 1e-4 : 4e-2;
  const dlrt_gpt_config *cfg = &small_gpt;
  enum { B = 2, LAG = 3 };
  int64_t t_n = cfg->context, v_n = cfg->vocab;
  int32_t tokens[B * 40];
  uint32_t seed = 23;
  for (int64_t i = 0; i < B * t_n; i++) tokens[i] = (int32_t)(uniform(&seed, 0, 1) * v_n);
  float *want = malloc((size_t)(B * t_n * v_n) * sizeof *want);
  float *got = malloc((size_t)(B * t_n * v_n) * sizeof *got);
  float *out = malloc((size_t)(B * v_n) * sizeof *out);
  if (!want || !got || !out) bail_out("out of host memory");
  dlrt_host_tensor *params = NULL;
  int n_params = 0;
  int st = full_logits(dev, cfg, precision, B, tokens, want, &params, &n_params);

  int64_t tok_shape[2] = {B, 1}, batch = B;
  dlrt_graph_t *g = new_graph();
  if (st == DLRT_OK) st = dlrt_graph_set_precision(g, precision);
  dlrt_tensor_t *tok = dlrt_input(g, "token", DLRT_I32, 2, tok_shape);
  dlrt_tensor_t *pos = dlrt_input(g, "pos", DLRT_I32, 1, &batch), *logits = NULL;
  dlrt_exec_t *e = NULL;
  if (st == DLRT_OK) st = dlrt_gpt_build_decode(g, cfg, tok, pos, &logits);
  if (st == DLRT_OK) dlrt_keep(g, logits);
  if (st == DLRT_OK) st = dlrt_exec_create(g, dev, 99, &e); /* another seed: import must win */
  if (st == DLRT_OK) st = dlrt_exec_import(e, params, n_params);
  /* Sequence 0 at position t, sequence 1 LAG behind (out of range before it starts). */
  for (int64_t t = 0; t < t_n + LAG && st == DLRT_OK; t++) {
    int32_t tv[B], pv[B];
    for (int b = 0; b < B; b++) {
      int64_t at = t - b * LAG, inside = at >= 0 && at < t_n;
      tv[b] = inside ? tokens[b * t_n + at] : 0;
      pv[b] = inside ? (int32_t)at : (int32_t)t_n;
    }
    st = dlrt_exec_write(e, tok, tv, sizeof tv);
    if (st == DLRT_OK) st = dlrt_exec_write(e, pos, pv, sizeof pv);
    if (st == DLRT_OK) st = dlrt_exec_run(e, DLRT_RUN_FORWARD);
    if (st == DLRT_OK) st = dlrt_exec_read(e, logits, out, (size_t)(B * v_n) * sizeof *out);
    for (int b = 0; b < B && st == DLRT_OK; b++)
      if (pv[b] < t_n)
        memcpy(got + (b * t_n + pv[b]) * v_n, out + b * v_n, (size_t)v_n * sizeof *out);
  }
  if (tap_check(st, "%s %s: a GPT's decode graph loads the full graph's parameters and runs "
                "%lld positions of two sequences", spec, type, (long long)t_n)) {
    double largest, err = max_error(got, want, B * t_n * v_n, &largest);
    ok(err <= bound * fmax(largest, 1e-3), "%s %s: the decode graph's logits at every "
       "position are the full forward graph's: max error %.1e of the largest %.3g", spec, type,
       err, largest);
  }
  if (precision != DLRT_F32) st = DLRT_ERR_STATE; /* the export once, in fp32 */
  /* Caches are state, not parameters: not exported. */
  dlrt_host_tensor *exported = NULL;
  int n_exported = 0, caches = 0;
  if (st == DLRT_OK && (st = dlrt_exec_export(e, 1, &exported, &n_exported)) == DLRT_OK)
    for (int i = 0; i < n_exported; i++) caches += strstr(exported[i].name, "_cache") != NULL;
  if (precision == DLRT_F32 && tap_check(st, "%s: dlrt_exec_export of the decode graph", spec))
    ok(caches == 0 && n_exported == n_params + 1, "%s: the export has the %d parameters (and "
       "optimizer.step) and no cache (%d exported)", spec, n_params, n_exported);
  dlrt_host_tensors_free(exported, n_exported);
  dlrt_host_tensors_free(params, n_params);
  dlrt_exec_destroy(e);
  dlrt_graph_destroy(g);
  free(want), free(got), free(out);
}

/* ---------------------------------------------------------------- refusals */

static void test_refusals(void) {
  int64_t qkv_shape[3] = {1, 1, 12}, long_qkv[3] = {1, 2, 12}, cache_shape[3] = {1, 8, 4};
  int64_t other_cache[3] = {1, 8, 8}, one = 1, two = 2;
  struct {
    const char *what, *message;
  } cases[] = {
      {"qkv of two positions", "qkv must be B x 1 x 3C"},
      {"a parameter as the key cache", "the key cache must be a dlrt_state tensor"},
      {"a value cache of another width", "the value cache must be a dlrt_state tensor"},
      {"the same cache twice", "two state tensors of one shape"},
      {"positions of f32", "pos must be an I32 tensor of B elements"},
      {"two positions for one sequence", "pos must be an I32 tensor of B elements"},
      {"0 heads", "0 heads"},
  };
  for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
    dlrt_graph_t *g = new_graph();
    dlrt_tensor_t *qkv = dlrt_input(g, "qkv", DLRT_F32, 3, k == 0 ? long_qkv : qkv_shape);
    dlrt_tensor_t *kc = k == 1 ? dlrt_param(g, "k", 3, cache_shape, DLRT_INIT_ZEROS, 0, 0)
                               : dlrt_state(g, "k", DLRT_F32, 3, cache_shape);
    dlrt_tensor_t *vc = k == 3 ? kc : dlrt_state(g, "v", DLRT_F32, 3, k == 2 ? other_cache
                                                                            : cache_shape);
    dlrt_tensor_t *pos = dlrt_input(g, "pos", k == 4 ? DLRT_F32 : DLRT_I32, 1,
                                    k == 5 ? &two : &one);
    dlrt_tensor_t *y = dlrt_attention_decode(g, qkv, kc, vc, pos, k == 6 ? 0 : 1);
    int st = dlrt_graph_status(g);
    ok(!y && st == DLRT_ERR_INVALID_ARG && strstr(dlrt_last_error(), cases[k].message),
       "attention_decode refuses %s: %s", cases[k].what, dlrt_last_error());
    dlrt_graph_destroy(g);
  }
  dlrt_graph_t *g = new_graph();
  ok(!dlrt_state(g, "s", DLRT_I32, 3, cache_shape) &&
     strstr(dlrt_last_error(), "state is f32"), "dlrt_state refuses I32: %s",
     dlrt_last_error());
  dlrt_graph_destroy(g);

  /* No gradient through it: a backward pass says so. */
  g = new_graph();
  dlrt_tensor_t *w = dlrt_param(g, "w", 3, qkv_shape, DLRT_INIT_ZEROS, 0, 0);
  dlrt_tensor_t *y = dlrt_attention_decode(g, w, dlrt_state(g, "k", DLRT_F32, 3, cache_shape),
                                           dlrt_state(g, "v", DLRT_F32, 3, cache_shape),
                                           dlrt_input(g, "pos", DLRT_I32, 1, &one), 1);
  int st = y ? dlrt_graph_backward(g, dlrt_sum(g, y)) : DLRT_ERR_STATE;
  ok(st == DLRT_ERR_UNSUPPORTED && strstr(dlrt_last_error(), "no gradient for attention_decode"),
     "a backward pass through attention_decode: %s", dlrt_last_error());
  dlrt_graph_destroy(g);

  /* The GPT decode builder's inputs. */
  g = new_graph();
  int64_t wide[2] = {1, 2};
  dlrt_tensor_t *logits = NULL;
  st = dlrt_gpt_build_decode(g, &small_gpt, dlrt_input(g, "t", DLRT_I32, 2, wide),
                             dlrt_input(g, "p", DLRT_I32, 1, &one), &logits);
  ok(st == DLRT_ERR_INVALID_ARG && !logits && strstr(dlrt_last_error(), "batch x 1"),
     "dlrt_gpt_build_decode refuses two tokens per sequence: %s", dlrt_last_error());
  dlrt_graph_destroy(g);
}

static void run_device(dlrt_device_t *dev, const char *spec, void *ctx) {
  (void)spec, (void)ctx;
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) test_decode_op(dev, &shapes[k]);
  test_spilled(dev);
  test_model(dev, DLRT_F32);
  test_model(dev, DLRT_BF16);
}

int main(void) {
  test_refusals();
  tap_for_each_device(run_device, NULL);
  dlrt_shutdown();
  return done_testing();
}
