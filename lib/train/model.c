/* model.c — sequential models from a preset name or a model file, built into
 * a graph (the format is documented at dlrt_model_build in dlrt.h). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "util/status.h"

static const char *const mlp_layers[] = {"flatten", "linear 512", "relu", "linear 512", "relu",
                                         NULL};
static const char *const cnn_layers[] = {"conv2d 32 3", "relu",       "maxpool 2",
                                         "conv2d 64 3 pad=1", "relu", "maxpool 2",
                                         "flatten",     "linear 128", "relu", NULL};

typedef struct {
  dlrt_graph_t *g;
  dlrt_tensor_t *x; /* the running activation */
  int layer;        /* for parameter names: fc1, conv2, ... */
  const char *file; /* for messages: the file, or the preset */
  int line;
  int last_linear_out; /* output size of the last layer if it was linear, else -1 */
} builder;

static int fail(builder *b, const char *fmt, const char *detail) {
  char what[256];
  snprintf(what, sizeof what, fmt, detail);
  return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s:%d: %s", b->file, b->line, what);
}

/* Parses a positive integer argument ("32") or a key=value one ("pad=1"). */
static int parse_int(const char *text, long *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end || v < 0 || v > (1L << 30)) return 0;
  *out = v;
  return 1;
}

static int add_param(builder *b, const char *kind, const char *what, int ndim,
                     const int64_t *shape, int64_t fan_in, int64_t fan_out,
                     dlrt_tensor_t **out) {
  char name[64];
  snprintf(name, sizeof name, "%s%d.%s", kind, b->layer, what);
  *out = dlrt_param(b->g, name, ndim, shape, DLRT_INIT_FAN_IN_UNIFORM, fan_in, fan_out);
  return *out ? DLRT_OK : dlrt_graph_status(b->g);
}

static int linear(builder *b, long out) {
  if (b->x && dlrt_tensor_numel(b->x) && b->x) {
    int64_t shape[DLRT_MAX_DIMS];
    if (dlrt_tensor_shape(b->x, shape) != 2) b->x = dlrt_flatten(b->g, b->x);
  }
  if (!b->x) return dlrt_graph_status(b->g);
  int64_t shape[DLRT_MAX_DIMS];
  dlrt_tensor_shape(b->x, shape);
  int64_t in = shape[1];
  int64_t ws[2] = {out, in}, bs[1] = {out};
  dlrt_tensor_t *w, *bias;
  b->layer++;
  int rc = add_param(b, "fc", "weight", 2, ws, in, out, &w);
  if (rc == DLRT_OK) rc = add_param(b, "fc", "bias", 1, bs, in, out, &bias);
  if (rc < 0) return rc;
  b->x = dlrt_linear(b->g, b->x, w, bias);
  b->last_linear_out = (int)out;
  return b->x ? DLRT_OK : dlrt_graph_status(b->g);
}

/* One layer line: "conv2d 32 3 pad=1". */
static int layer(builder *b, char *text) {
  char *words[8];
  int n = 0;
  for (char *w = strtok(text, " \t\r\n"); w && n < 8; w = strtok(NULL, " \t\r\n")) words[n++] = w;
  if (n == 0) return DLRT_OK;
  const char *kind = words[0];
  long pos[2] = {-1, -1}, stride = -1, pad = 0, dil = 1;
  /* dropout takes a probability, not a whole number. */
  if (strcmp(kind, "dropout") == 0) {
    char *end;
    double p = n == 2 ? strtod(words[1], &end) : -1;
    if (n != 2 || *end || !(p >= 0 && p < 1))
      return fail(b, "dropout needs one probability in [0, 1), as in \"dropout 0.5\"%s", "");
    b->x = dlrt_dropout(b->g, b->x, (float)p);
    b->last_linear_out = -1;
    return b->x ? DLRT_OK : dlrt_graph_status(b->g);
  }
  int n_pos = 0;
  for (int i = 1; i < n; i++) {
    char *eq = strchr(words[i], '=');
    long v;
    if (!eq) {
      if (n_pos == 2 || !parse_int(words[i], &v) || v == 0)
        return fail(b, "unexpected argument \"%s\"", words[i]);
      pos[n_pos++] = v;
      continue;
    }
    *eq = '\0';
    if (!parse_int(eq + 1, &v)) return fail(b, "\"%s\" needs a whole number", words[i]);
    if (strcmp(words[i], "stride") == 0 && v > 0) stride = v;
    else if (strcmp(words[i], "pad") == 0) pad = v;
    else if (strcmp(words[i], "dilation") == 0 && v > 0) dil = v;
    else return fail(b, "unknown or invalid option \"%s\"", words[i]);
  }
  int rc = DLRT_OK;
  if (strcmp(kind, "relu") == 0 && n_pos == 0) {
    b->x = dlrt_relu(b->g, b->x);
  } else if (strcmp(kind, "tanh") == 0 && n_pos == 0) {
    b->x = dlrt_tanh(b->g, b->x);
  } else if (strcmp(kind, "sigmoid") == 0 && n_pos == 0) {
    b->x = dlrt_sigmoid(b->g, b->x);
  } else if (strcmp(kind, "gelu") == 0 && n_pos == 0) {
    b->x = dlrt_gelu(b->g, b->x);
  } else if (strcmp(kind, "batchnorm") == 0 && n_pos == 0) {
    int64_t shape[DLRT_MAX_DIMS];
    int nd = dlrt_tensor_shape(b->x, shape);
    if (nd != 2 && nd != 4) return fail(b, "%s needs N x C or N x C x H x W input", kind);
    int64_t cs[1] = {shape[1]};
    dlrt_tensor_t *gamma, *beta;
    char name[64];
    b->layer++;
    snprintf(name, sizeof name, "bn%d.weight", b->layer);
    gamma = dlrt_param(b->g, name, 1, cs, DLRT_INIT_ONES, 1, 1);
    snprintf(name, sizeof name, "bn%d.bias", b->layer);
    beta = dlrt_param(b->g, name, 1, cs, DLRT_INIT_ZEROS, 1, 1);
    b->x = dlrt_batch_norm(b->g, b->x, gamma, beta, 0.1f, 1e-5f);
  } else if (strcmp(kind, "avgpool") == 0 && n_pos == 1) {
    b->x = dlrt_avg_pool2d(b->g, b->x, (int)pos[0], (int)(stride > 0 ? stride : pos[0]));
  } else if (strcmp(kind, "flatten") == 0 && n_pos == 0) {
    b->x = dlrt_flatten(b->g, b->x);
  } else if (strcmp(kind, "linear") == 0 && n_pos == 1) {
    return linear(b, pos[0]);
  } else if (strcmp(kind, "maxpool") == 0 && n_pos == 1) {
    b->x = dlrt_max_pool2d(b->g, b->x, (int)pos[0], (int)(stride > 0 ? stride : pos[0]));
  } else if (strcmp(kind, "conv2d") == 0 && n_pos == 2) {
    int64_t shape[DLRT_MAX_DIMS];
    if (dlrt_tensor_shape(b->x, shape) != 4)
      return fail(b, "%s needs an image input (N x C x H x W); is it after a flatten or "
                  "linear?", kind);
    int64_t ws[4] = {pos[0], shape[1], pos[1], pos[1]}, bs[1] = {pos[0]};
    int64_t fan_in = shape[1] * pos[1] * pos[1];
    dlrt_tensor_t *w, *bias;
    b->layer++;
    rc = add_param(b, "conv", "weight", 4, ws, fan_in, pos[0] * pos[1] * pos[1], &w);
    if (rc == DLRT_OK) rc = add_param(b, "conv", "bias", 1, bs, fan_in, pos[0], &bias);
    if (rc < 0) return rc;
    b->x = dlrt_conv2d(b->g, b->x, w, bias, (int)(stride > 0 ? stride : 1), (int)pad, (int)dil);
  } else {
    static const char *const known[] = {"relu",    "tanh",    "sigmoid", "gelu",
                                        "flatten", "linear",  "maxpool", "avgpool",
                                        "conv2d",  "batchnorm"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
      if (strcmp(kind, known[i]) == 0)
        return fail(b, "wrong arguments for %s (see the model format in README)", kind);
    return fail(b, "unknown layer \"%s\" (known: conv2d, maxpool, avgpool, linear, batchnorm, "
                "relu, tanh, sigmoid, gelu, dropout, flatten)", kind);
  }
  b->last_linear_out = -1;
  if (!b->x) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", dlrt_last_error());
    return dlrt__set_error(DLRT_ERR_INVALID_ARG, "%s:%d: %s", b->file, b->line, msg);
  }
  return rc;
}

/* One layer of a model: its text and where it came from (for messages). */
typedef struct {
  char text[512];
  int line;
} layer_entry;

/* The layers of a preset or a model file, comments and blank lines gone. */
static int read_layers(const char *spec, layer_entry **out, int *n) {
  const char *const *preset = strcmp(spec, "mlp") == 0   ? mlp_layers
                              : strcmp(spec, "cnn") == 0 ? cnn_layers
                                                         : NULL;
  int cap = 16, count = 0;
  layer_entry *l = malloc((size_t)cap * sizeof *l);
  if (!l) return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
  FILE *f = NULL;
  if (!preset && !(f = fopen(spec, "r"))) {
    int e = errno;
    free(l);
    return dlrt__set_error(e == ENOENT ? DLRT_ERR_NOT_FOUND : DLRT_ERR_IO,
                           "model \"%s\": not a preset (mlp, cnn) and not a readable file: %s",
                           spec, strerror(e));
  }
  char line[512];
  for (int no = 1;; no++) {
    if (preset ? !preset[no - 1] : !fgets(line, sizeof line, f)) break;
    if (preset) snprintf(line, sizeof line, "%s", preset[no - 1]);
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    int blank = 1;
    for (char *c = line; *c; c++) {
      *c = (char)tolower((unsigned char)*c);
      if (!isspace((unsigned char)*c)) blank = 0;
    }
    if (blank) continue;
    if (count == cap) {
      layer_entry *grown = realloc(l, (size_t)(cap *= 2) * sizeof *l);
      if (!grown) {
        free(l);
        if (f) fclose(f);
        return dlrt__set_error(DLRT_ERR_OOM, "out of host memory");
      }
      l = grown;
    }
    snprintf(l[count].text, sizeof l[count].text, "%s", line);
    l[count++].line = no;
  }
  if (f) fclose(f);
  *out = l;
  *n = count;
  return DLRT_OK;
}

/* Layers [from, to) of `l` into the builder; `to` may reach one past the
 * list: the final "linear classes" the model appends when it does not end
 * in one. */
static int run_layers(builder *b, layer_entry *l, int n, int from, int to, int64_t classes) {
  int rc = DLRT_OK;
  for (int i = from; i < to && i < n && rc == DLRT_OK; i++) {
    char text[512];
    snprintf(text, sizeof text, "%s", l[i].text);
    b->line = l[i].line;
    rc = layer(b, text);
  }
  if (rc == DLRT_OK && to > n && b->last_linear_out != classes) {
    b->line = n > 0 ? l[n - 1].line + 1 : 1;
    rc = linear(b, classes);
  }
  return rc;
}

int dlrt_model_build(dlrt_graph_t *g, const char *spec, dlrt_tensor_t *input, int64_t classes,
                     dlrt_tensor_t **logits) {
  DLRT__CHECK_ARG(g && spec && input && logits, "graph, spec, input or logits is NULL");
  DLRT__CHECK_ARG(classes >= 2, "dlrt_model_build: %lld classes (need at least 2)",
                  (long long)classes);
  layer_entry *l;
  int n, rc = read_layers(spec, &l, &n);
  if (rc < 0) return rc;
  builder b = {.g = g, .x = input, .file = spec, .last_linear_out = -1};
  rc = run_layers(&b, l, n, 0, n + 1, classes);
  free(l);
  if (rc < 0) return rc;
  *logits = b.x;
  return DLRT_OK;
}

int dlrt__model_layer_count(const char *spec, int *count) {
  layer_entry *l;
  int n, rc = read_layers(spec, &l, &n);
  if (rc < 0) return rc;
  free(l);
  *count = n + 1; /* the final linear counts as a layer (empty when the file has it) */
  return DLRT_OK;
}

int dlrt__model_stage(dlrt_graph_t *g, const char *spec, const int64_t input_shape[4],
                      int64_t classes, int first, int last, dlrt_tensor_t **x,
                      dlrt_tensor_t **y) {
  *x = *y = NULL;
  layer_entry *l;
  int n, rc = read_layers(spec, &l, &n);
  if (rc < 0) return rc;
  /* The layers before the stage, on a scratch graph: the stage's input shape
   * and the numbering of its parameters (fc3 stays fc3). */
  dlrt_graph_t *scratch = NULL;
  builder b = {.file = spec, .last_linear_out = -1};
  if ((rc = dlrt_graph_create(&scratch)) == DLRT_OK) {
    b.g = scratch;
    b.x = dlrt_input(scratch, "images", DLRT_F32, 4, input_shape);
    rc = b.x ? run_layers(&b, l, n, 0, first, classes) : dlrt_graph_status(scratch);
  }
  if (rc == DLRT_OK) {
    int64_t shape[DLRT_MAX_DIMS];
    int nd = dlrt_tensor_shape(b.x, shape);
    b.g = g;
    b.x = *x = dlrt_input(g, first == 0 ? "images" : "activations", DLRT_F32, nd, shape);
    /* A later stage's input gets a gradient: the earlier stage's upstream one. */
    if (b.x && first > 0) b.x->needs_grad = 1;
    rc = b.x ? run_layers(&b, l, n, first, last, classes) : dlrt_graph_status(g);
  }
  dlrt_graph_destroy(scratch);
  free(l);
  if (rc == DLRT_OK) *y = b.x;
  return rc;
}
