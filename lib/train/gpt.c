/* gpt.c — GPT-2's architecture as a dlrt graph: token and learned position
 * embeddings, N pre-LayerNorm blocks of causal multi-head self-attention
 * (fused: lib/graph's dlrt_attention) and a GELU MLP of 4C, residual adds, a
 * final LayerNorm and an LM head tied to the token embedding; the presets
 * from gpt-mini to GPT-3 175B.
 *
 * Parameters carry Hugging Face's GPT-2 names and layouts (Conv1D weights
 * are in x out, "transformer.h.0.attn.c_attn.weight" ...), so a checkpoint
 * loads into transformers.GPT2LMHeadModel with load_state_dict. Shapes:
 * B batch, T context, C width, V vocabulary; activations are kept 2-D,
 * (B*T) x C, except around the attention, which takes B x T x 3C.
 *
 * The decode graph (dlrt_gpt_build_decode) is the same model for one new
 * token per sequence: the same parameters, and in each block key and value
 * caches (dlrt_state) that dlrt_attention_decode fills a position per run,
 * so a token costs O(position) in attention and nothing is recomputed. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "train/train.h"
#include "util/status.h"

typedef struct {
  const char *name;
  dlrt_gpt_config cfg;
} gpt_preset;

/* GPT-2's sizes are OpenAI's (and Hugging Face's configs); GPT-3 175B is
 * Brown et al. 2020, table 2.1. gpt-mini is dlrt's own, for byte tokens. */
static const gpt_preset presets[] = {
    {"gpt-mini", {.layers = 4, .heads = 4, .embd = 128, .context = 128, .vocab = 256}},
    {"gpt2", {.layers = 12, .heads = 12, .embd = 768, .context = 1024, .vocab = 50257}},
    {"gpt2-medium", {.layers = 24, .heads = 16, .embd = 1024, .context = 1024, .vocab = 50257}},
    {"gpt2-large", {.layers = 36, .heads = 20, .embd = 1280, .context = 1024, .vocab = 50257}},
    {"gpt2-xl", {.layers = 48, .heads = 25, .embd = 1600, .context = 1024, .vocab = 50257}},
    {"gpt3-175b", {.layers = 96, .heads = 96, .embd = 12288, .context = 2048, .vocab = 50257}},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

int dlrt_gpt_preset(const char *name, dlrt_gpt_config *out) {
  DLRT__CHECK_ARG(out, "dlrt_gpt_preset: out is NULL");
  for (int i = 0; name && i < N_PRESETS; i++)
    if (strcasecmp(name, presets[i].name) == 0) {
      *out = presets[i].cfg;
      return DLRT_OK;
    }
  return dlrt__set_error(DLRT_ERR_NOT_FOUND, "\"%s\" is not a GPT preset: gpt-mini, gpt2, "
                         "gpt2-medium, gpt2-large, gpt2-xl or gpt3-175b", name ? name : "");
}

const char *dlrt_gpt_preset_name(int index) {
  return index >= 0 && index < N_PRESETS ? presets[index].name : NULL;
}

void dlrt_gpt_override(dlrt_gpt_config *cfg, const dlrt_gpt_config *with) {
  if (with->layers) cfg->layers = with->layers;
  if (with->heads) cfg->heads = with->heads;
  if (with->embd) cfg->embd = with->embd;
  if (with->context) cfg->context = with->context;
  if (with->vocab) cfg->vocab = with->vocab;
  if (with->dropout) cfg->dropout = with->dropout;
  if (with->attn_dropout) cfg->attn_dropout = with->attn_dropout;
}

int dlrt_gpt_check(const dlrt_gpt_config *c) {
  DLRT__CHECK_ARG(c, "dlrt_gpt_check: config is NULL");
  /* Bounds that keep every tensor below 2^60 elements and every name in
   * 64 characters; far past GPT-3. */
  if (c->layers < 1 || c->layers > 1000 || c->heads < 1 || c->embd < 1 || c->embd > 1 << 20 ||
      c->context < 1 || c->context > 1 << 20 || c->vocab < 2 || c->vocab > 1 << 24)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "a GPT of %lld layers, %lld heads, width "
                           "%lld, context %lld, vocabulary %lld: each must be at least 1 (the "
                           "vocabulary 2), layers at most 1000, width and context at most "
                           "2^20, vocabulary at most 2^24", (long long)c->layers,
                           (long long)c->heads, (long long)c->embd, (long long)c->context,
                           (long long)c->vocab);
  if (c->embd % c->heads)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "a GPT of width %lld cannot have %lld heads: "
                           "the width must be a multiple of the heads (--embd, --heads)",
                           (long long)c->embd, (long long)c->heads);
  if (!(c->dropout >= 0 && c->dropout < 1) || !(c->attn_dropout >= 0 && c->attn_dropout < 1))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "GPT dropout %g, attention dropout %g: each "
                           "must be in [0, 1)", (double)c->dropout, (double)c->attn_dropout);
  return DLRT_OK;
}

int64_t dlrt_gpt_params(const dlrt_gpt_config *c) {
  int64_t C = c->embd;
  /* Per block: two LayerNorms (2C each), c_attn (3C^2 + 3C), attention's
   * c_proj (C^2 + C), c_fc (4C^2 + 4C), the MLP's c_proj (4C^2 + C). */
  int64_t block = 4 * C + 3 * C * C + 3 * C + C * C + C + 4 * C * C + 4 * C + 4 * C * C + C;
  return c->vocab * C + c->context * C + c->layers * block + 2 * C; /* + ln_f */
}

/* ---------------------------------------------------------------- the graph */

typedef struct {
  dlrt_graph_t *g;
  const dlrt_gpt_config *c;
  float proj_std; /* residual projections: 0.02 / sqrt(2 N) */
  /* The decode graph's positions (B, I32); NULL: the training graph. */
  dlrt_tensor_t *pos;
  /* Tensor parallelism: this peer's shard (NULL: the whole model). */
  const dlrt_gpt_shard *shard;
} gpt_builder;

static dlrt_tensor_t *param(gpt_builder *b, const char *name, int64_t rows, int64_t cols,
                            float std, int decay) {
  int64_t shape[2] = {rows, cols};
  int ndim = cols ? 2 : 1;
  dlrt_tensor_t *p = std > 0 ? dlrt_param_normal(b->g, name, ndim, shape, std)
                             : dlrt_param(b->g, name, ndim, shape,
                                          std < 0 ? DLRT_INIT_ONES : DLRT_INIT_ZEROS, 0, 0);
  return p && !decay ? dlrt_param_set_decay(b->g, p, 0) : p;
}

/* x (N x in) times a Conv1D weight (in x out, Hugging Face's layout) plus
 * its bias: "PREFIX.weight", "PREFIX.bias". */
static dlrt_tensor_t *conv1d(gpt_builder *b, dlrt_tensor_t *x, const char *prefix, int64_t in,
                             int64_t out, float std) {
  char name[64];
  snprintf(name, sizeof name, "%s.weight", prefix);
  dlrt_tensor_t *w = param(b, name, in, out, std, 1);
  snprintf(name, sizeof name, "%s.bias", prefix);
  dlrt_tensor_t *bias = param(b, name, out, 0, 0, 0);
  return dlrt_add(b->g, dlrt_matmul(b->g, x, w, 0, 0), bias);
}

/* Megatron's row-parallel linear: x (N x in_s, this peer's rows of the
 * input) times its rows of the weight (in_s x out), summed over the peers
 * (g), then the whole bias, which every peer holds. */
static dlrt_tensor_t *conv1d_rows(gpt_builder *b, dlrt_tensor_t *x, const char *prefix,
                                  int64_t in_s, int64_t out, float std) {
  char name[64];
  snprintf(name, sizeof name, "%s.weight", prefix);
  dlrt_tensor_t *w = param(b, name, in_s, out, std, 1);
  snprintf(name, sizeof name, "%s.bias", prefix);
  dlrt_tensor_t *bias = param(b, name, out, 0, 0, 0);
  return dlrt_add(b->g, dlrt_tp_reduce(b->g, dlrt_matmul(b->g, x, w, 0, 0)), bias);
}

static dlrt_tensor_t *layer_norm(gpt_builder *b, dlrt_tensor_t *x, const char *prefix) {
  char name[64];
  snprintf(name, sizeof name, "%s.weight", prefix);
  dlrt_tensor_t *gamma = param(b, name, b->c->embd, 0, -1, 0);
  snprintf(name, sizeof name, "%s.bias", prefix);
  dlrt_tensor_t *beta = param(b, name, b->c->embd, 0, 0, 0);
  return dlrt_layer_norm(b->g, x, gamma, beta, 1e-5f);
}

/* Dropout passes values through when sampling: none in the decode graph. */
static dlrt_tensor_t *dropout(gpt_builder *b, dlrt_tensor_t *x) {
  return b->c->dropout > 0 && !b->pos ? dlrt_dropout(b->g, x, b->c->dropout) : x;
}

/* The decode graph's attention for block `prefix`: the new token's qkv (B x
 * 1 x 3C) over the block's key and value caches (B x context x C each,
 * "PREFIX.attn.k_cache", "PREFIX.attn.v_cache"). */
static dlrt_tensor_t *decode_attention(gpt_builder *b, dlrt_tensor_t *qkv, const char *prefix,
                                       int64_t batch) {
  int64_t shape[3] = {batch, b->c->context, b->c->embd};
  char name[64];
  snprintf(name, sizeof name, "%s.attn.k_cache", prefix);
  dlrt_tensor_t *k_cache = dlrt_state(b->g, name, DLRT_F32, 3, shape);
  snprintf(name, sizeof name, "%s.attn.v_cache", prefix);
  dlrt_tensor_t *v_cache = dlrt_state(b->g, name, DLRT_F32, 3, shape);
  return dlrt_attention_decode(b->g, qkv, k_cache, v_cache, b->pos, (int)b->c->heads);
}

/* One block on the residual stream x ((B*T) x C; T = 1 when decoding). */
static dlrt_tensor_t *block(gpt_builder *b, dlrt_tensor_t *x, int i, int64_t batch,
                            int64_t T) {
  const int64_t C = b->c->embd;
  /* Under tensor parallelism (Megatron-LM) this peer's heads, Cs = heads x
   * head size of the attention's width and 4 Cs of the MLP's: c_attn and
   * c_fc are column-parallel (each peer's columns, after f), the c_projs
   * row-parallel (each peer's rows, then g): one sum over the peers per
   * sublayer forward and one backward. */
  const dlrt_gpt_shard *s = b->shard;
  int heads = s ? s->heads : (int)b->c->heads;
  int64_t Cs = s ? C / b->c->heads * s->heads : C;
  char p[48], name[64];
  snprintf(p, sizeof p, "transformer.h.%d", i);

  snprintf(name, sizeof name, "%s.ln_1", p);
  dlrt_tensor_t *h = layer_norm(b, x, name);
  if (s) h = dlrt_tp_copy(b->g, h);
  snprintf(name, sizeof name, "%s.attn.c_attn", p);
  dlrt_tensor_t *qkv = conv1d(b, h, name, C, 3 * Cs, 0.02f);
  int64_t qkv_shape[3] = {batch, T, 3 * Cs}, flat[2] = {batch * T, Cs};
  qkv = dlrt_reshape(b->g, qkv, 3, qkv_shape);
  dlrt_tensor_t *a = b->pos ? decode_attention(b, qkv, p, batch)
                            : dlrt_attention_dropout(b->g, qkv, heads, 1, b->c->attn_dropout);
  a = dlrt_reshape(b->g, a, 2, flat);
  snprintf(name, sizeof name, "%s.attn.c_proj", p);
  a = s ? conv1d_rows(b, a, name, Cs, C, b->proj_std) : conv1d(b, a, name, C, C, b->proj_std);
  x = dlrt_add(b->g, x, dropout(b, a));

  snprintf(name, sizeof name, "%s.ln_2", p);
  h = layer_norm(b, x, name);
  if (s) h = dlrt_tp_copy(b->g, h);
  snprintf(name, sizeof name, "%s.mlp.c_fc", p);
  dlrt_tensor_t *m = dlrt_gelu_tanh(b->g, conv1d(b, h, name, C, 4 * Cs, 0.02f));
  snprintf(name, sizeof name, "%s.mlp.c_proj", p);
  m = s ? conv1d_rows(b, m, name, 4 * Cs, C, b->proj_std)
        : conv1d(b, m, name, 4 * C, C, b->proj_std);
  return dlrt_add(b->g, x, dropout(b, m));
}

/* The token embedding wte (V x C, *table) and the position embedding of
 * tokens (batch x T): the residual stream's start, (B*T) x C. */
static dlrt_tensor_t *embeddings(gpt_builder *b, dlrt_tensor_t *tokens, int64_t batch,
                                 int64_t T, dlrt_tensor_t **table) {
  dlrt_graph_t *g = b->g;
  int64_t C = b->c->embd, flat[2] = {batch * T, C};
  /* Split by vocabulary (tensor parallel): this peer's rows of the table,
   * whose lookups (the tokens come shifted by vocab_first: other rows' ids
   * fall outside and embed as zeros) are summed over the peers. */
  const dlrt_gpt_shard *s = b->shard;
  int by_vocab = s && s->vocab > 0;
  dlrt_tensor_t *wte = param(b, "transformer.wte.weight", by_vocab ? s->vocab : b->c->vocab, C,
                             0.02f, 0);
  dlrt_tensor_t *wpe = param(b, "transformer.wpe.weight", b->c->context, C, 0.02f, 0);
  dlrt_tensor_t *tok = dlrt_embedding(g, tokens, wte);
  if (by_vocab) tok = dlrt_tp_reduce(g, tok);
  /* Token rows plus the first T position rows, broadcast over the batch. */
  dlrt_tensor_t *x = dlrt_add(g, tok, dlrt_slice(g, wpe, 0, 0, T));
  *table = wte;
  return dropout(b, dlrt_reshape(g, x, 2, flat));
}

/* Everything up to the head: the final LayerNorm's output x ((B*T) x C) and
 * the token embedding wte (V x C), which the head reads transposed. */
static int build_trunk(dlrt_graph_t *g, const dlrt_gpt_config *c,
                       const dlrt_gpt_shard *shard, dlrt_tensor_t *tokens,
                       dlrt_tensor_t **out, dlrt_tensor_t **table) {
  int rc = dlrt_gpt_check(c);
  if (rc < 0) return rc;
  int64_t shape[DLRT_MAX_DIMS];
  if (dlrt_tensor_shape(tokens, shape) != 2 || dlrt_tensor_dtype(tokens) != DLRT_I32)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "dlrt_gpt_build: the tokens must be a "
                           "batch x context tensor of I32");
  int64_t batch = shape[0], T = shape[1];
  if (T > c->context)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "dlrt_gpt_build: windows of %lld tokens "
                           "for a model of context %lld: use --context %lld or shorter "
                           "windows", (long long)T, (long long)c->context, (long long)T);
  gpt_builder b = {.g = g, .c = c, .proj_std = 0.02f / sqrtf(2.0f * (float)c->layers),
                   .shard = shard};

  dlrt_tensor_t *wte;
  /* The embeddings and each block's output, the residual stream, end the
   * segments of --checkpoint blocks (DLRT_CHECKPOINT_MARKS). */
  dlrt_tensor_t *x = dlrt_checkpoint_mark(g, embeddings(&b, tokens, batch, T, &wte));
  for (int i = 0; i < c->layers; i++) {
    x = dlrt_checkpoint_mark(g, block(&b, x, i, batch, T));
    if ((rc = dlrt_graph_status(g)) < 0) return rc;
  }
  *out = layer_norm(&b, x, "transformer.ln_f");
  *table = wte;
  return dlrt_graph_status(g);
}

int dlrt_gpt_build(dlrt_graph_t *g, const dlrt_gpt_config *c, dlrt_tensor_t *tokens,
                   dlrt_tensor_t **logits) {
  DLRT__CHECK_ARG(g && c && tokens && logits, "dlrt_gpt_build: an argument is NULL");
  *logits = NULL;
  dlrt_tensor_t *x, *wte;
  int rc = build_trunk(g, c, NULL, tokens, &x, &wte);
  if (rc < 0) return rc;
  /* The LM head is the token embedding, transposed: (B*T) x V. */
  *logits = dlrt_matmul(g, x, wte, 0, 1);
  return dlrt_graph_status(g);
}

int dlrt_gpt_build_loss(dlrt_graph_t *g, const dlrt_gpt_config *c, dlrt_tensor_t *tokens,
                        dlrt_tensor_t *targets, float smoothing, dlrt_tensor_t **loss) {
  DLRT__CHECK_ARG(g && c && tokens && targets && loss,
                  "dlrt_gpt_build_loss: an argument is NULL");
  *loss = NULL;
  dlrt_tensor_t *x, *wte;
  int rc = build_trunk(g, c, NULL, tokens, &x, &wte);
  if (rc < 0) return rc;
  /* The head and the loss in one op: the (B*T) x V logits are never stored. */
  *loss = dlrt_linear_cross_entropy(g, x, wte, targets, smoothing);
  return dlrt_graph_status(g);
}

int dlrt_gpt_shard_check(const dlrt_gpt_config *c, const dlrt_gpt_shard *s) {
  int rc = dlrt_gpt_check(c);
  if (rc < 0) return rc;
  DLRT__CHECK_ARG(s, "dlrt_gpt_shard_check: shard is NULL");
  if (s->heads < 1 || s->head_first < 0 || s->head_first + s->heads > c->heads)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "a GPT shard of heads %d .. %d: the model "
                           "has %lld heads, and each shard needs at least one",
                           s->head_first, s->head_first + s->heads - 1, (long long)c->heads);
  if (s->vocab < 0 || s->vocab_first < 0 || s->vocab_first + s->vocab > c->vocab)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "a GPT shard of vocabulary rows %lld .. %lld: "
                           "the model has %lld", (long long)s->vocab_first,
                           (long long)(s->vocab_first + s->vocab), (long long)c->vocab);
  return DLRT_OK;
}

int dlrt_gpt_build_loss_shard(dlrt_graph_t *g, const dlrt_gpt_config *c,
                              const dlrt_gpt_shard *shard, dlrt_tensor_t *tokens,
                              dlrt_tensor_t *targets, float smoothing, dlrt_tensor_t **loss) {
  DLRT__CHECK_ARG(g && c && shard && tokens && targets && loss,
                  "dlrt_gpt_build_loss_shard: an argument is NULL");
  *loss = NULL;
  int rc = dlrt_gpt_shard_check(c, shard);
  if (rc < 0) return rc;
  dlrt_tensor_t *x, *wte;
  if ((rc = build_trunk(g, c, shard, tokens, &x, &wte)) < 0) return rc;
  /* Split by vocabulary, each peer makes its logits and the row statistics
   * are combined (x through f: each peer's d x is partial); else every
   * peer makes the whole head alike. */
  *loss = shard->vocab > 0
              ? dlrt_linear_cross_entropy_shard(g, dlrt_tp_copy(g, x), wte, targets,
                                                shard->vocab_first, c->vocab, smoothing)
              : dlrt_linear_cross_entropy(g, x, wte, targets, smoothing);
  return dlrt_graph_status(g);
}

int dlrt_gpt_build_decode(dlrt_graph_t *g, const dlrt_gpt_config *c, dlrt_tensor_t *tokens,
                          dlrt_tensor_t *pos, dlrt_tensor_t **logits) {
  DLRT__CHECK_ARG(g && c && tokens && pos && logits, "dlrt_gpt_build_decode: an argument is "
                  "NULL");
  *logits = NULL;
  int rc = dlrt_gpt_check(c);
  if (rc < 0) return rc;
  int64_t shape[DLRT_MAX_DIMS];
  if (dlrt_tensor_shape(tokens, shape) != 2 || shape[1] != 1 ||
      dlrt_tensor_dtype(tokens) != DLRT_I32)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "dlrt_gpt_build_decode: the tokens must be "
                           "a batch x 1 tensor of I32 (one new token per sequence)");
  int64_t batch = shape[0], C = c->embd;
  if (dlrt_tensor_shape(pos, shape) != 1 || shape[0] != batch ||
      dlrt_tensor_dtype(pos) != DLRT_I32)
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "dlrt_gpt_build_decode: the positions must "
                           "be an I32 tensor of %lld elements (one per sequence)",
                           (long long)batch);
  gpt_builder b = {.g = g, .c = c, .proj_std = 0.02f / sqrtf(2.0f * (float)c->layers),
                   .pos = pos};
  /* The training graph's parameters, made in its order with its names. */
  dlrt_tensor_t *wte = param(&b, "transformer.wte.weight", c->vocab, C, 0.02f, 0);
  dlrt_tensor_t *wpe = param(&b, "transformer.wpe.weight", c->context, C, 0.02f, 0);
  /* Each token's row plus its position's row (B x C). */
  int64_t flat[2] = {batch, C};
  dlrt_tensor_t *x = dlrt_add(g, dlrt_reshape(g, dlrt_embedding(g, tokens, wte), 2, flat),
                              dlrt_embedding(g, pos, wpe));
  for (int i = 0; i < c->layers; i++) {
    x = block(&b, x, i, batch, 1);
    if ((rc = dlrt_graph_status(g)) < 0) return rc;
  }
  x = layer_norm(&b, x, "transformer.ln_f");
  *logits = dlrt_matmul(g, x, wte, 0, 1); /* B x V */
  return dlrt_graph_status(g);
}

int dlrt__gpt_model(const dlrt_trainer_config *cfg, dlrt_gpt_config *out) {
  dlrt_gpt_config c;
  if (!cfg || !cfg->model) return 0;
  for (int i = 0; i < N_PRESETS; i++)
    if (strcasecmp(cfg->model, presets[i].name) == 0) {
      c = presets[i].cfg;
      dlrt_gpt_override(&c, &cfg->gpt);
      if (out) *out = c;
      return 1;
    }
  return 0;
}

int dlrt__gpt_build_stage(dlrt_graph_t *g, const dlrt_gpt_config *c,
                          const dlrt_gpt_shard *shard, dlrt_tensor_t *in, int64_t batch,
                          int64_t T, int first, int last, dlrt_tensor_t *targets,
                          float smoothing, dlrt_tensor_t **out) {
  *out = NULL;
  int rc = shard ? dlrt_gpt_shard_check(c, shard) : dlrt_gpt_check(c);
  if (rc < 0) return rc;
  if (first < 0 || first >= last || last > c->layers || T < 1 || T > c->context ||
      (last == c->layers) != (targets != NULL))
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "dlrt__gpt_build_stage: blocks [%d, %d) of "
                           "%lld, windows of %lld, targets %s", first, last,
                           (long long)c->layers, (long long)T, targets ? "given" : "none");
  gpt_builder b = {.g = g, .c = c, .proj_std = 0.02f / sqrtf(2.0f * (float)c->layers),
                   .shard = shard};
  dlrt_tensor_t *x = in, *wte = NULL;
  /* Each block a checkpoint segment, as in the whole model (--checkpoint
   * blocks within a pipeline stage). */
  if (first == 0) x = dlrt_checkpoint_mark(g, embeddings(&b, in, batch, T, &wte));
  for (int i = first; i < last; i++) {
    x = dlrt_checkpoint_mark(g, block(&b, x, i, batch, T));
    if ((rc = dlrt_graph_status(g)) < 0) return rc;
  }
  if (last == c->layers) {
    x = layer_norm(&b, x, "transformer.ln_f");
    /* A stage without the embeddings has the head's own copy of wte (of
     * a shard: its vocabulary rows, as the first stage's). */
    int by_vocab = shard && shard->vocab > 0;
    if (!wte)
      wte = param(&b, "transformer.wte.weight", by_vocab ? shard->vocab : c->vocab, c->embd,
                  0.02f, 0);
    /* A shard's head as dlrt_gpt_build_loss_shard's: x through f, the row
     * statistics combined over the peers. */
    x = by_vocab ? dlrt_linear_cross_entropy_shard(g, dlrt_tp_copy(g, x), wte, targets,
                                                   shard->vocab_first, c->vocab, smoothing)
                 : dlrt_linear_cross_entropy(g, x, wte, targets, smoothing);
  }
  *out = x;
  return dlrt_graph_status(g);
}
