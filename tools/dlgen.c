/* dlgen — samples text from a GPT checkpoint with a key/value cache: the
 * decode graph (dlrt_gpt_build_decode) runs one position per step, its
 * attention over the keys and values earlier steps left on the device, and
 * the next token is drawn on the host from the logits (temperature, top-k,
 * top-p) and printed at once. Public API only. Exit status: 0 success, 1 a
 * dlrt call failed (the checkpoint unreadable or not a GPT's), 2 usage
 * error. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlgen.h"
#include "dlrt.h"

const char tool_name[] = "dlgen";

/* GPT-2's <|endoftext|>, which starts its samples (vocabularies that have it). */
#define GPT2_END_OF_TEXT 50256

/* ---------------------------------------------------------------- drawing */

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* A token and its logit, then its share of probability. */
typedef struct {
  int32_t id;
  double value;
} candidate;

/* Larger values first; equal ones by id, so the order is the same everywhere. */
static int by_value(const void *a, const void *b) {
  const candidate *x = a, *y = b;
  if (x->value != y->value) return x->value > y->value ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* The next token from `vocab` logits: the likeliest (temperature 0, the
 * lowest id among equals), or a draw from softmax(logits / temperature)
 * restricted to the top_k likeliest (0: all) and then to the likeliest
 * whose probabilities sum to top_p. `c` holds vocab candidates. */
static int32_t draw(const float *logits, int64_t vocab, const dlgen_options *o, uint64_t *rng,
                    candidate *c) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; i++)
    if (logits[i] > logits[best]) best = i;
  if (o->temperature == 0.0f) return (int32_t)best;
  /* exp((l - max) / T): the largest term is 1 whatever T, nothing overflows. */
  double top = logits[best], sum = 0;
  for (int64_t i = 0; i < vocab; i++) c[i] = (candidate){(int32_t)i, logits[i]};
  int64_t n = vocab;
  int restrict_k = o->top_k > 0 && o->top_k < vocab, restrict_p = o->top_p < 1.0f;
  if (restrict_k || restrict_p) qsort(c, (size_t)vocab, sizeof *c, by_value);
  if (restrict_k) n = o->top_k;
  for (int64_t i = 0; i < n; i++) sum += c[i].value = exp((c[i].value - top) / o->temperature);
  if (restrict_p) {
    /* The shortest run of likeliest tokens holding top_p of what is left. */
    double want = o->top_p * sum, kept = 0;
    int64_t m = 0;
    while (m < n && kept < want) kept += c[m++].value;
    n = m, sum = kept;
  }
  double u = (double)(splitmix64(rng) >> 11) * (1.0 / 9007199254740992.0) * sum, at = 0;
  for (int64_t i = 0; i < n; i++)
    if ((at += c[i].value) > u) return c[i].id;
  return c[n - 1].id; /* u rounded up to the sum */
}

/* ---------------------------------------------------------------- the prompt */

/* The prompt's tokens into *out (*count of them): its bytes with byte
 * tokens, else token ids separated by spaces or commas; none given: the
 * start token (printed = 0). STATUS_USAGE for a bad id. */
static int prompt_tokens(const dlgen_options *o, int64_t vocab, int32_t **out, int64_t *count,
                         int *printed) {
  const char *text = o->prompt ? o->prompt : "";
  size_t len = strlen(text);
  int32_t *t = malloc((len + 1) * sizeof *t);
  if (!t) return fprintf(stderr, "dlgen: out of memory\n"), STATUS_FAIL;
  int64_t n = 0;
  if (vocab == 256) {
    for (size_t i = 0; i < len; i++) t[n++] = (unsigned char)text[i];
  } else {
    for (const char *p = text; *p;) {
      if (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') {
        p++;
        continue;
      }
      char *end;
      errno = 0;
      long long id = strtoll(p, &end, 10);
      if (end == p || errno || id < 0 || id >= vocab || (*end && !strchr(" ,\t\n", *end))) {
        fprintf(stderr, "dlgen: --prompt: '%.*s' is not a token id of this model (0 to "
                "%" PRId64 "); its vocabulary is not bytes, so the prompt is token ids "
                "such as \"464 3290\"\n", (int)strcspn(p, " ,\t\n"), p, vocab - 1);
        free(t);
        return STATUS_USAGE;
      }
      t[n++] = (int32_t)id;
      p = end;
    }
  }
  *printed = n > 0;
  if (n == 0) t[n++] = vocab == 256 ? '\n' : vocab > GPT2_END_OF_TEXT ? GPT2_END_OF_TEXT : 0;
  *out = t, *count = n;
  return 0;
}

/* ---------------------------------------------------------------- output */

typedef struct {
  int bytes;     /* byte tokens: raw bytes, else ids */
  int any;       /* something printed */
  int last;      /* the last byte printed */
} printer;

static void put_token(printer *p, int32_t token) {
  if (p->bytes) {
    putchar(token);
    p->last = token;
  } else {
    printf("%s%" PRId32, p->any ? " " : "", token);
  }
  p->any = 1;
  fflush(stdout);
}

static void put_end(printer *p) {
  if (p->any && (!p->bytes || p->last != '\n')) putchar('\n');
  fflush(stdout);
}

/* ---------------------------------------------------------------- the model */

typedef struct {
  dlrt_graph_t *g;
  dlrt_tensor_t *token, *pos, *logits;
  dlrt_exec_t *e;
} decoder;

/* One position: the token in, its logits (vocab floats) out; *ms: how long. */
static int step(decoder *d, int32_t token, int32_t position, float *logits, int64_t vocab,
                double *ms) {
  double t0 = tool_now_s();
  int rc = dlrt_exec_write(d->e, d->token, &token, sizeof token);
  if (rc == DLRT_OK) rc = dlrt_exec_write(d->e, d->pos, &position, sizeof position);
  if (rc == DLRT_OK) rc = dlrt_exec_run(d->e, DLRT_RUN_FORWARD);
  if (rc == DLRT_OK) rc = dlrt_exec_read(d->e, d->logits, logits, (size_t)vocab * sizeof *logits);
  *ms = (tool_now_s() - t0) * 1e3;
  return rc;
}

static int make_decoder(dlrt_device_t *dev, const dlrt_gpt_config *cfg,
                        const dlrt_host_tensor *params, int n, decoder *d) {
  int64_t one = 1, token_shape[2] = {1, 1};
  int rc = dlrt_graph_create(&d->g);
  if (rc < 0) return tool_fail("cannot build the model", rc);
  d->token = dlrt_input(d->g, "token", DLRT_I32, 2, token_shape);
  d->pos = dlrt_input(d->g, "position", DLRT_I32, 1, &one);
  if ((rc = dlrt_gpt_build_decode(d->g, cfg, d->token, d->pos, &d->logits)) < 0)
    return tool_fail("cannot build the model", rc);
  dlrt_keep(d->g, d->logits);
  if ((rc = dlrt_exec_create(d->g, dev, 0, &d->e)) < 0)
    return tool_fail("cannot place the model on the device", rc);
  if ((rc = dlrt_exec_import(d->e, params, n)) < 0)
    return tool_fail("cannot load the checkpoint's parameters", rc);
  return 0;
}

/* The prompt through the model, then the sampled tokens, each printed as it
 * comes; the per-position times in ms[] and the token fed at each position
 * in fed[] (context entries each). */
static int generate(const dlgen_options *o, const dlrt_gpt_config *cfg, decoder *d,
                    const int32_t *prompt, int64_t n_prompt, int echo, double *ms,
                    int32_t *fed, int64_t *positions, int64_t *sampled, double *sample_s) {
  int64_t vocab = cfg->vocab;
  float *logits = malloc((size_t)vocab * sizeof *logits);
  candidate *c = malloc((size_t)vocab * sizeof *c);
  if (!logits || !c) {
    free(logits), free(c);
    return fprintf(stderr, "dlgen: out of memory\n"), STATUS_FAIL;
  }
  printer out = {.bytes = vocab == 256};
  uint64_t rng = o->seed;
  int rc = DLRT_OK, status = 0;
  for (int64_t i = 0; echo && i < n_prompt; i++) put_token(&out, prompt[i]);
  *positions = *sampled = 0;
  double t0 = 0;
  int32_t token = prompt[0];
  for (int64_t t = 0; o->tokens > 0 && rc == DLRT_OK; t++) {
    if (t == cfg->context) {
      put_end(&out);
      fprintf(stderr, "dlgen: reached the model's context of %" PRId64 " positions after %"
              PRId64 " of %lld tokens; stopping\n", cfg->context, *sampled, o->tokens);
      break;
    }
    if (t + 1 == n_prompt) t0 = tool_now_s(); /* the step of the first token sampled */
    rc = step(d, token, (int32_t)t, logits, vocab, &ms[t]);
    fed[t] = token;
    ++*positions;
    if (t + 1 < n_prompt) {
      token = prompt[t + 1];
      continue;
    }
    if (rc < 0) break;
    token = draw(logits, vocab, o, &rng, c);
    put_token(&out, token);
    if (++*sampled == o->tokens) break;
  }
  *sample_s = *sampled ? tool_now_s() - t0 : 0;
  if (rc < 0) {
    put_end(&out);
    status = tool_fail("sampling failed", rc);
  } else if (*sampled == o->tokens || o->tokens == 0) {
    put_end(&out);
  }
  free(logits), free(c);
  return status;
}

/* --timing: each position's time, and the rates, on stderr. */
static void report_timing(const double *ms, int64_t positions, int64_t n_prompt,
                          int64_t sampled, double sample_s) {
  double total = 0;
  for (int64_t t = 0; t < positions; t++) {
    fprintf(stderr, "dlgen: position %" PRId64 ": %.3f ms\n", t, ms[t]);
    total += ms[t];
  }
  fprintf(stderr, "dlgen: %" PRId64 " positions (%" PRId64 " of the prompt) in %.3f s of model "
          "steps: %.1f positions/s; %" PRId64 " tokens sampled in %.3f s: %.1f tokens/s\n",
          positions, n_prompt < positions ? n_prompt : positions, total / 1e3,
          total > 0 ? positions / (total / 1e3) : 0.0, sampled, sample_s,
          sample_s > 0 ? sampled / sample_s : 0.0);
}

static int by_ms(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* --bench: the steps at the positions given, again, in turn (the order
 * reversed every other round, so that neither always follows the other),
 * each with the token it had, so the caches keep their values. */
static int bench(const dlgen_options *o, const dlrt_gpt_config *cfg, decoder *d,
                 const int32_t *fed, int64_t positions) {
  for (int i = 0; i < o->n_bench; i++)
    if (o->bench[i] >= positions) {
      fprintf(stderr, "dlgen: --bench %" PRId64 ": the run reached position %" PRId64 " only "
              "(the model's context is %" PRId64 "): give --tokens so that the prompt and the "
              "sample reach it\n", o->bench[i], positions - 1, cfg->context);
      return STATUS_USAGE;
    }
  float *logits = malloc((size_t)cfg->vocab * sizeof *logits);
  if (!logits) return fprintf(stderr, "dlgen: out of memory\n"), STATUS_FAIL;
  static double ms[DLGEN_BENCH_MAX][DLGEN_BENCH_ROUNDS];
  int rc = DLRT_OK;
  for (int r = 0; r < DLGEN_BENCH_ROUNDS && rc == DLRT_OK; r++)
    for (int k = 0; k < o->n_bench && rc == DLRT_OK; k++) {
      int i = r % 2 ? o->n_bench - 1 - k : k;
      int64_t p = o->bench[i];
      rc = step(d, fed[p], (int32_t)p, logits, cfg->vocab, &ms[i][r]);
    }
  free(logits);
  if (rc < 0) return tool_fail("the --bench steps failed", rc);
  double first = 0;
  for (int i = 0; i < o->n_bench; i++) {
    qsort(ms[i], DLGEN_BENCH_ROUNDS, sizeof ms[i][0], by_ms);
    double median = ms[i][DLGEN_BENCH_ROUNDS / 2];
    if (i == 0) first = median;
    fprintf(stderr, "dlgen: bench: position %" PRId64 ": median %.3f ms (min %.3f, max %.3f) "
            "over %d steps", o->bench[i], median, ms[i][0], ms[i][DLGEN_BENCH_ROUNDS - 1],
            DLGEN_BENCH_ROUNDS);
    if (i > 0) fprintf(stderr, "; %.3f x position %" PRId64 "'s", median / first, o->bench[0]);
    fputc('\n', stderr);
  }
  return 0;
}

int main(int argc, char **argv) {
  dlgen_options o;
  int status = dlgen_parse_options(argc, argv, &o);
  if (status == TOOL_HELP) return dlgen_usage(stdout), 0;
  if (status == TOOL_VERSION) return dlgen_version(stdout), 0;
  if (status) return tool_usage_fail(o.error);

  dlrt_host_tensor *params = NULL;
  int n_params = 0, rc;
  dlrt_device_t *dev = NULL;
  decoder d = {0};
  int32_t *prompt = NULL;
  double *ms = NULL;
  int32_t *fed = NULL;
  dlrt_gpt_config cfg;
  if ((rc = dlrt_init()) < 0) return tool_fail("cannot start dlrt", rc);
  if ((rc = dlrt_gpt_checkpoint_load(o.checkpoint, &cfg, &params, &n_params)) < 0) {
    status = tool_fail("cannot read the checkpoint", rc);
    goto done;
  }
  if ((rc = dlrt_device_open(o.device, &dev)) < 0) {
    tool_fail(NULL, rc);
    fputs("dlgen: run dlinfo to list devices\n", stderr);
    status = rc == DLRT_ERR_BAD_SPEC || rc == DLRT_ERR_NO_DEVICE ? STATUS_USAGE : STATUS_FAIL;
    goto done;
  }
  if (o.threads >= 0 && (rc = dlrt_set_cpu_threads(o.threads)) < 0) {
    status = tool_fail("cannot set the CPU threads", rc);
    goto done;
  }
  int64_t n_prompt;
  int echo;
  if ((status = prompt_tokens(&o, cfg.vocab, &prompt, &n_prompt, &echo))) goto done;
  if (n_prompt > cfg.context) {
    fprintf(stderr, "dlgen: the prompt is %" PRId64 " tokens; the model's context is %" PRId64
            ": give a shorter one\n", n_prompt, cfg.context);
    status = STATUS_USAGE;
    goto done;
  }
  if (!(ms = calloc((size_t)cfg.context, sizeof *ms)) ||
      !(fed = calloc((size_t)cfg.context, sizeof *fed))) {
    fprintf(stderr, "dlgen: out of memory\n");
    status = STATUS_FAIL;
    goto done;
  }
  if ((status = make_decoder(dev, &cfg, params, n_params, &d))) goto done;
  dlrt_host_tensors_free(params, n_params); /* on the device now */
  params = NULL;
  int64_t positions, sampled;
  double sample_s;
  status = generate(&o, &cfg, &d, prompt, n_prompt, echo, ms, fed, &positions, &sampled,
                    &sample_s);
  if (!status && o.timing) report_timing(ms, positions, n_prompt, sampled, sample_s);
  if (!status && o.n_bench) status = bench(&o, &cfg, &d, fed, positions);
done:
  dlrt_exec_destroy(d.e);
  dlrt_graph_destroy(d.g);
  dlrt_host_tensors_free(params, n_params);
  free(prompt), free(ms), free(fed);
  dlrt_shutdown();
  return status;
}
